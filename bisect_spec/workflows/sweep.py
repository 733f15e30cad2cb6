"""A sweep: a strategy's flag space evaluated on one target, stored as a run (:func:`sweep`, :class:`SweepRun`).

The run is a directory (:mod:`bisect_spec.runtime.store`): ``run.json`` (what was asked), the journal
(every outcome as it arrives, so a killed run resumes where it stopped), then ``results.jsonl.gz``,
``summary.json``, ``summary.md``, ``report.html`` and ``timing.json``. :func:`failures_for_ci` is
what ``--fail-on`` counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import queue
import threading
import time
from collections import ChainMap
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import PATH_TOKEN, Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.signature import Signature
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import DRAFT, MODEL, Session, Target, target_record
from bisect_spec.runtime.store import DURABLE
from bisect_spec.runtime.target_spec import TargetSpec
from bisect_spec.search.shape import TP, DeploymentShape, deployment_shape
from bisect_spec.workflows import smoke
from bisect_spec.workflows.shrink import evidence_of, failure_hints, shrink_in_session

_T = TypeVar("_T")


@dataclass
class SweepResult:
    """A finished (or budget-stopped) sweep: where it is stored and what it found."""

    run_id: str
    run_path: Path
    target: Target
    summary: dict[str, Any]
    outcomes: list[Outcome]
    reused: int = 0
    torn: int = 0
    worker: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "bisect-spec/sweep/1", "run": self.run_id, "path": str(self.run_path),
                "reused": self.reused, "torn_records": self.torn, "summary": self.summary}


ProgressFn = Callable[[int, int, int, str], None]


def _spec_from_meta(meta: dict[str, Any]) -> TargetSpec:
    asked = dict(meta["asked"])
    asked["env"] = tuple((str(k), str(v)) for k, v in asked.get("env") or ())
    asked["inherit_env"] = False  # the run's environment, whatever the caller's is now
    return TargetSpec(**asked)


def sweep(spec: TargetSpec | None = None, *, strategy: str | Any = "default", jobs: int | None = None,
          runs_dir: Path = Path("runs"), resume: str | None = None, seed: int | None = None,
          random_budget: int | None = None, timeout: float = 60.0, use_cache: bool = True,
          progress: ProgressFn | None = None, on_start: Callable[[Session], None] | None = None,
          extra_env: tuple[tuple[str, str], ...] = (), shrink: bool = False, fix: bool = False,
          shrink_evaluations: int = 300, shrink_seconds: float = 60.0, executor: str = "local",
          address: str | None = None, notify: Callable[[str], None] | None = None,
          algorithms: str = "draft") -> SweepResult:
    """Sweep a strategy's flag space on one target and store the run.

    ``algorithms``: which ``--speculative-algorithm`` values the plan sweeps besides none: ``"draft"`` (the
    algorithms the named draft serves; every one where no draft was named), ``"all"`` (every one the release
    accepts), or a comma-separated list.

    A covering array is evaluated in parallel, then the strategy's branch rows
    (:mod:`bisect_spec.search.branches`) and masking-aware rounds; a Hypothesis-driven search spends
    ``random_budget`` more evaluations steered towards new outcomes; peeling runs every
    failing row again without its failure. Every result is
    journaled as it arrives; ``resume=RUN`` continues a stopped run without
    re-evaluating or duplicating, and outcomes cached by earlier runs are reused.
    With ``shrink``, every failure signature is then shrunk from the smallest
    configuration seen to a 1-minimal reproducer, written to ``reproducers/<id>/``.
    ``executor="ray"`` evaluates on Ray actors (``address``: ``None`` starts a local Ray
    instance, ``auto`` joins this machine's cluster); the run store is the same.
    The run's state and phases are :class:`SweepRun`'s.

    :raises StoreError: run missing/locked/unwritable. :raises UsageError: bad strategy/flags.
    """
    return SweepRun(spec, strategy=strategy, jobs=jobs, runs_dir=runs_dir, resume=resume, seed=seed,
                    random_budget=random_budget, timeout=timeout, use_cache=use_cache, progress=progress,
                    on_start=on_start, extra_env=extra_env, shrink=shrink, fix=fix,
                    shrink_budget=(shrink_evaluations, shrink_seconds), executor=executor, address=address,
                    notify=notify, algorithms=algorithms).run()


#: journal phase -> the progress bar's phase, where the bar would otherwise restart at every switch
PROGRESS_PHASE = {"absence": "round", "projection": "round", "branch": "cover"}


class SweepRun:
    """One sweep's state, from the plan to the reports, with each phase a method (as Hypothesis'
    ``ConjectureRunner`` owns a test's run).

    What a run holds, and who fills it:

    - the target, the session (its workers), the strategy, the flag space and the fitted plan
      (:meth:`_plan`); the run directory and its journal (created, or reopened by ``resume``);
    - :attr:`outcomes` by configuration key: the journal's, then every phase's, each recorded once
      (:meth:`record`: journal, cross-run cache, progress);
    - the rows each phase added, in the order the summary lists them: :attr:`plan`, then
      :attr:`branch_configs`, :attr:`round_configs`, :attr:`searched`, :attr:`peel_configs`;
    - what the shrinks share: :attr:`memo` (every outcome known) and :attr:`learnt` (signature ->
      1-minimal reproducers shrunk so far), so a later phase starts where an earlier one stopped.

    The phases run in this order (:meth:`run`): :meth:`cover`, :meth:`branch_rows`,
    :meth:`masking_rounds`, :meth:`random_search`, :meth:`peel_rows`, :meth:`summarise`,
    :meth:`shrink_signatures`, :meth:`write_reports`. A phase evaluates only what the journal and the
    cache do not hold, so a resumed run repeats none of its work. The reports are written from the
    run in memory; ``bisect-spec report`` reads the same files back and renders the same pages.
    """

    def __init__(self, spec: TargetSpec | None = None, *, strategy: str | Any = "default", jobs: int | None = None,
                 runs_dir: Path = Path("runs"), resume: str | None = None, seed: int | None = None,
                 random_budget: int | None = None, timeout: float = 60.0, use_cache: bool = True,
                 progress: ProgressFn | None = None, on_start: Callable[[Session], None] | None = None,
                 extra_env: tuple[tuple[str, str], ...] = (), shrink: bool = False, fix: bool = False,
                 shrink_budget: tuple[int, float] = (300, 60.0), executor: str = "local",
                 address: str | None = None, notify: Callable[[str], None] | None = None,
                 algorithms: str = "draft") -> None:
        from bisect_spec.runtime import store
        from bisect_spec.search.plan import Strategy, load_strategy

        self.started = time.time()
        self.runs_dir = runs_dir
        self.progress = progress
        self.on_start = on_start
        self._told_started = False
        self.notify = notify
        #: the deployment shape's own evaluations, cached after the plan's rows (:meth:`_cached_or_evaluated`)
        self.shape_outcomes: list[Outcome] = []
        self.extra_env = extra_env
        self.shrink, self.fix, self.shrink_budget = shrink, fix, shrink_budget
        self.executor = executor
        self.use_cache = use_cache
        self.store: store.Run | None = None
        if resume is not None:
            self.store = store.open_run(runs_dir, resume)
            meta = self.store.meta
            spec = _spec_from_meta(meta)
            self.strategy = Strategy(**{
                **meta["strategy"], "include": tuple(meta["strategy"]["include"]),
                "exclude": tuple(meta["strategy"]["exclude"]), "core": tuple(meta["strategy"]["core"]),
                "values": {k: tuple(v) for k, v in meta["strategy"]["values"].items()},
                "forbid": {k: tuple(v) for k, v in meta["strategy"].get("forbid", {}).items()},
                "fit": meta["strategy"].get("fit", False),  # a run from before fit.py: its plan
                "fixed": tuple(meta["strategy"].get("fixed", ())),
                "algorithms": tuple(meta["strategy"].get("algorithms", ()))})
        elif isinstance(strategy, Strategy):  # built by the caller (``diff``: a strategy with the user's flags fixed)
            self.strategy = strategy
        else:
            self.strategy = load_strategy(strategy, seed=seed, random_budget=random_budget)
        self.spec = spec or TargetSpec()
        self.target = self.spec.resolve()
        self.asked_algorithms = algorithms
        if resume is None:
            self.strategy = dataclasses.replace(self.strategy, algorithms=self._algorithms(algorithms))
        self.session = Session(self.target, jobs=jobs, timeout=timeout,
                               log_dir=(self.store.path if self.store else None), extra_env=extra_env,
                               executor=executor, address=address)
        # filled by the phases
        self.outcomes: dict[str, Outcome] = {}
        self.signatures: set[Signature] = set()
        self.phase_seconds: dict[str, float] = {}  # each phase's wall-clock seconds (``timing.json``)
        self.total = 0  # what the progress bar counts up to: the plan, the search budget, each later phase's rows
        self.reused = 0
        self.cache: Any = None
        self.target_key = ""
        self.memo: MutableMapping[str, Outcome] = ChainMap({}, self.outcomes)
        self.learnt: dict[str, list[Config]] = {}
        self.branch_configs: list[Config] = []
        self.round_configs: list[Config] = []
        self.searched: list[Config] = []
        self.peel_configs: list[Config] = []
        self.masking: Any = None
        self.peeled: Any = None
        self.ordered: list[Outcome] = []
        self.summary: dict[str, Any] = {}

    @property
    def run_store(self) -> Any:
        assert self.store is not None, "the run directory is created by _plan"
        return self.store

    # -- the whole run ------------------------------------------------------------------------------

    def run(self) -> SweepResult:
        """Every phase, then the reports; the session's workers stop at the end, whatever happens.

        :raises Interrupted: on Ctrl-C once the run exists, saying how to resume it.
        """
        try:
            with self._timed("plan"):
                self._plan()
            with self.run_store:
                self._read_journal()
                with self._timed("cover"):
                    self.cover()
                if self.strategy.branches:
                    with self._timed("branch"):
                        self.branch_rows()
                if self.strategy.rounds > 0:
                    with self._timed("rounds"):
                        self.masking_rounds()
                with self._timed("search"):
                    self.random_search()
                if self.strategy.peel:
                    with self._timed("peel"):
                        self.peel_rows()
                if self.cache is not None:
                    self.cache.close()
                with self._timed("summary"):
                    self.summarise()
                if self.shrink:
                    with self._timed("shrink"):
                        self.shrink_signatures()
                self.run_store.seal()  # complete, and read rarely from now on: gzipped before the reports (peak size)
                with self._timed("reports"):
                    self.write_reports()
                return SweepResult(self.run_store.id, self.run_store.path, self.target, self.summary, self.ordered,
                                   self.reused, self.run_store.torn, self.session.info)
        except KeyboardInterrupt:
            if self.store is None:
                raise
            from bisect_spec.errors import Interrupted

            kept = sum(1 for _ in self.store.journal_entries())
            planned = int(self.store.meta.get("plan_size") or 0) + int(self.store.meta.get("search_budget") or 0)
            raise Interrupted(f"interrupted: {kept}/{planned} recorded in run {self.store.id}; "
                              f"resume with bisect-spec sweep --resume {self.store.id}") from None
        finally:
            self.session.close()

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        """The wall-clock seconds of one phase, for ``timing.json``'s ``phases`` (a benchmark compares them)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phase_seconds[phase] = round(self.phase_seconds.get(phase, 0.0) + time.perf_counter() - started, 3)

    def _plan(self) -> None:
        """The flag space and the fitted plan; a new run's directory, with what decides its target."""
        from bisect_spec.runtime import store
        from bisect_spec.search.plan import fitted_plan
        from bisect_spec.search.space import without_draft_path

        target, chosen = self.target, self.strategy
        table = self.session.flags()
        self.space = chosen.space(table)
        if target.draft is None or target.draft.path is None:  # no draft, or nextn/ngram: no path to give
            self.space = without_draft_path(self.space)
        algorithm = self.space.spec("--speculative-algorithm")
        if self.asked_algorithms not in ("draft", "all") and algorithm is not None and not any(algorithm.values):
            raise UsageError(f"--algorithms {','.join(chosen.algorithms)}: SGLang {target.release} has no such "
                             f"--speculative-algorithm; give draft, all, or names it accepts")
        self.shape = (DeploymentShape.from_dict(self.store.meta["shape"]) if self.store is not None
                      and self.store.meta.get("shape") else self._deployment_shape())
        self.space = dataclasses.replace(self.space, base=self.shape.base)
        if self.notify is not None:
            self.notify(self.shape.line)
        self.plan, self.search_space, unfit = fitted_plan(
            self.space, chosen, model_config=target.model.config, hardware=target.hardware.record,
            will_not_start=[(self.session.canonical_flag(TP), value, why) for value, why in self.shape.will_not_start])
        if self.notify is not None and self.store is None:
            self.notify(estimate_line(len(self.plan), self._rate_key(), self.session.pool.jobs))
        if self.store is None:
            # the release is recorded as resolved: a resume must not drift to a newer install
            # what decides the target (how a pasted command was read is not part of it)
            asked = {**{k: v for k, v in self.spec.__dict__.items()
                        if k not in ("model_chosen", "draft_chosen", "inherit_env")},
                     "release": target.release, "env": [list(kv) for kv in target.env]}
            meta = {"schema": "bisect-spec/run/1", "asked": asked, "target": target.describe(),
                    "draft_named": self.spec.draft_chosen,
                    "strategy": chosen.to_dict(), "seed": chosen.seed, "space": self.space.describe(),
                    "plan_size": len(self.plan), "search_budget": chosen.random_budget, "shape": self.shape.to_dict(),
                    "tested_once": [u.to_dict() for u in unfit]}
            self.store = store.create_run(self.runs_dir, meta)
            self.session.pool.spec = self.session.environment.worker_spec(
                hardware=target.hardware.record, gpus=target.hardware.gpus,
                log_path=str(self.store.path / f"worker-{target.release}.log"), extra_env=self.extra_env)

    def _rate_key(self) -> str:
        """What a sweep's pace depends on: the release, the model, the box and the algorithms swept."""
        return (f"{self.target.release} {self.target.model.name} {self.target.hardware.label} "
                f"{self.strategy.name} {','.join(self.strategy.algorithms) or 'all'}")

    def _algorithms(self, asked: str) -> tuple[str, ...]:
        """The algorithms the plan sweeps besides none (empty: every one): ``asked`` as :func:`sweep` documents it;
        by default the named draft's, unless the strategy lists its own values for ``--speculative-algorithm``."""
        if self.strategy.algorithms:
            return tuple(self.strategy.algorithms)
        if asked == "all":
            return ()
        if asked == "draft":  # a strategy that lists its algorithms (quick, nightly, a file's [values]) keeps them
            draft = self.target.draft
            listed = any(flag in ("--speculative-algorithm", "--speculative-algo") for flag in self.strategy.values)
            return draft.algorithms if draft is not None and self.spec.draft_chosen and not listed else ()
        names = tuple(a.strip().upper() for a in asked.split(",") if a.strip())
        if not names:
            raise UsageError("--algorithms takes draft, all, or names such as EAGLE3,NGRAM")
        return names

    def _deployment_shape(self) -> DeploymentShape:
        """The base of every row (:mod:`bisect_spec.search.shape`): a few evaluations of the widths the box runs."""
        fixed = Config.from_argv(list(self.strategy.fixed))
        hardware = self.target.hardware
        return deployment_shape(self._cached_or_evaluated, gpus=hardware.gpus,
                                given=self.session.canonical(fixed), model=self.target.model.name,
                                gpu=hardware.name.replace("-", " ").upper(), tp=self.session.canonical_flag(TP))

    def _cached_or_evaluated(self, batch: Sequence[Config]) -> list[Outcome]:
        """Outcomes of ``batch`` outside any phase (the deployment shape's widths): from the cross-run cache where it
        holds them, else evaluated (the workers started only then). Written to the cache once the plan's rows are
        evaluated (:meth:`cover`), so a run's count of reused outcomes stays its phases' own."""
        from bisect_spec.runtime import store

        key = store.OutcomeCache.target_key(target_record(self.target))
        cache = store.OutcomeCache(environments.home() / "cache" / "outcomes.sqlite") if self.use_cache else None
        try:
            hits = cache.get_many(key, [c.key() for c in batch]) if cache is not None else {}
            found = {c.key(): Outcome.from_dict(hits[c.key()]) for c in batch if c.key() in hits}
            todo = [c for c in batch if c.key() not in found]
            if todo:
                self._start()
                for outcome in self.session.evaluate_many(todo):
                    found[outcome.config.key()] = outcome
                    self.shape_outcomes.append(outcome)
            return [found[c.key()] for c in batch]
        finally:
            if cache is not None:
                cache.close()

    def _start(self) -> None:
        """The session's workers, started once; the caller's ``on_start`` told once, also where something before
        the first evaluation started them (the flag table on a cold cache, the deployment shape's widths)."""
        if not self.session.info:
            self.session.start()
        if self.on_start and not self._told_started:
            self._told_started = True
            self.on_start(self.session)

    def _read_journal(self) -> None:
        """What a resumed run recorded already, and the cross-run cache."""
        from bisect_spec.runtime import store

        for key, entry in {e["key"]: e for e in self.run_store.journal_entries()}.items():
            self.outcomes[key] = Outcome.from_dict(entry["outcome"])
        self.signatures = {o.signature for o in self.outcomes.values() if o.signature}
        self.total = len(self.plan) + self.strategy.random_budget
        if self.use_cache:
            self.cache = store.OutcomeCache(environments.home() / "cache" / "outcomes.sqlite")
        self.target_key = store.OutcomeCache.target_key(target_record(self.target))

    # -- recording ----------------------------------------------------------------------------------

    def record(self, phase: str, index: int, outcome: Outcome, cached: bool) -> None:
        """One outcome, as it arrives: journaled, kept, cached across runs (durable ones), counted."""
        key = outcome.config.key()
        self.run_store.append({"phase": phase, "index": index, "key": key, "cached": cached,
                               "outcome": outcome.to_dict()})
        self.outcomes[key] = outcome
        if outcome.signature:
            self.signatures.add(outcome.signature)
        if self.cache is not None and not cached and outcome.status.value in DURABLE:
            self.cache.put(self.target_key, key, outcome.to_dict())
        if self.progress:  # absence trials run inside the masking rounds: one bar for both
            self.progress(len(self.outcomes), self.total, len(self.signatures), PROGRESS_PHASE.get(phase, phase))

    def evaluate_journaled(self, batch: Sequence[Config], phase: str) -> None:
        """Outcomes for a later phase's batch (masking rounds, peeling): those not known yet, from the
        cross-run cache first, else evaluated; each journaled as ``phase``."""
        todo = [c for c in batch if c.key() not in self.outcomes]
        self.total += len(todo)
        if self.cache is not None and todo:
            hits = self.cache.get_many(self.target_key, [c.key() for c in todo])
            for config in todo:
                if config.key() in hits:
                    self.record(phase, len(self.outcomes), Outcome.from_dict(hits[config.key()]), True)
            todo = [c for c in todo if c.key() not in self.outcomes]
        if todo:
            self.session.start()
            for outcome in self.session.evaluate_many(todo):
                self.record(phase, len(self.outcomes), outcome, False)

    # -- the phases ---------------------------------------------------------------------------------

    def cover(self) -> None:
        """The fitted plan's rows (a covering array), journaled as phase ``cover`` under their plan index."""
        todo = [(i, c) for i, c in enumerate(self.plan) if c.key() not in self.outcomes]
        if self.cache is not None and todo:
            hits = self.cache.get_many(self.target_key, [c.key() for _, c in todo])
            for index, config in todo:
                if config.key() in hits:
                    self.record("cover", index, Outcome.from_dict(hits[config.key()]), True)
                    self.reused += 1
            todo = [(i, c) for i, c in todo if c.key() not in self.outcomes]
        if todo:
            self._start()
            index_of = {c.key(): i for i, c in todo}
            for outcome in self.session.evaluate_many(c for _, c in todo):
                self.record("cover", index_of[outcome.config.key()], outcome, False)
        if self.cache is not None:  # the shape's widths, for the next run's shape
            for outcome in self.shape_outcomes:
                if outcome.status.value in DURABLE and outcome.config.key() not in self.outcomes:
                    self.cache.put(self.target_key, outcome.config.key(), outcome.to_dict())
        self.shape_outcomes.clear()

    def branch_rows(self) -> None:
        """Branch rows (:mod:`bisect_spec.search.branches`), journaled as phase ``branch``: every context first,
        then the rows of the contexts that got past the argument checks (passed, or failed in a later stage: the
        branch's checks ran and let them through). The contexts start from the plan's passing rows only, so
        a resumed run (whose journal holds later phases too) builds the same ones."""
        from bisect_spec.search.branches import contexts, passing_bases

        space = self.search_space
        found = contexts(space, passing_bases(space, [c for c in self.plan if self.outcomes[c.key()].passed]))
        batch = [context for context, _ in found]
        self.evaluate_journaled(batch, "branch")
        self.branch_configs.extend(batch)
        rows = list(dict.fromkeys(row for context, context_rows in found if _past_the_checks(self.outcomes[context.key()])
                                  for row in context_rows))
        self.evaluate_journaled(rows, "branch")
        self.branch_configs.extend(rows)

    def masking_rounds(self) -> None:
        """Masking-aware covering (:mod:`bisect_spec.search.masking`) wired to the session, the cache and the journal.

        The plan's and the branch rows over the fitted space are the first round (already evaluated); each
        later round's rows are journaled as phase ``round``, the trials that learn what a failure needs
        absent (:func:`bisect_spec.search.masking.needed_absent`) as phase ``absence``, the projections of
        unexplained rows onto known reproducers (:meth:`bisect_spec.search.masking.Rounds.projections`) as
        phase ``projection``; failures are shrunk with the sweep's shrink budget, and every reproducer
        shrunk is added to :attr:`learnt`.
        """
        from bisect_spec.search.masking import Key, cover_unmasked

        space, strategy = self.search_space, self.strategy

        def row_of(config: Config) -> tuple[int, ...] | None:
            given = config.as_dict()
            row = []
            for spec in space.specs:
                value = given.get(spec.flag)
                if value is not None and value not in spec.values:
                    return None
                row.append(spec.values.index(value) if value is not None else 0)
            return tuple(row)

        def evaluate_as(phase: str) -> Callable[[list[Config]], list[Key]]:
            def evaluate(batch: list[Config]) -> list[Key]:
                self.evaluate_journaled(batch, phase)
                self.round_configs.extend(c for c in batch if c not in self.round_configs)
                return [outcome_key(self.outcomes[c.key()]) for c in batch]
            return evaluate

        def shrink(config: Config, signature: str) -> Config | None:
            return self._shrink_row(config, signature)

        def shrink_many(pairs: list[tuple[Config, str]]) -> list[Config | None]:
            self.session.start()
            return list(self._side_by_side([functools.partial(self._shrink_row, c, k) for c, k in pairs]))

        def candidates(config: Config, signature: str) -> list[str]:
            outcome = self.outcomes.get(config.key())
            if outcome is None:
                return []
            return sorted(failure_hints(self.session, outcome))

        first = [row for row in (row_of(c) for c in [*self.plan, *self.branch_configs]) if row is not None]
        self.masking = cover_unmasked(space, first, evaluate=evaluate_as("round"), shrink=shrink,
                                      strength=strategy.strength, core_strength=strategy.core_strength,
                                      max_rounds=strategy.rounds, row_limit=strategy.round_rows, candidates=candidates,
                                      evaluate_absent=evaluate_as("absence"),
                                      evaluate_projection=evaluate_as("projection"), shrink_many=shrink_many)

    def _side_by_side(self, calls: Sequence[Callable[[], _T]]) -> Iterator[_T]:
        """Each call's result, in the order of ``calls``, up to one call per worker running at once: a sweep's
        shrinks, each a chain of one evaluation after another, keep every worker busy side by side. Each shrink
        reads only its own signature's reproducers and outcomes no history changes, so the results are those of
        one after another (a shrink's time budget aside: it counts the waits for a worker too). Where the caller
        stops early (an error, an interrupt), the calls not started are dropped, and the threads are daemons: a
        running call ends at its next evaluation once the workers are stopped, and never holds the process open."""
        jobs = max(1, int(getattr(self.session.pool, "jobs", 1) or 1))
        if jobs == 1 or len(calls) <= 1:
            yield from (call() for call in calls)
            return
        futures: list[Future[_T]] = [Future() for _ in calls]
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(calls)):
            todo.put(index)
        stopped = threading.Event()

        def serve() -> None:
            while not stopped.is_set():
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                if not futures[index].set_running_or_notify_cancel():
                    continue
                try:
                    futures[index].set_result(calls[index]())
                except BaseException as exc:  # the caller meets it where it reads this result
                    futures[index].set_exception(exc)

        for _ in range(min(jobs, len(calls))):
            threading.Thread(target=serve, name="bisect-spec-shrink", daemon=True).start()
        try:
            for future in futures:
                yield future.result()
        finally:
            stopped.set()
            for future in futures:
                future.cancel()

    def _shrink_row(self, config: Config, signature: str, *, hinted: bool = True) -> Config | None:
        """A row shrunk with the sweep's shrink budget, when it stays 1-minimal with the same signature;
        the reproducer is added to :attr:`learnt`. ``hinted``: start from the reproducers learnt so far."""
        from bisect_spec.reduce.shrink import Budget

        self.session.start()
        result = shrink_in_session(self.session, config, budget=Budget(*self.shrink_budget), fix=False,
                                   first=self.outcomes.get(config.key()),
                                   learnt=self.learnt.get(signature, []) if hinted else (), memo=self.memo).result
        if result.signature is None or result.signature.id != signature or result.status != "minimal":
            return None
        minimal: Config = result.minimal
        if minimal not in self.learnt.setdefault(signature, []):
            self.learnt[signature].append(minimal)
        return minimal

    def random_search(self) -> None:
        """The strategy's Hypothesis-driven search (:mod:`bisect_spec.search.random_search`), journaled as
        phase ``search``: ``random_budget`` evaluations steered towards outcomes not seen yet."""
        from bisect_spec.search.random_search import search

        def key_of(config: Config) -> str:
            key = config.key()
            if key not in self.outcomes:
                hit = self.cache.get_many(self.target_key, [key]).get(key) if self.cache is not None else None
                if hit is not None:
                    self.record("search", len(self.outcomes), Outcome.from_dict(hit), True)
                    self.reused += 1
                else:
                    self.session.start()
                    self.record("search", len(self.outcomes), self.session.evaluate(config), False)
            found = self.outcomes[key]
            return found.signature.id if found.signature else found.status.value

        self.searched = search(self.search_space, key_of, budget=self.strategy.random_budget, seed=self.strategy.seed,
                               storage=environments.home() / "cache" / "hypothesis")  # nothing left in the cwd

    def peel_rows(self) -> None:
        """Peeling (:mod:`bisect_spec.search.peel`) wired to the session, the cache and the journal.

        The reproducers the masking-aware rounds learnt are the known ones; a failing signature
        without one is shrunk first (its smallest row, the sweep's shrink budget). One flag of a
        reproducer is peeled at a time, the strategy's core flags last. Peeled rows are journaled as
        phase ``peel``. A plan focused on the named draft's algorithms peels only rows that run one of them.
        """
        from bisect_spec.search.peel import peel

        masking, strategy, space = self.masking, self.strategy, self.search_space
        failing: dict[Config, str] = {}
        focus = {a.upper() for a in strategy.algorithms}
        for config in [*self.plan, *self.branch_configs, *self.round_configs, *self.searched]:
            algorithm = config.get("--speculative-algorithm")
            if focus and (not algorithm or algorithm[0].upper() not in focus):
                continue  # a plan focused on the draft peels the draft's rows: what bites a user of it
            key = outcome_key(self.outcomes[config.key()])
            if key is not None and ":" not in key:
                failing.setdefault(config, key)
        minimal: dict[str, Config] = {}
        for signature, argvs in (masking.forbidden.items() if masking is not None else ()):
            minimal[signature] = min((Config.from_argv(a) for a in argvs), key=len)
        unshrunk = sorted(set(failing.values()) - set(minimal))
        smallest = [min((c for c, k in failing.items() if k == signature), key=lambda c: (len(c), c.key()))
                    for signature in unshrunk]
        if unshrunk:
            self.session.start()
        shrunk = self._side_by_side([functools.partial(self._shrink_row, config, signature, hinted=False)
                                     for config, signature in zip(smallest, unshrunk, strict=True)])
        for signature, found in zip(unshrunk, shrunk, strict=True):
            if found is not None:
                minimal[signature] = found

        def evaluate(batch: list[Config]) -> list[str | None]:
            self.evaluate_journaled(batch, "peel")
            self.peel_configs.extend(batch)
            return [outcome_key(self.outcomes[c.key()]) for c in batch]

        missing: dict[str, Config] = {}  # what each signature's reproducer above needs absent
        for signature, lists in (masking.needs_absent.items() if masking is not None else ()):
            argvs = masking.forbidden[signature]
            shortest = min(range(len(argvs)), key=lambda i: len(Config.from_argv(argvs[i])))
            if lists[shortest]:
                missing[signature] = Config.from_argv(lists[shortest])
        self.peeled = peel(list(failing.items()), minimal, evaluate, depth=strategy.peel_depth, keep=strategy.core,
                           missing=missing, complete=lambda c: space.complete(c.as_dict()), base=space.base,
                           width=strategy.peel_width or None, remove=strategy.peel_remove)

    def summarise(self) -> None:
        """Every row once, in phase order (:attr:`ordered`), and the summary: signatures grouped by origin."""
        from bisect_spec.report.summary import summarise

        ordered = [self.outcomes[c.key()] for c in self.plan]
        seen = {c.key() for c in self.plan}
        for config in [*self.branch_configs, *self.round_configs, *self.searched, *self.peel_configs]:
            if config.key() not in seen:
                seen.add(config.key())
                ordered.append(self.outcomes[config.key()])
        self.ordered = ordered
        summary = summarise(ordered, self.space, self.target.describe(), self.strategy.name, self.strategy.seed)
        summary["shape"] = self.shape.to_dict()
        starts = self._starts(ordered)
        if starts is not None:
            summary["starts"] = starts
        if (release_warning := smoke.warning(self.target.release)) is not None:
            summary["release_warning"] = release_warning
        if self.masking is not None:
            summary["masking"] = self.masking.to_dict()
        if self.peeled is not None:
            summary["peel"] = self.peeled.to_dict()
        self.summary = summary

    def _starts(self, ordered: Sequence[Outcome]) -> dict[str, Any] | None:
        """"Starts on your box" (:func:`bisect_spec.report.summary.starts_on_the_box`): the configuration a user of
        the named draft launches, as a paste-ready command with the user's model and draft, and the draft's knobs
        by verdict at the deployment shape. None without a named draft."""
        from bisect_spec.report.bug_report import launch_command
        from bisect_spec.report.summary import knob_map, starts_on_the_box
        from bisect_spec.workflows.shrink import report_names

        draft = self.target.draft
        named = self.run_store.meta.get("draft_named", self.spec.draft_chosen)  # a resumed run: as the user asked
        if draft is None or not named:
            return None
        users = frozenset(draft.algorithms)
        starts = starts_on_the_box(ordered, self.space, users) or {"argv": None}
        if starts["argv"] is not None:
            names = report_names(self.target, spec=self.spec)
            starts["command"] = launch_command(Config.from_argv(starts["argv"]), names, dict(self.target.env),
                                               list(self.target.model.extra_args))
        starts["algorithms"] = sorted(users)
        starts["knobs"] = knob_map(ordered, users, self.shape.base)
        return starts

    def shrink_signatures(self) -> None:
        """Shrink every failure signature of the summary in place (adds ``shrink``: the minimal argv and friends),
        with reproducers in ``reproducers/<id>/``; then triage the summary.

        A signature the sweep already shrank (:attr:`learnt`, or the masking rounds' reproducers) starts from
        that reproducer where its smallest row holds it.
        """
        from bisect_spec.reduce.shrink import Budget
        from bisect_spec.report.summary import triage

        summary, outcomes, out_dir = self.summary, self.ordered, self.run_store.path / "reproducers"
        failures = [s for s in summary["signatures"] if s["kind"] == "failed"]
        by_config = {o.config: o for o in outcomes}
        forbidden = (summary.get("masking") or {}).get("forbidden") or {}  # reproducers the masking rounds learnt
        self.session.start()

        def shrunk(entry: dict[str, Any]) -> Any:
            smallest = Config.from_argv(entry["smallest"])
            known = [*self.learnt.get(entry["id"], []), *(Config.from_argv(argv) for argv in forbidden.get(entry["id"], []))]
            return shrink_in_session(self.session, smallest, budget=Budget(*self.shrink_budget), fix=self.fix,
                                     out_dir=out_dir, evidence=evidence_of(outcomes, entry["id"]),
                                     first=by_config.get(smallest), learnt=list(dict.fromkeys(known)), memo=self.memo)

        reports = self._side_by_side([functools.partial(shrunk, entry) for entry in failures])
        for number, (entry, report) in enumerate(zip(failures, reports, strict=True), 1):
            result = report.result
            entry["shrink"] = {"status": result.status, "minimal_argv": result.minimal.argv(),
                               "evaluations": result.evaluations, "stop_reason": result.stop_reason,
                               "same_signature": result.signature is not None and result.signature.id == entry["id"],
                               "explanation": [f["verdict"] for f in (report.explanation or {}).get("flags", [])],
                               "fixes": [f["argv"] for f in (report.fixes or {}).get("fixes", [])[:3]],
                               "reproducers": f"{out_dir.name}/{entry['id']}" if report.files else None}
            avoids = self._draft_path_avoids(result.minimal, entry["id"])
            if avoids is not None:
                entry["shrink"]["draft_path_avoids"] = avoids
            minimal = report.minimal
            if minimal is not None and minimal.signature is not None and minimal.signature.id == entry["id"]:
                entry["sglang_message"] = str(minimal.exception.get("message") or "")  # the reproducer's own words
                entry["sglang_message_from"] = minimal.config.argv()
            if self.progress:
                self.progress(number, len(failures), len(summary["signatures"]), "shrink")
        triage(summary)

    def _draft_path_avoids(self, minimal: Config, signature: str) -> bool | None:
        """Whether the target's draft path avoids a failure whose minimal reproducer runs a drafted algorithm
        with none (one evaluation, cached): True when with it the reproducer no longer fails with ``signature``.
        None where that is not the question (no draft path to give, or the reproducer needs none)."""
        if self.session.missing_draft(minimal, self.target.model.config) is None:
            return None
        with_path = self.session.with_draft(minimal)
        if with_path == minimal:
            return None
        outcome = self.session.evaluate(with_path)
        return outcome.signature is None or outcome.signature.id != signature

    def write_reports(self) -> None:
        """``results.jsonl.gz``, ``summary.json``, ``summary.md``, ``report.html`` and ``timing.json``.

        The HTML page is rendered from the run in memory, as stored (keys sorted, local paths as
        placeholders): the page ``bisect-spec report RUN --format html`` renders from the files.
        """
        from bisect_spec.report.formats import render
        from bisect_spec.report.report_model import SweepInput
        from bisect_spec.report.text import summary_markdown
        from bisect_spec.runtime import store
        from bisect_spec.runtime.session import placeholder_file

        run, target = self.run_store, self.target
        local = {str(target.model.path): MODEL, str(placeholder_file()): PATH_TOKEN}
        if target.draft and target.draft.path:
            local[str(target.draft.path)] = DRAFT
        results = [reproducible(o.to_dict(), local) for o in self.ordered]
        run.write_results(results)
        run.write_json("summary.json", self.summary)
        run.write_text("summary.md", summary_markdown(self.summary))
        stored = SweepInput(run.id, _as_stored(run.meta), _as_stored(self.summary),
                            [json.loads(store.canonical_json(r)) for r in results])
        run.write_text("report.html", render(stored, "html"))
        if not self.reused:  # an estimate for the next run of this target (a run that reused outcomes says nothing)
            remember_rate(self._rate_key(), seconds=time.time() - self.started, rows=len(self.ordered),
                          plan=len(self.plan), jobs=self.session.pool.jobs)
        run.write_json("timing.json", {"started": self.started, "finished": time.time(),
                                       "seconds": round(time.time() - self.started, 3), "jobs": self.session.pool.jobs,
                                       "executor": self.executor,
                                       "reused_from_cache": self.reused, "torn_records": run.torn,
                                       "phases": dict(self.phase_seconds), "worker": self.session.info})


#: What a sweep costs where no earlier run of its target says: seconds per row on one worker, rows per plan row
#: (measured: the main job, 0.5.23, kimi-k2.6 + eagle3, its draft's algorithm, on 2 workers of this 2-core machine)
FIRST_GUESS = {"seconds_per_row": 0.35, "rows_per_plan_row": 1.6}


def _rates_file() -> Path:
    return environments.home() / "cache" / "rates.json"


def remember_rate(key: str, *, seconds: float, rows: int, plan: int, jobs: int) -> None:
    """Keep what a finished sweep cost (seconds per row per worker, rows per plan row) for :func:`estimate_line`."""
    from bisect_spec.runtime.files import write_if_changed

    if rows <= 0 or plan <= 0:
        return
    try:
        rates = json.loads(_rates_file().read_text())
    except (OSError, ValueError):
        rates = {}
    rates[key] = {"seconds_per_row": round(seconds * max(jobs, 1) / rows, 4), "rows_per_plan_row": round(rows / plan, 3)}
    with contextlib.suppress(OSError):  # an estimate is a courtesy: a read-only home loses it, not the run
        write_if_changed(_rates_file(), json.dumps(rates, indent=1, sort_keys=True))


def estimate_line(plan: int, key: str, jobs: int) -> str:
    """``plan: N rows to start with, about M more from the later phases: about T on J workers (from ...)``."""
    try:
        known = json.loads(_rates_file().read_text()).get(key)
    except (OSError, ValueError):
        known = None
    rate = known or FIRST_GUESS
    rows = round(plan * float(rate["rows_per_plan_row"]))
    seconds = rows * float(rate["seconds_per_row"]) / max(jobs, 1)
    took = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{max(seconds, 1):.0f} s"
    source = "from the last run of this target" if known else "a first guess: no earlier run of this target here"
    return (f"plan: {plan} rows, then about {max(rows - plan, 0)} from the later phases: about {took} on {jobs} "
            f"worker{'' if jobs == 1 else 's'} ({source})")


def _past_the_checks(outcome: Outcome) -> bool:
    """Passed, or failed in a stage after the server arguments' checks (the model built, the pool sized, …)."""
    from bisect_spec.model.outcome import stage_sort_key

    stage = str(outcome.record.get("stage") or "")
    return outcome.passed or (outcome.status.value == "failed" and stage_sort_key(stage) > stage_sort_key("check_server_args"))


def _as_stored(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as reading its JSON file back gives it (keys sorted, tuples as lists)."""
    result: dict[str, Any] = json.loads(json.dumps(data, sort_keys=True))
    return result


def outcome_key(outcome: Outcome) -> str | None:
    """A row's key for masking and peeling: None passed, a signature id, or ``status:…`` (crash, time-out)."""
    if outcome.passed:
        return None
    sig = outcome.signature
    if outcome.status.value != "failed" or sig is None:
        return f"{outcome.status.value}:{sig.id if sig else ''}"
    return sig.id


def failures_for_ci(summary: dict[str, Any], fail_on: str, *, runs_dir: Path, run_id: str) -> list[dict[str, Any]]:
    """The failure signatures that ``--fail-on`` counts: ``any`` every failure SGLang raised, ``new``
    those that the previous finished run of the same target in ``runs_dir`` did not have (matched by
    id or cross-release key; without a previous run every failure is new, as in a JUnit report
    without a baseline). Crashes and time-outs of the tool's own workers are not counted.

    :raises UsageError: ``fail_on`` is neither ``new`` nor ``any``.
    """
    from bisect_spec.runtime import store

    if fail_on not in ("new", "any"):
        raise UsageError(f"--fail-on takes new or any, not {fail_on!r}")
    failures = [s for s in summary["signatures"] if s.get("kind") == "failed"]
    if fail_on == "any":
        return failures
    earlier = [r for r in store.list_runs(runs_dir)
               if r["complete"] and r["id"] < run_id and r["target"] == summary["target"]]
    if not earlier:
        return failures
    _, _, before = store.read_run(runs_dir, earlier[-1]["id"])
    known = {s.get(k) for s in (before or {}).get("signatures", []) for k in ("id", "cross_release_key")}
    return [s for s in failures if s["id"] not in known and s["cross_release_key"] not in known]


def reproducible(record: dict[str, Any], local: dict[str, str]) -> dict[str, Any]:
    """An outcome without what varies between identical runs (durations, timestamps, local paths)."""

    def unlocal(value: Any) -> Any:
        if isinstance(value, str):
            for path, placeholder in local.items():
                value = value.replace(path, placeholder)
            return value
        if isinstance(value, list):
            return [unlocal(v) for v in value]
        if isinstance(value, dict):
            return {k: unlocal(v) for k, v in value.items()}
        return value

    kept = {k: v for k, v in record.items() if k not in ("seconds", "stderr_tail", "argv", "traceback_tail")}
    result: dict[str, Any] = unlocal(kept)
    return result

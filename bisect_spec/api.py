"""Public Python API: what the CLI calls, usable from your own code and tests.

Example (with SGLang 0.5.23 installed: ``bisect-spec env install 0.5.23``)::

    >>> from bisect_spec import api
    >>> target = api.TargetSpec(release="0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    >>> result = api.probe(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"], target)
    >>> print(result.outcome.status)
    failed
    >>> print(result.outcome.headline)
    AssertionError (srt/arg_groups/speculative_hook.py:... in _handle_eagle_family)
    >>> print(result.outcome.frame["statement"])
    assert cfg.speculative_eagle_topk is None and cfg.speculative_num_draft_tokens is None
    >>> result.notes
    ["added --speculative-draft-model-path for the 'eagle3' draft"]

Many evaluations: :class:`ProbeSession` (one warm worker, each probe a few milliseconds once it is up)::

    >>> with api.ProbeSession(api.TargetSpec(release="0.5.23", hardware="rtx-pro-6000")) as session:
    ...     for steps in ("1", "2"):
    ...         print(session.probe(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", steps]).outcome.status)
    failed
    failed

The examples in this package's docstrings run as doctests (``tests/unit/test_doctests.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import ChainMap
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.errors import BisectSpecError, ProfileError, ReleaseError, UsageError
from bisect_spec.errors import StoreError as BisectSpecStoreError
from bisect_spec.model.flags import CONFIG_ENV, PATH_TOKEN, Config, parse_command
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.model.signature import Signature
from bisect_spec.runtime import environments, profiles, sources
from bisect_spec.runtime.session import DRAFT, MODEL, Session, Target
from bisect_spec.runtime.target_spec import DEFAULT_DRAFT as DEFAULT_DRAFT
from bisect_spec.runtime.target_spec import DEFAULT_MODEL as DEFAULT_MODEL
from bisect_spec.runtime.target_spec import TargetSpec as TargetSpec
from bisect_spec.workflows import smoke
from bisect_spec.workflows.probe_result import ProbeResult as ProbeResult

log = logging.getLogger(__name__)

def understand_flags(tokens: Sequence[str], spec: TargetSpec) -> tuple[Config, TargetSpec, list[str]]:
    """Parse flags or a pasted launch command; find the model and draft it names.

    The pasted ``--model-path`` decides the model (see :mod:`bisect_spec.runtime.model_sources`): a local
    directory, the shipped profile it names, or a hub id's fetched ``config.json``; a path that names
    none of these is refused unless ``spec`` chose a profile explicitly. A pasted draft path not on
    this machine becomes the draft profile of the pasted algorithm.

    :return: the configuration, the target spec, notes saying what was used for what.
    :raises ProfileError: a model that cannot be identified, or two choices that disagree.
    """
    pasted = parse_command(tokens)
    notes: list[str] = list(pasted.notes)
    config = pasted.config
    if pasted.model_path is not None:
        spec = _pasted_model(pasted.model_path, spec, notes)
    if pasted.draft_path is not None:
        spec = _pasted_draft(pasted.draft_path, config, spec, notes)
    if pasted.draft_path is not None:
        config = config.with_("--speculative-draft-model-path", DRAFT)
    visible = config.env().get("CUDA_VISIBLE_DEVICES")
    if visible is not None:  # the box the command runs on: as many GPUs as it makes visible
        devices = [d for d in visible.split(",") if d.strip()]
        if not devices:
            raise UsageError("CUDA_VISIBLE_DEVICES is empty: no GPU would be visible to SGLang; drop it or name devices")
        spec = TargetSpec(**{**spec.__dict__, "gpus": len(devices)})
        config = config.without("CUDA_VISIBLE_DEVICES")
        notes.append(f"CUDA_VISIBLE_DEVICES={visible}: evaluating on {len(devices)} GPU(s) of the box")
    return config, spec, notes


def _pasted_model(path: str, spec: TargetSpec, notes: list[str]) -> TargetSpec:
    from bisect_spec.runtime.model_sources import fetch_config, is_hub_id, profile_named_by

    if spec.model_path is not None:
        notes.append(f"model: your --model-path {spec.model_path} (the pasted command says {path})")
        return spec
    if (Path(path).expanduser() / "config.json").is_file():
        notes.append(f"using the local model config at {path}")
        return TargetSpec(**{**spec.__dict__, "model_path": path})
    named = profile_named_by(path, profiles.model_names())
    if named is not None:
        if spec.model_chosen and spec.model != named:
            raise ProfileError(f"the pasted command runs {path} (profile '{named}') but --model says '{spec.model}': "
                               "drop one of them")
        notes.append(f"model path {path} is not on this machine: using the '{named}' profile (its published config.json)")
        return TargetSpec(**{**spec.__dict__, "model": named})
    if is_hub_id(path):
        directory = fetch_config(path, environments.home() / "hub" / "models")
        notes.append(f"model {path}: its config.json from the Hugging Face hub (cached in {directory})")
        return TargetSpec(**{**spec.__dict__, "model_path": str(directory)})
    if spec.model_chosen:
        notes.append(f"model path {path} is not on this machine: using the '{spec.model}' profile you chose")
        return spec
    raise ProfileError(f"model path {path} is not on this machine and names no shipped profile: pass --model NAME "
                       f"({', '.join(profiles.model_names())}) or --model-path DIR holding its config.json")


def _pasted_draft(path: str, config: Config, spec: TargetSpec, notes: list[str]) -> TargetSpec:
    from bisect_spec.runtime.model_sources import fetch_config, is_hub_id

    if spec.draft_path is not None:
        notes.append(f"draft: your --draft-path {spec.draft_path} (the pasted command says {path})")
        return spec
    if (Path(path).expanduser() / "config.json").is_file():
        notes.append(f"using the local draft config at {path}")
        return TargetSpec(**{**spec.__dict__, "draft_path": path})
    published = profiles.published_draft_ids().get(path.lower().strip("/"))
    if published is not None and (published[1] != spec.model or spec.model_path is not None):
        published = None  # published for another model: its own config.json (from the hub), never one reshaped
    if published is not None:  # a published draft a shipped recipe stands for, with its own model: no hub needed
        recipe, for_model = published
        if spec.draft_chosen and spec.draft != recipe:
            raise ProfileError(f"the pasted command runs the draft {path} (profile '{recipe}') but --draft says "
                               f"'{spec.draft}': drop one of them")
        notes.append(f"draft {path} is the published {recipe} draft for {for_model}: using the '{recipe}' draft "
                     "profile (its config shaped for the model)")
        return TargetSpec(**{**spec.__dict__, "draft": recipe})
    if is_hub_id(path):
        directory = fetch_config(path, environments.home() / "hub" / "drafts", what="draft")
        notes.append(f"draft {path}: its config.json from the Hugging Face hub (cached in {directory})")
        return TargetSpec(**{**spec.__dict__, "draft_path": str(directory)})
    algorithm = (config.get("--speculative-algorithm") or ("",))[0].upper()
    by_algorithm = {"EAGLE3": "eagle3", "EAGLE": "eagle", "STANDALONE": "standalone", "NEXTN": "nextn", "MTP": "nextn"}
    draft = spec.draft
    if not spec.draft_chosen and algorithm in by_algorithm:
        draft = by_algorithm[algorithm]
    notes.append(f"draft path {path} is not on this machine: using the '{draft}' draft profile "
                 "(a draft derived from the model's config)")
    return TargetSpec(**{**spec.__dict__, "draft": draft})


def check_usage(session: Session, outcome: Outcome) -> None:
    """Turn SGLang's own argparse rejection (bad value type, bad choice) into a usage error."""
    if outcome.status is Status.USAGE:
        message = outcome.exception.get("message") or "argument error"
        raise UsageError(f"SGLang {session.target.release} rejects the flags: {message}")


def probe(tokens: Sequence[str], spec: TargetSpec | None = None, *,
          on_start: Callable[[Session], None] | None = None, timeout: float = 120.0, warm: bool = True,
          notify: Callable[[str], None] | None = None) -> ProbeResult:
    """Evaluate one configuration (flags or a pasted launch command) on one target.

    :param tokens: SGLang flags, or a pasted ``python -m sglang.launch_server ...`` command.
    :param on_start: called once the worker is up (the CLI announces simulated hardware there).
    :param warm: evaluate on the target's warm worker (:mod:`bisect_spec.runtime.warm`), started if none
        runs and left up for the next call until its idle stop; False: a worker of its own.
    :param notify: told at once, in a line, when a worker has to be started (SGLang loading).
    :raises UsageError: unknown flag for this release, bad value, not an SGLang command.
    """
    with _first_evaluation(tokens, spec, jobs=1, timeout=timeout, on_start=on_start, warm=warm,
                           notify=notify) as (session, full, outcome, notes, _):
        return ProbeResult(session.target, full, outcome, session.info, notes)


class ProbeSession:
    """Many probes on one target's warm worker: the Python API's session for many evaluations.

    A probe costs one evaluation (milliseconds) once the worker is up; the first one waits
    for it to start (SGLang imports once), unless a warm worker of an earlier command or
    session still runs. The worker outlives the session until its idle stop
    (``BISECT_SPEC_WORKER_IDLE``, default 300 s; ``warm=False``: a worker of the session's
    own, stopped on :meth:`close`). Safe to use from several threads.

    Example::

        from bisect_spec import api

        spec = api.TargetSpec(release="0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
        with api.ProbeSession(spec) as session:
            for steps in (1, 2, 3):
                result = session.probe(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps)])
                print(steps, result.outcome.headline)

    :param spec: the target; a pasted command's own model or draft may change it per probe.
    :param timeout: seconds one evaluation may take.
    :param notify: told at once, in a line, when a worker has to be started.
    """

    def __init__(self, spec: TargetSpec | None = None, *, timeout: float = 120.0, warm: bool = True,
                 notify: Callable[[str], None] | None = None) -> None:
        self.spec = spec or TargetSpec()
        self.timeout = timeout
        self.warm = warm
        self.notify = notify
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def probe(self, tokens: Sequence[str]) -> ProbeResult:
        """Evaluate one configuration, as :func:`probe` does.

        :raises UsageError: unknown flag for this release, bad value, not an SGLang command.
        :raises ReleaseError: the release does not import (the first probe starts its worker).
        """
        config, spec, notes = understand_flags(tokens, self.spec)
        target = spec.resolve()
        session = self._session(target)
        full, outcome = _evaluate_first(session, config, notes)
        _release_warning(session.target.release, notes)
        return ProbeResult(session.target, full, outcome, session.info, notes)

    def _session(self, target: Target) -> Session:
        name = json.dumps([target.describe(), str(target.model.path), str(target.draft.path if target.draft else "")],
                          sort_keys=True)
        with self._lock:
            if name not in self._sessions:
                session = Session(target, jobs=1, timeout=self.timeout, log_dir=environments.home() / "logs",
                                  warm="start" if self.warm else None, notify=self.notify)
                session.start()
                self._sessions[name] = session
            return self._sessions[name]

    def close(self) -> None:
        """Disconnect (a warm worker stays up until its idle stop; an own worker stops now)."""
        with self._lock:
            for session in self._sessions.values():
                session.close()
            self._sessions.clear()


def verify_release(release: str, *, timeout: float = 120.0,
                   notify: Callable[[str], None] | None = None) -> smoke.SmokeResult:
    """Run the release smoke (:mod:`bisect_spec.workflows.smoke`) on an installed release and record it.

    :raises ReleaseError: the release is not installed.
    """
    if not environments.is_installed(release):
        raise ReleaseError(f"SGLang {release} is not installed: bisect-spec env install {release}")
    table = environments.cached_flag_table(release) or environments.cached_flag_table(release, current=False) or []
    spec = TargetSpec(release=release, model=smoke.MODEL, draft=None, hardware=smoke.HARDWARE, gpus=smoke.GPUS,
                      inherit_env=False)
    with ProbeSession(spec, timeout=timeout, warm=False, notify=notify) as session:
        return smoke.run(release, lambda flags: session.probe(flags).outcome, table)


def _release_warning(release: str, notes: list[str]) -> None:
    """One line when the release's smoke failed: its verdicts may be bisect-spec's faults."""
    warning = smoke.warning(release)
    if warning is not None and f"warning: {warning}" not in notes:
        notes.append(f"warning: {warning}")


def _evaluate_first(session: Session, config: Config, notes: list[str]) -> tuple[Config, Outcome]:
    """Canonical spelling, the draft added where needed, one evaluation (notes say what was changed)."""
    config = session.canonical(config)
    target = session.target
    merged = session.merge_config_file(config)
    if merged != config:
        given = config.get("--config") or ("",)
        notes.append(f"--config {given[0]}: its options merged as SGLang {target.release} merges them "
                     f"(the command line wins): {' '.join(merged.without(*config.flags()).argv()) or 'nothing new'}")
    full = session.with_draft(merged)
    if full != merged:
        notes.append(f"added --speculative-draft-model-path for the '{target.draft.name if target.draft else ''}' draft")
    missing = session.missing_draft(full)
    if missing:
        notes.append(f"warning: {missing}")
    outcome = session.evaluate(full)
    check_usage(session, outcome)
    return full, outcome


@contextlib.contextmanager
def _first_evaluation(tokens: Sequence[str], spec: TargetSpec | None, *, jobs: int, timeout: float,
                      on_start: Callable[[Session], None] | None, warm: bool = False,
                      notify: Callable[[str], None] | None = None,
                      ) -> Iterator[tuple[Session, Config, Outcome, list[str], TargetSpec]]:
    """Understand the user's flags, start a session and evaluate them once (probe and shrink start so)."""
    config, spec, notes = understand_flags(tokens, spec or TargetSpec())
    target = spec.resolve()
    if sources.is_label(target.release):  # say what a git:/path: target was taken as
        notes.append(sources.summary(target.release))
    session = Session(target, jobs=jobs, timeout=timeout, log_dir=environments.home() / "logs",
                      warm="start" if warm else None, notify=notify)
    try:
        session.canonical(config)  # an unknown flag fails before any worker starts (the flag table is cached)
        session.start()
        if on_start:
            on_start(session)
        full, outcome = _evaluate_first(session, config, notes)
        _release_warning(target.release, notes)
        yield session, full, outcome, notes, spec
    finally:
        session.close()


# -- sweep -------------------------------------------------------------------------


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


def _target_record(target: Target) -> dict[str, Any]:
    """Everything besides the flags that determines an outcome (the cache key's input)."""
    return {"release": target.release, "model": target.model.config,
            "model_args": list(target.model.extra_args),
            "draft": (json.loads((target.draft.path / "config.json").read_text())
                      if target.draft and target.draft.path else None),
            "draft_kind": target.draft.kind if target.draft else None,
            "hardware": target.hardware.record, "gpus": target.hardware.gpus,
            "env": dict(target.env)}


def _spec_from_meta(meta: dict[str, Any]) -> TargetSpec:
    asked = dict(meta["asked"])
    asked["env"] = tuple((str(k), str(v)) for k, v in asked.get("env") or ())
    asked["inherit_env"] = False  # the run's environment, whatever the caller's is now
    return TargetSpec(**asked)


def sweep(spec: TargetSpec | None = None, *, strategy: str = "default", jobs: int | None = None,
          runs_dir: Path = Path("runs"), resume: str | None = None, seed: int | None = None,
          random_budget: int | None = None, timeout: float = 60.0, use_cache: bool = True,
          progress: ProgressFn | None = None, on_start: Callable[[Session], None] | None = None,
          extra_env: tuple[tuple[str, str], ...] = (), shrink: bool = False, fix: bool = False,
          shrink_evaluations: int = 300, shrink_seconds: float = 60.0, executor: str = "local",
          address: str | None = None) -> SweepResult:
    """Sweep a strategy's flag space on one target and store the run.

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

    :raises StoreError: run missing/locked/unwritable. :raises UsageError: bad strategy/flags.
    """
    from bisect_spec.report.summary import summarise, triage
    from bisect_spec.runtime import store
    from bisect_spec.search.plan import Strategy, fitted_plan, load_strategy
    from bisect_spec.search.random_search import search

    started = time.time()
    if resume is not None:
        run = store.open_run(runs_dir, resume)
        meta = run.meta
        spec = _spec_from_meta(meta)
        chosen = Strategy(**{**meta["strategy"], "include": tuple(meta["strategy"]["include"]),
                             "exclude": tuple(meta["strategy"]["exclude"]), "core": tuple(meta["strategy"]["core"]),
                             "values": {k: tuple(v) for k, v in meta["strategy"]["values"].items()},
                             "forbid": {k: tuple(v) for k, v in meta["strategy"].get("forbid", {}).items()},
                             "fit": meta["strategy"].get("fit", False)})  # a run from before fit.py: its plan
    else:
        run = None
        spec = spec or TargetSpec()
        chosen = load_strategy(strategy, seed=seed, random_budget=random_budget)
    target = spec.resolve()
    session = Session(target, jobs=jobs, timeout=timeout, log_dir=(run.path if run else None), extra_env=extra_env,
                      executor=executor, address=address)
    try:
        table = session.flags()
        space = chosen.space(table)
        plan, search_space, unfit = fitted_plan(space, chosen, model_config=target.model.config,
                                                hardware=target.hardware.record)
        if run is None:
            # the release is recorded as resolved: a resume must not drift to a newer install
            # what decides the target (how a pasted command was read is not part of it)
            asked = {**{k: v for k, v in spec.__dict__.items() if k not in ("model_chosen", "draft_chosen", "inherit_env")},
                     "release": target.release, "env": [list(kv) for kv in target.env]}
            meta = {"schema": "bisect-spec/run/1", "asked": asked, "target": target.describe(),
                    "strategy": chosen.to_dict(), "seed": chosen.seed, "space": space.describe(),
                    "plan_size": len(plan), "search_budget": chosen.random_budget,
                    "tested_once": [u.to_dict() for u in unfit]}
            run = store.create_run(runs_dir, meta)
            session.pool.spec = session.environment.worker_spec(
                hardware=target.hardware.record, gpus=target.hardware.gpus,
                log_path=str(run.path / f"worker-{target.release}.log"), extra_env=extra_env)
        assert run is not None
        with run:
            journal = {e["key"]: e for e in run.journal_entries()}
            outcomes: dict[str, Outcome] = {k: Outcome.from_dict(e["outcome"]) for k, e in journal.items()}
            signatures = {o.signature for o in outcomes.values() if o.signature}
            total = [len(plan) + chosen.random_budget]  # a masking-aware round adds its rows
            reused = 0
            cache = store.OutcomeCache(environments.home() / "cache" / "outcomes.sqlite") if use_cache else None
            target_key = store.OutcomeCache.target_key(_target_record(target))

            def record(phase: str, index: int, outcome: Outcome, cached: bool) -> None:
                key = outcome.config.key()
                run.append({"phase": phase, "index": index, "key": key, "cached": cached, "outcome": outcome.to_dict()})
                outcomes[key] = outcome
                if outcome.signature:
                    signatures.add(outcome.signature)
                if cache is not None and not cached and outcome.status.value in DURABLE:
                    cache.put(target_key, key, outcome.to_dict())
                if progress:  # absence trials run inside the masking rounds: one bar for both
                    progress(len(outcomes), total[0], len(signatures), PROGRESS_PHASE.get(phase, phase))

            todo = [(i, c) for i, c in enumerate(plan) if c.key() not in outcomes]
            if cache is not None and todo:
                hits = cache.get_many(target_key, [c.key() for _, c in todo])
                for index, config in todo:
                    if config.key() in hits:
                        record("cover", index, Outcome.from_dict(hits[config.key()]), True)
                        reused += 1
                todo = [(i, c) for i, c in todo if c.key() not in outcomes]
            if todo:
                session.start()
                if on_start:
                    on_start(session)
                index_of = {c.key(): i for i, c in todo}
                for outcome in session.evaluate_many(c for _, c in todo):
                    record("cover", index_of[outcome.config.key()], outcome, False)

            branch_configs: list[Config] = []
            if chosen.branches:
                _branch_rows(session, space=search_space, plan=plan, outcomes=outcomes, cache=cache,
                             target_key=target_key, record=record, configs=branch_configs, total=total)
            # every shrink of this sweep reads the rows' outcomes and what earlier shrinks evaluated
            memo: MutableMapping[str, Outcome] = ChainMap({}, outcomes)
            learnt: dict[str, list[Config]] = {}  # signature -> 1-minimal reproducers shrunk so far
            rounds_configs: list[Config] = []
            if chosen.rounds > 0:
                masking = _masking_rounds(session, space=search_space, plan=[*plan, *branch_configs], strategy=chosen,
                                          outcomes=outcomes,
                                          cache=cache, target_key=target_key, record=record,
                                          configs=rounds_configs, total=total, budget=(shrink_evaluations, shrink_seconds),
                                          memo=memo, learnt=learnt)
            else:
                masking = None

            def outcome_key(config: Config) -> str:
                key = config.key()
                if key not in outcomes:
                    hit = cache.get_many(target_key, [key]).get(key) if cache is not None else None
                    if hit is not None:
                        record("search", len(outcomes), Outcome.from_dict(hit), True)
                        nonlocal reused
                        reused += 1
                    else:
                        session.start()
                        record("search", len(outcomes), session.evaluate(config), False)
                found = outcomes[key]
                return found.signature.id if found.signature else found.status.value

            searched = search(search_space, outcome_key, budget=chosen.random_budget, seed=chosen.seed)
            peel_configs: list[Config] = []
            peeled = None
            if chosen.peel:
                peeled = _peel_rows(session, rows=[*plan, *branch_configs, *rounds_configs, *searched], space=search_space,
                                    masking=masking,
                                    strategy=chosen, outcomes=outcomes, cache=cache, target_key=target_key,
                                    record=record, configs=peel_configs, total=total,
                                    budget=(shrink_evaluations, shrink_seconds), memo=memo, learnt=learnt)
            if cache is not None:
                cache.close()
            ordered = [outcomes[c.key()] for c in plan]
            seen = {c.key() for c in plan}
            for config in [*branch_configs, *rounds_configs, *searched, *peel_configs]:
                if config.key() not in seen:
                    seen.add(config.key())
                    ordered.append(outcomes[config.key()])
            summary = summarise(ordered, space, target.describe(), chosen.name, chosen.seed)
            if (release_warning := smoke.warning(target.release)) is not None:
                summary["release_warning"] = release_warning
            if masking is not None:
                summary["masking"] = masking.to_dict()
            if peeled is not None:
                summary["peel"] = peeled.to_dict()
            if shrink:
                _shrink_signatures(session, summary, run.path / "reproducers", fix=fix, progress=progress,
                                   budget=(shrink_evaluations, shrink_seconds), outcomes=ordered, memo=memo,
                                   learnt=learnt)
                triage(summary)
            from bisect_spec.runtime.session import placeholder_file

            local = {str(target.model.path): MODEL, str(placeholder_file()): PATH_TOKEN}
            if target.draft and target.draft.path:
                local[str(target.draft.path)] = DRAFT
            run.write_text("results.jsonl", "".join(store.canonical_json(_reproducible(o.to_dict(), local)) + "\n"
                                                     for o in ordered))
            run.write_json("summary.json", summary)
            from bisect_spec.report.text import summary_markdown

            run.write_text("summary.md", summary_markdown(summary))
            run.write_text("report.html", report(run.path, "html"))
            run.write_json("timing.json", {"started": started, "finished": time.time(),
                                           "seconds": round(time.time() - started, 3), "jobs": session.pool.jobs,
                                           "executor": executor,
                                           "reused_from_cache": reused, "torn_records": run.torn,
                                           "worker": session.info})
            return SweepResult(run.id, run.path, target, summary, ordered, reused, run.torn, session.info)
    except KeyboardInterrupt:
        if run is None:
            raise
        from bisect_spec.errors import Interrupted

        kept = sum(1 for _ in run.journal_entries())
        planned = int(run.meta.get("plan_size") or 0) + int(run.meta.get("search_budget") or 0)
        raise Interrupted(f"interrupted: {kept}/{planned} recorded in run {run.id}; "
                          f"resume with bisect-spec sweep --resume {run.id}") from None
    finally:
        session.close()


#: journal phase -> the progress bar's phase, where the bar would otherwise restart at every switch
PROGRESS_PHASE = {"absence": "round", "projection": "round", "branch": "cover"}


def _branch_rows(session: Session, *, space: Any, plan: Sequence[Config], outcomes: dict[str, Outcome], cache: Any,
                 target_key: str, record: Callable[..., None], configs: list[Config], total: list[int]) -> None:
    """Branch rows (:mod:`bisect_spec.search.branches`), journaled as phase ``branch``: every context first,
    then the rows of the contexts that passed. The contexts start from the plan's passing rows only, so
    a resumed run (whose journal holds later phases too) builds the same ones."""
    from bisect_spec.search.branches import contexts, passing_bases

    found = contexts(space, passing_bases(space, [c for c in plan if outcomes[c.key()].passed]))
    batch = [context for context, _ in found]
    _evaluate_journaled(session, batch, "branch", outcomes=outcomes, cache=cache, target_key=target_key,
                        record=record, total=total)
    configs.extend(batch)
    rows = list(dict.fromkeys(row for context, context_rows in found if outcomes[context.key()].passed
                              for row in context_rows))
    _evaluate_journaled(session, rows, "branch", outcomes=outcomes, cache=cache, target_key=target_key,
                        record=record, total=total)
    configs.extend(rows)


def _masking_rounds(session: Session, *, space: Any, plan: Sequence[Config], strategy: Any,
                    outcomes: dict[str, Outcome], cache: Any, target_key: str, record: Callable[..., None],
                    configs: list[Config], total: list[int], budget: tuple[int, float],
                    memo: MutableMapping[str, Outcome] | None = None,
                    learnt: dict[str, list[Config]] | None = None) -> Any:
    """Masking-aware covering (:mod:`bisect_spec.search.masking`) wired to the session, the cache and the journal.

    The plan's rows over the fitted space are the first round (already evaluated); each later
    round's rows are journaled as phase ``round``, the trials that learn what a failure needs
    absent (:func:`bisect_spec.search.masking.needed_absent`) as phase ``absence``, the projections of
    unexplained rows onto known reproducers (:meth:`bisect_spec.search.masking.Rounds.projections`) as
    phase ``projection``; failures are shrunk with the sweep's shrink budget.
    Every reproducer shrunk is added to ``learnt`` (signature -> reproducers), which the sweep's later
    shrinks start from; ``memo`` is the outcomes they share (:func:`shrink_in_session`).
    """
    from bisect_spec.reduce.shrink import Budget
    from bisect_spec.search.masking import Key, cover_unmasked

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
            _evaluate_journaled(session, batch, phase, outcomes=outcomes, cache=cache, target_key=target_key,
                                record=record, total=total)
            configs.extend(c for c in batch if c not in configs)
            return [_outcome_key(outcomes[c.key()]) for c in batch]
        return evaluate

    learnt = {} if learnt is None else learnt  # signature -> minimal reproducers found in earlier rounds

    def shrink(config: Config, signature: str) -> Config | None:
        session.start()
        report = shrink_in_session(session, config, budget=Budget(*budget), fix=False,
                                   first=outcomes.get(config.key()), learnt=learnt.get(signature, []), memo=memo)
        result = report.result
        if result.signature is None or result.signature.id != signature or result.status != "minimal":
            return None
        minimal: Config = result.minimal
        if minimal not in learnt.setdefault(signature, []):
            learnt[signature].append(minimal)
        return minimal

    def candidates(config: Config, signature: str) -> list[str]:
        outcome = outcomes.get(config.key())
        if outcome is None:
            return []
        return sorted(failure_hints(session, outcome))

    first = [row for row in (row_of(c) for c in plan) if row is not None]
    return cover_unmasked(space, first, evaluate=evaluate_as("round"), shrink=shrink, strength=strategy.strength,
                          core_strength=strategy.core_strength, max_rounds=strategy.rounds,
                          row_limit=strategy.round_rows, candidates=candidates,
                          evaluate_absent=evaluate_as("absence"), evaluate_projection=evaluate_as("projection"))


def _evaluate_journaled(session: Session, batch: Sequence[Config], phase: str, *, outcomes: dict[str, Outcome],
                        cache: Any, target_key: str, record: Callable[..., None], total: list[int]) -> None:
    """Outcomes for a later phase's batch (masking rounds, peeling): those not known yet, from the
    cross-run cache first, else evaluated; each journaled as ``phase`` through ``record``."""
    todo = [c for c in batch if c.key() not in outcomes]
    total[0] += len(todo)
    if cache is not None and todo:
        hits = cache.get_many(target_key, [c.key() for c in todo])
        for config in todo:
            if config.key() in hits:
                record(phase, len(outcomes), Outcome.from_dict(hits[config.key()]), True)
        todo = [c for c in todo if c.key() not in outcomes]
    if todo:
        session.start()
        for outcome in session.evaluate_many(todo):
            record(phase, len(outcomes), outcome, False)


def _outcome_key(outcome: Outcome) -> str | None:
    """A row's key for masking and peeling: None passed, a signature id, or ``status:…`` (crash, time-out)."""
    if outcome.passed:
        return None
    sig = outcome.signature
    if outcome.status.value != "failed" or sig is None:
        return f"{outcome.status.value}:{sig.id if sig else ''}"
    return sig.id


def _peel_rows(session: Session, *, rows: Sequence[Config], space: Any, masking: Any, strategy: Any,
               outcomes: dict[str, Outcome], cache: Any, target_key: str, record: Callable[..., None],
               configs: list[Config], total: list[int], budget: tuple[int, float],
               memo: MutableMapping[str, Outcome] | None = None,
               learnt: dict[str, list[Config]] | None = None) -> Any:
    """Peeling (:mod:`bisect_spec.search.peel`) wired to the session, the cache and the journal.

    The reproducers the masking-aware rounds learnt are the known ones; a failing signature
    without one is shrunk first (its smallest row, the sweep's shrink budget). One flag of a
    reproducer is peeled at a time, the strategy's core flags last. Peeled rows are journaled as
    phase ``peel``.
    """
    from bisect_spec.reduce.shrink import Budget
    from bisect_spec.search.peel import peel

    failing: dict[Config, str] = {}
    for config in rows:
        key = _outcome_key(outcomes[config.key()])
        if key is not None and ":" not in key:
            failing.setdefault(config, key)
    minimal: dict[str, Config] = {}
    for signature, argvs in (masking.forbidden.items() if masking is not None else ()):
        minimal[signature] = min((Config.from_argv(a) for a in argvs), key=len)
    for signature in sorted(set(failing.values()) - set(minimal)):
        smallest = min((c for c, k in failing.items() if k == signature), key=lambda c: (len(c), c.key()))
        session.start()
        result = shrink_in_session(session, smallest, budget=Budget(*budget), fix=False,
                                   first=outcomes.get(smallest.key()), memo=memo).result
        if result.signature is not None and result.signature.id == signature and result.status == "minimal":
            minimal[signature] = result.minimal
            if learnt is not None:
                learnt.setdefault(signature, []).append(result.minimal)

    def evaluate(batch: list[Config]) -> list[str | None]:
        _evaluate_journaled(session, batch, "peel", outcomes=outcomes, cache=cache, target_key=target_key,
                            record=record, total=total)
        configs.extend(batch)
        return [_outcome_key(outcomes[c.key()]) for c in batch]

    missing: dict[str, Config] = {}  # what each signature's reproducer above needs absent
    for signature, lists in (masking.needs_absent.items() if masking is not None else ()):
        argvs = masking.forbidden[signature]
        shortest = min(range(len(argvs)), key=lambda i: len(Config.from_argv(argvs[i])))
        if lists[shortest]:
            missing[signature] = Config.from_argv(lists[shortest])
    return peel(list(failing.items()), minimal, evaluate, depth=strategy.peel_depth, keep=strategy.core,
                missing=missing, complete=lambda c: space.complete(c.as_dict()), width=strategy.peel_width or None,
                remove=strategy.peel_remove)


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


def _shrink_signatures(session: Session, summary: dict[str, Any], out_dir: Path, *, fix: bool,
                       progress: ProgressFn | None, budget: tuple[int, float], outcomes: Sequence[Outcome],
                       memo: MutableMapping[str, Outcome] | None = None,
                       learnt: dict[str, list[Config]] | None = None) -> None:
    """Shrink every failure signature of a summary in place (adds ``minimal_argv`` and friends).

    A signature the sweep already shrank (``learnt``, or the masking rounds' reproducers in the
    summary) starts from that reproducer where its smallest row holds it; ``memo``: see
    :func:`shrink_in_session`.
    """
    from bisect_spec.reduce.shrink import Budget

    failures = [s for s in summary["signatures"] if s["kind"] == "failed"]
    by_config = {o.config: o for o in outcomes}
    forbidden = (summary.get("masking") or {}).get("forbidden") or {}  # reproducers the masking rounds learnt
    session.start()
    for number, entry in enumerate(failures, 1):
        smallest = Config.from_argv(entry["smallest"])
        known = [*(learnt or {}).get(entry["id"], []), *(Config.from_argv(argv) for argv in forbidden.get(entry["id"], []))]
        report = shrink_in_session(session, smallest, budget=Budget(*budget), fix=fix, out_dir=out_dir,
                                   evidence=evidence_of(outcomes, entry["id"]), first=by_config.get(smallest),
                                   learnt=list(dict.fromkeys(known)), memo=memo)
        result = report.result
        entry["shrink"] = {"status": result.status, "minimal_argv": result.minimal.argv(),
                           "evaluations": result.evaluations, "stop_reason": result.stop_reason,
                           "same_signature": result.signature is not None and result.signature.id == entry["id"],
                           "explanation": [f["verdict"] for f in (report.explanation or {}).get("flags", [])],
                           "fixes": [f["argv"] for f in (report.fixes or {}).get("fixes", [])[:3]],
                           "reproducers": f"{out_dir.name}/{entry['id']}" if report.files else None}
        if progress:
            progress(number, len(failures), len(summary["signatures"]), "shrink")


def _reproducible(record: dict[str, Any], local: dict[str, str]) -> dict[str, Any]:
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


# -- shrink ----------------------------------------------------------------------


@dataclass
class ShrinkReport:
    """A shrunk failure: reproducer, proof, explanation, verified fixes, files written."""

    target: Target
    original: Outcome
    result: Any  # shrink.ShrinkResult
    minimal: Outcome | None
    explanation: dict[str, Any] | None = None
    fixes: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)
    #: the reproducer on other releases (:func:`release_history`), when evaluated
    history: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        result = self.result.to_dict()
        return {"schema": "bisect-spec/shrink/1", "target": self.target.describe(), "notes": self.notes,
                "status": result["status"], "stop_reason": result["stop_reason"], "signature": result["signature"],
                "original_argv": result["original_argv"], "minimal_argv": result["minimal_argv"],
                "evaluations": result["evaluations"], "removal_evaluations": result["removal_evaluations"],
                "proof": result["proof"], "steps": result["steps"], "other_signatures": result["other_signatures"],
                "explanation": self.explanation, "nearest_working": self.fixes, "files": self.files,
                **({"newest": vars(self.history["newest"])} if self.history.get("newest") else {}),
                **({"bisection": self.history["bisection"]} if self.history.get("bisection") else {}),
                "failure": self.minimal.to_dict() if self.minimal else self.original.to_dict()}


def shrink_space(session: Session, config: Config) -> Any:
    """Domains for shrinking and fixing: the config's flags plus the core speculative flags."""
    from bisect_spec.search.plan import DEFAULT_STRATEGY, load_strategy
    from bisect_spec.search.space import CORE, build_space

    values = load_strategy(DEFAULT_STRATEGY).values
    return build_space(session.flags(), include=[*config.flags(), *CORE], values=values)


def failure_hints(session: Session, outcome: Outcome, learnt: Sequence[Config] = ()) -> set[str]:
    """Flags the failure names (its statement, guard and message, through the parser's dests) and flags
    of ``learnt`` reproducers of its signature: the shrinker's first guess (:mod:`bisect_spec.reduce.hints`)."""
    from bisect_spec.reduce.hints import failure_flags

    return failure_flags(outcome.record, session.flags(), learnt)


def evidence_of(outcomes: Sequence[Outcome], signature_id: str) -> set[str]:
    """Flags present in every outcome seen failing with ``signature_id`` (the shrinker's best guess)."""
    members = [set(o.config.flags()) for o in outcomes if o.signature is not None and o.signature.id == signature_id]
    return set.intersection(*members) if members else set()


#: outcome statuses that evaluating again would repeat: cached across runs, shared by one sweep's shrinks
DURABLE = ("passed", "failed", "usage")


def shrink_in_session(session: Session, config: Config, *, budget: Any = None, fix: bool = True,
                      out_dir: Path | None = None, original: Config | None = None,
                      evidence: set[str] | None = None, first: Outcome | None = None,
                      progress: Callable[[int], None] | None = None, learnt: Sequence[Config] = (),
                      memo: MutableMapping[str, Outcome] | None = None) -> ShrinkReport:
    """Shrink one failing configuration with an already started session (used by sweeps too).

    :param first: the configuration's outcome if the caller has it (it is not evaluated again for it;
        the shrinker's own re-check still evaluates the original afresh).
    :param progress: called with the number of evaluations so far, after each.
    :param evidence: flags present in every configuration seen failing this way (tried first).
    :param learnt: minimal reproducers already known for this failure's signature: their flags are hints,
        and one the configuration holds is the shrinker's first guess.
    :param memo: outcomes by configuration key that one sweep's shrinks share (its rows' outcomes
        included): a candidate found there is not evaluated again, and what is evaluated is added.
        The original is always re-checked afresh.
    """
    from bisect_spec.errors import BudgetExhausted
    from bisect_spec.reduce.shrink import Shrinker

    outcomes: dict[Config, Outcome] = {}
    shared: MutableMapping[str, Outcome] = memo if memo is not None else {}

    def remembered(candidate: Config) -> Outcome | None:
        found = shared.get(candidate.key())
        if found is None or found.status.value not in DURABLE:
            return None
        outcomes[candidate] = found
        return found

    def keep(candidate: Config, outcome: Outcome) -> None:
        outcomes[candidate] = outcome
        if outcome.status.value in DURABLE:  # a crash or a time-out may not happen again
            shared[candidate.key()] = outcome

    def evaluate(candidate: Config) -> Outcome:
        if candidate not in outcomes and remembered(candidate) is None:
            keep(candidate, session.evaluate(candidate))
            if progress:
                progress(len(outcomes))
        return outcomes[candidate]

    def evaluate_many(candidates: Sequence[Config]) -> list[Outcome]:
        missing = [c for c in dict.fromkeys(candidates) if c not in outcomes and remembered(c) is None]
        for outcome in session.evaluate_many(missing):
            keep(outcome.config, outcome)
        if progress and missing:
            progress(len(outcomes))
        return [outcomes[c] for c in candidates]

    first = first or evaluate(config)
    checks = [0]

    def predicate(candidate: Config) -> Signature | None:
        if candidate == config:  # the shrinker asks for the original to check it, then to re-check it:
            checks[0] += 1      # the outcome known is the check, every re-check is evaluated afresh
            if checks[0] > 1:
                outcomes[candidate] = session.evaluate(candidate)
            else:
                outcomes[candidate] = first
        return evaluate(candidate).signature

    space = shrink_space(session, config)
    shrinker = Shrinker(config, predicate, space=space, budget=budget,
                        hints=failure_hints(session, first, learnt), evidence=evidence or (), rechecks=1,
                        learnt=learnt)
    notes: list[str] = []
    try:
        result = shrinker.run()
    except BudgetExhausted as exc:
        result = exc.result
        notes.append(str(exc))
    minimal = outcomes.get(result.minimal)
    report = ShrinkReport(session.target, first, result, minimal, notes=notes, worker=session.info)
    if result.status in ("minimal", "stopped") and result.signature is not None:
        report.explanation = _explain(result, space, evaluate_many)
        if fix:
            from bisect_spec.reduce.repair import nearest_working

            report.fixes = nearest_working(original or config, space, evaluate_many)
        if out_dir is not None:
            report.files = write_reproducers(session, report, out_dir)
    return report


def _explain(result: Any, space: Any, evaluate_many: Callable[[Sequence[Config]], list[Outcome]]) -> dict[str, Any]:
    from bisect_spec.reduce.repair import explain

    return explain(result.minimal, result.signature, space, evaluate_many)


def write_reproducers(session: Session, report: ShrinkReport, out_dir: Path, *, names: Any = None,
                      history: dict[str, Any] | None = None) -> dict[str, str]:
    """Write launch.sh, repro.py, test_regression.py and bug_report.md for one signature.

    :param names: how the model and draft are named (:func:`report_names`; default: from the target).
    :param history: the reproducer on other releases (:func:`release_history`); None when not evaluated.
    """
    from bisect_spec.report import bug_report, reproducers
    from bisect_spec.runtime import store

    outcome = report.minimal or report.original
    signature = report.result.signature.to_dict()
    target = session.target
    names = names or report_names(target)
    draft_config = (json.loads((target.draft.path / "config.json").read_text())
                    if target.draft and target.draft.path else None)
    info = session.pool.request({"op": "info"})
    config = reported_config(session, report)
    directory = out_dir / signature["id"]
    directory.mkdir(parents=True, exist_ok=True)
    model_args = list(target.model.extra_args)
    described = target.describe()
    source = sources.describe(target.release) if sources.is_label(target.release) else None
    env = dict(target.env)
    hardware = target.hardware.record if info.get("hardware", "").startswith("simulated") else None
    environment = session.environment
    rows, simulated = bug_report.simulated_check_env(
        release=target.release, python=str(session.info.get("python")), pythonpath=environment.pythonpath,
        base_python=environment.python, hardware=hardware, gpus=target.hardware.gpus,
        wheel=str(source["base"]) if source else target.release)
    history = history or {}
    local = {str(target.model.path): names.model, str(environments.home()): "bisect-spec's cache"}
    if target.draft and target.draft.path:
        local[str(target.draft.path)] = names.draft or target.draft.name
    for entry in environment.pythonpath:
        local[entry + os.sep] = ""
    from bisect_spec import __version__

    facts = bug_report.Facts(
        signature=signature, outcome=outcome, release=target.release, config=config, model_args=model_args,
        names=names, env=env, hardware=target.hardware.label, explanation=report.explanation, fixes=report.fixes,
        check_env=rows, simulated=simulated, tool_version=__version__,
        repro_command=f"bisect-spec env run {target.release} -- python repro.py\n"
                      f"# or, where SGLang {target.release} is importable: python repro.py",
        newest=history.get("newest"), newest_known=history.get("newest_known"), bisection=history.get("bisection"),
        notes=list(history.get("notes") or []), local=local)
    files = {
        "launch.sh": reproducers.launch_script(bug_report.launch_command(config, names, env, model_args), described,
                                               config),
        "repro.py": reproducers.repro_script(config, outcome, described, target.model.config, draft_config,
                                             hardware, target.hardware.gpus, model_args, info.get("cpu_imports", []),
                                             source),
        "test_regression.py": reproducers.regression_test(signature["id"], outcome, described),
        "bug_report.md": bug_report.render(facts),
        "shrink.json": json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n",
    }
    if names.draft == LOCAL_DRAFT and draft_config is not None:
        files[f"{LOCAL_DRAFT[2:]}/config.json"] = json.dumps(draft_config, indent=2, sort_keys=True) + "\n"
    written = {}
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        store._atomic_write(path, text)
        if name.endswith((".sh", ".py")):
            path.chmod(0o755)
        written[name] = str(path)
    return written


#: the draft a report names when no published or user draft is known: its config.json next to the report
LOCAL_DRAFT = "./draft"


def report_names(target: Target, pasted_model: str | None = None, pasted_draft: str | None = None,
                 spec: TargetSpec | None = None) -> Any:
    """How a bug report names the model and the draft: as the user runs them.

    A Hugging Face id the user typed is kept; a path the user typed that holds a published
    checkpoint (``/models/Kimi-K2.6``, ``/models/kimi-k2.6-eagle3``) becomes its Hugging Face id (the
    path is theirs, not the reader's); a draft path naming no published draft is the user's own
    checkpoint and is kept. Without any, the profile's published id; a draft recipe with none is
    written next to the report (``./draft/config.json``).
    """
    from bisect_spec.report.bug_report import Names
    from bisect_spec.runtime.model_sources import is_hub_id

    notes: list[str] = []
    model_path = pasted_model or (spec.model_path if spec else None)
    if pasted_model and is_hub_id(pasted_model):
        model = pasted_model
    elif target.model.hf_id:
        model = target.model.hf_id
        notes.append(f"`{model}` is the checkpoint {'your --model-path holds' if model_path else 'evaluated'}: "
                     "bisect-spec evaluated its published config.json")
    else:
        model = model_path or str(target.model.path)
    draft: str | None = None
    profile = target.draft
    draft_path = pasted_draft or (spec.draft_path if spec else None)
    if profile is not None and (profile.path is not None or draft_path):
        if draft_path and is_hub_id(draft_path):
            draft = draft_path
        elif draft_path and profile.hf_id and Path(draft_path).name.lower() == profile.hf_id.rsplit("/", 1)[-1].lower():
            draft = profile.hf_id
            notes.append(f"`{draft}` is the published {profile.algorithm} draft your --speculative-draft-model-path "
                         "holds; bisect-spec evaluated a draft config of that kind shaped for the model")
        elif draft_path:
            draft = draft_path
            notes.append(f"`{draft}` is your own draft checkpoint; bisect-spec evaluated a draft config for {profile.algorithm} "
                         "shaped for the model in its place (the failure happens before any weights load)")
        elif profile.hf_id:
            draft = profile.hf_id
            notes.append(f"`{draft}` is a published {profile.algorithm} draft for this model; bisect-spec evaluated a "
                         "draft config of the same kind shaped for the model")
        else:
            draft = LOCAL_DRAFT
            notes.append(f"`{LOCAL_DRAFT}` holds the {profile.algorithm} draft's config.json bisect-spec evaluated "
                         "(attached; no weights: the failure happens before any weights load)")
    return Names(model, draft, tuple(notes))


def reported_config(session: Session, report: ShrinkReport) -> Config:
    """The minimal configuration as a report shows it: with the draft path where the algorithm needs
    one (a real launch needs it; the shrinker may drop it when the failure does not), if it fails the same way."""
    minimal: Config = report.result.minimal
    full = session.with_draft(minimal)
    if full == minimal:
        return minimal
    outcome = session.evaluate(full)
    same = outcome.signature is not None and outcome.signature.id == report.result.signature.id
    return full if same else minimal


def release_history(config: Config, spec: TargetSpec, session: Session, signature: Signature, *, bisect: bool,
                    timeout: float = 120.0) -> dict[str, Any]:
    """The reproducer on the newest installed release and, with ``bisect``, its first bad release.

    The bisection runs over the installed releases with :func:`bisect_spec.workflows.timeline.bisect_releases`
    (verdicts only); the first bad release is where the verdict changes *to this failure* (its
    cross-release key), which need not be the first verdict change.
    """
    from bisect_spec.report.bug_report import ReleaseVerdict
    from bisect_spec.workflows.timeline import bisect_releases, verdict_key

    key = f"failed:{signature.cross_release_key}"
    newest = environments.newest_installed()
    history: dict[str, Any] = {"newest_known": environments.pins().get("newest"), "notes": []}
    records: dict[str, dict[str, Any]] = {}
    if bisect:
        candidates = environments.installed()
        if not sources.is_label(session.target.release) and session.target.release not in candidates:
            candidates.append(session.target.release)
        try:
            found = bisect_releases(config, spec, candidates=candidates, moves=False, timeout=timeout)
        except BisectSpecError as exc:
            history["bisection"] = {"none": f"not bisected ({exc})"}
        else:
            records = {d["release"]: d for d in found.evaluated}
            history["bisection"] = _first_bad(found, key)
    if newest in records:
        record = records[newest]
        history["newest"] = ReleaseVerdict(newest, str(record.get("verdict")), record.get("key") == key,
                                           str(record.get("headline") or record.get("reason") or ""))
    elif newest == session.target.release:
        history["newest"] = ReleaseVerdict(newest, "failed", True, "")
    else:
        try:
            target = TargetSpec(**{**spec.__dict__, "release": newest}).resolve()
            with Session(target, jobs=1, timeout=timeout) as other:
                outcome = other.evaluate(other.with_draft(other.canonical(config)))
        except BisectSpecError as exc:
            history["notes"].append(f"not evaluated on SGLang {newest}: {exc}")
        else:
            history["newest"] = ReleaseVerdict(newest, outcome.status.value, verdict_key(outcome) == key,
                                               outcome.headline)
    return history


def _first_bad(found: Any, key: str) -> dict[str, Any]:
    evaluated = [d for d in found.evaluated if d.get("key") is not None]
    order = {r: i for i, r in enumerate(found.releases)}
    evaluated.sort(key=lambda d: order[d["release"]])
    releases = [d["release"] for d in evaluated]
    for boundary in found.boundaries:
        if boundary["kind"] == "verdict" and boundary["after"].get("key") == key:
            before = boundary["before"]
            return {"first_bad": boundary["first_bad"], "last_good": boundary["last_good"], "releases": releases,
                    "before": {"verdict": before.get("verdict"), "words": _before_words(before)}}
    failing = [d["release"] for d in evaluated if d.get("key") == key]
    if failing and failing[0] == releases[0]:
        notes = [note[0].upper() + note[1:] + "." for note in found.notes if "needs SGLang" in note]
        return {"first_bad": failing[0], "oldest": True, "releases": list(found.releases), "notes": notes}
    return {"none": f"none found among {', '.join(releases) or 'no release'}"}


def _before_words(record: dict[str, Any]) -> str:
    verdict = record.get("verdict")
    if verdict == "passed":
        return "starts without error"
    if verdict == "unsupported":
        return "cannot run this model (its architecture is unknown there)"
    return f"fails differently ({record.get('headline')})"


def shrink(tokens: Sequence[str], spec: TargetSpec | None = None, *, budget: Any = None, fix: bool = True,
           out_dir: Path | None = None, on_start: Callable[[Session], None] | None = None,
           timeout: float = 60.0, bisect: bool = False, progress: Callable[[int], None] | None = None,
           runs_dir: Path = Path("runs"), warm: bool = True, notify: Callable[[str], None] | None = None) -> ShrinkReport:
    """Shrink a failing configuration (flags or a pasted launch command) to a 1-minimal reproducer.

    The bug report evaluates the reproducer on the newest installed release too and, with
    ``bisect``, bisects it across the installed releases for its first bad release.
    ``warm`` and ``notify`` as for :func:`probe` (the warm worker is asked for more workers for
    the parallel steps, and keeps them until its idle stop).

    :param out_dir: where the reproducers go (default ``runs_dir/shrink-<signature>``).
    :param progress: called with the number of evaluations so far, after each.

    :raises UsageError: bad flags, or the configuration passes (nothing to shrink).
    """
    jobs = max(1, min(os.cpu_count() or 1, 4))
    with _first_evaluation(tokens, spec, jobs=jobs, timeout=timeout, on_start=on_start, warm=warm,
                           notify=notify) as (session, full, first, notes, spec):
        if first.passed:
            raise UsageError(f"this configuration resolves without error on SGLang {session.target.release}: "
                             "nothing to shrink (use bisect-spec probe to see the resolved values)")
        signature = first.signature
        assert signature is not None
        report = shrink_in_session(session, full, budget=budget, fix=fix, first=first, progress=progress)
        report.notes[:0] = notes
        found = report.result.signature
        if report.result.status in ("minimal", "stopped") and found is not None:
            pasted = parse_command(tokens)
            names = report_names(session.target, pasted.model_path, pasted.draft_path, spec)
            history = release_history(reported_config(session, report), spec, session, found, bisect=bisect,
                                      timeout=max(timeout, 120.0))
            report.history = history
            report.files = write_reproducers(session, report, out_dir or runs_dir / f"shrink-{found.id}",
                                             names=names, history=history)
        return report


# -- bisect across releases ----------------------------------------------------------

SPECULATIVE_PREFIX = "--speculative-"


def _bisect_config(tokens: Sequence[str], spec: TargetSpec) -> tuple[Config, TargetSpec, list[str]]:
    """The configuration a bisection evaluates: the user's flags, with the draft's algorithm when missing."""
    config, spec, notes = understand_flags(tokens, spec)
    if not config.items:
        raise UsageError("no flags to bisect: pass SGLang flags after --, "
                         "e.g. bisect-spec bisect -- --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3")
    flags = config.flags()
    if "--speculative-algorithm" not in flags and any(f.startswith(SPECULATIVE_PREFIX) for f in flags) and spec.draft \
            and "--config" not in flags:  # the file may name the algorithm: a flag added here would override it
        draft = profiles.load_draft(spec.draft, profiles.load_model(spec.model, path=spec.model_path), path=spec.draft_path)
        if draft is not None and draft.algorithm:
            config = config.with_("--speculative-algorithm", draft.algorithm)
            notes.append(f"added --speculative-algorithm {draft.algorithm} for the '{draft.name}' draft")
    return config, spec, notes


def bisect(tokens: Sequence[str], spec: TargetSpec | None = None, *, old: str | None = None, new: str | None = None,
           releases: Sequence[str] | None = None, moves: bool = True, progress: Callable[[str], None] | None = None,
           timeout: float = 120.0, repo: str | Path | None = None, terms: tuple[str, str] = ("old", "new"),
           scan: bool = False, end_names: tuple[str, str] = ("--old", "--new")) -> Any:
    """Find the first release whose verdict for a configuration differs from the ``old`` release's,
    and where its failure moved (``git bisect``'s old/new: a regression or a fix alike).

    Speculative flags without ``--speculative-algorithm`` get the draft's algorithm (EAGLE3 for
    ``--draft eagle3``): without one, SGLang switches speculation off and checks nothing.
    With ``repo`` (a local SGLang clone), the first verdict change is then bisected down to the
    commit, between the two releases' tags (:func:`bisect_commits`): the report's ``commits``.

    :param old: the older end (default: the oldest known release); ``new`` the newer end.
    :param terms: what the old and the new verdict are called (``("good", "bad")``, ``("broken", "fixed")``).
    :param scan: evaluate every installed release of the range, for histories that are not monotone.
    :param end_names: the options that named the ends, for messages.
    :return: a :class:`~bisect_spec.workflows.timeline.BisectReport`.
    :raises UsageError: no flags, unknown release, ends in the wrong order, ``repo`` not a clone.
    """
    from bisect_spec.errors import SourceError
    from bisect_spec.workflows.commit_bisect import release_commits
    from bisect_spec.workflows.timeline import bisect_releases

    spec = spec or TargetSpec()
    clone = sources.Repo(repo) if repo is not None else None  # a bad path fails now, not after the releases
    config, spec, notes = _bisect_config(tokens, spec)
    report = bisect_releases(config, spec, old=old, new=new, candidates=releases, moves=moves, progress=progress,
                             timeout=timeout, terms=terms, scan=scan, end_names=end_names)
    report.notes[:0] = notes
    if clone is not None:
        if report.last_good is None or report.first_bad is None:
            report.notes.append("no release boundary to bisect into commits: the verdict does not change")
        else:
            try:
                report.commits = release_commits(config, spec, clone, report.last_good, report.first_bad,
                                                 progress=progress, timeout=timeout)
            except SourceError as exc:  # keep what the releases found
                report.notes.append(f"commits not bisected: {exc}")
    return report


def is_release_name(value: str) -> bool:
    """Whether ``value`` names an SGLang release this tool knows (pinned or installed), not a git revision."""
    return value in set(environments.known_releases()) | set(environments.installed())


def bisect_commits(tokens: Sequence[str], spec: TargetSpec | None = None, *, repo: str | Path, old: str, new: str,
                   progress: Callable[[str], None] | None = None, timeout: float = 120.0,
                   max_evaluations: int | None = None) -> Any:
    """The first commit between ``old`` and ``new`` (revisions of the SGLang clone ``repo``) where a
    configuration's verdict changes.

    Every commit's ``python/sglang`` tree is laid over the environment of the release at or
    before ``old`` (built if missing); see :mod:`bisect_spec.workflows.commit_bisect`.

    :return: a :class:`~bisect_spec.workflows.commit_bisect.CommitReport`.
    :raises UsageError: no flags; ``repo`` not a clone, unknown revisions, no commit between them
        touching ``python/sglang``, an end that cannot be evaluated (all :class:`SourceError`).
    """
    from bisect_spec.workflows.commit_bisect import bisect_commits as run

    spec = spec or TargetSpec()
    clone = sources.Repo(repo)
    config, spec, notes = _bisect_config(tokens, spec)
    report = run(config, spec, clone, old, new, progress=progress, timeout=timeout, max_evaluations=max_evaluations)
    report.notes[:0] = notes
    return report


def nightly(matrix_file: str | Path, *, out: Path = Path("nightlies"), resume: str | None = None,
            baseline: str | None = "latest", jobs: int | None = None, progress: Callable[[str], None] | None = None,
            install: bool = True, executor: str = "local", address: str | None = None) -> dict[str, Any]:
    """Run a nightly matrix (see :mod:`bisect_spec.workflows.nightly`); returns ``nightly.json``'s data plus ``path``."""
    from bisect_spec.workflows.nightly import run_nightly

    return run_nightly(matrix_file, out=out, resume=resume, baseline=baseline, jobs=jobs, progress=progress,
                       install=install, executor=executor, address=address, sweep=sweep)


# -- report ------------------------------------------------------------------------------------------------


def report_input(target: str | Path, *, runs_dir: Path = Path("runs")) -> Any:
    """Read what a report is made of: a sweep run (id or directory) or a nightly (directory or ``nightly.json``).

    :return: a :class:`bisect_spec.report.report_model.SweepInput` or :class:`bisect_spec.report.report_model.NightlyInput`.
    :raises UsageError: no such run or path, or a directory that is neither a run nor a nightly.
    :raises StoreError: the run did not finish, or its files / the nightly file are corrupt.
    """
    from bisect_spec.errors import StoreError
    from bisect_spec.report.report_model import NightlyInput, SweepInput
    from bisect_spec.runtime import store

    path = Path(target)
    if not path.exists() and not path.is_absolute() and "/" not in str(target) and runs_dir.is_dir():
        path = runs_dir / store.resolve_run_id(runs_dir, str(target))  # an id, latest, or a unique prefix
    if not path.exists() and not path.is_absolute() and (runs_dir / path).is_dir():
        path = runs_dir / path
    if not path.exists():
        known = store.list_runs(runs_dir)
        hint = f"; recent runs: {', '.join(r['id'] for r in known[-3:])}" if known else ""
        raise UsageError(f"no run or nightly '{target}': not a path, and no run '{target}' in {runs_dir}{hint}")
    if path.is_file() and path.name in ("run.json", "summary.json", "results.jsonl"):
        path = path.parent
    if path.is_file() and path.suffix != ".json":
        raise UsageError(f"{path} is neither a bisect-spec run (a directory with run.json) nor a nightly (nightly.json)")
    nightly_file = path if path.is_file() else path / "nightly.json"
    if nightly_file.is_file():
        from bisect_spec.workflows.nightly import read_nightly

        return NightlyInput(read_nightly(nightly_file))
    if not (path.is_dir() and (path / "run.json").is_file()):
        raise UsageError(f"{path} is neither a bisect-spec run (no run.json) nor a nightly (no nightly.json)")
    if not (path / "summary.json").is_file():
        raise StoreError(f"run {path.name} did not finish (no summary.json): continue it with "
                         f"bisect-spec --resume {path.name}, then report")
    advice = "the run cannot be reported; run the sweep again"
    meta, summary = store.read_json(path / "run.json", advice), store.read_json(path / "summary.json", advice)
    results = []
    if (path / "results.jsonl").is_file():
        for number, line in enumerate((path / "results.jsonl").read_text().splitlines(), 1):
            try:
                results.append(json.loads(line))
            except ValueError:
                raise StoreError(f"{path / 'results.jsonl'} line {number} is corrupt: {advice}") from None
    return SweepInput(path.name, meta, summary, results)


def report(target_path: str | Path, fmt: str = "md", *, runs_dir: Path = Path("runs")) -> str:
    """A report of a sweep run or a nightly matrix as ``md``, ``json`` (schema ``bisect-spec/report/1``), ``junit`` or ``html``.

    :param target_path: a run id (looked up in ``runs_dir``), a run directory, a nightly directory or its ``nightly.json``.
    :raises UsageError: unknown format, or see :func:`report_input`.
    """
    from bisect_spec.report.formats import FORMATS, render

    if fmt not in FORMATS:
        raise UsageError(f"unknown report format '{fmt}': choose one of {', '.join(FORMATS)}")
    return render(report_input(target_path, runs_dir=runs_dir), fmt)


# -- real launches ---------------------------------------------------------------


@dataclass(frozen=True)
class LaunchPlan:
    """Where and how real launches run: hardware mode, environment, output directory."""

    hardware: dict[str, Any] | None  # a profile simulated during resolution, or None (the machine as it is)
    mode: str  # "real" (GPUs), "cpu" (no GPU: fails at device detection) or "simulated:<profile>"
    in_process_hardware: str  # the --hardware the matching in-process verdict uses
    notes: tuple[str, ...] = ()


def launch_plan(spec: TargetSpec, *, allow_without_gpu: bool = False) -> LaunchPlan:
    """Decide the launch's hardware: real GPUs; the honest CPU only when asked; a simulated profile when named.

    :raises UsageError: no GPU here and neither ``allow_without_gpu`` nor a hardware profile.
    """
    from bisect_spec.launch import server as launch

    if spec.hardware in ("auto", "real"):
        if launch.gpus_present():
            return LaunchPlan(None, "real", "real")
        if not allow_without_gpu:
            raise UsageError("no GPU found on this machine: a real launch would fail at device detection; pass "
                             "--launch-without-gpu to launch anyway, or --hardware PROFILE to simulate one during resolution")
        return LaunchPlan(None, "cpu", "none", ("no GPU here: launching on the CPU, so SGLang stops at device detection",))
    if spec.hardware == "none":
        return LaunchPlan(None, "cpu", "none")
    profile = profiles.load_hardware(spec.hardware, spec.gpus)
    return LaunchPlan(profile.record, f"simulated:{profile.label}", spec.hardware,
                      (f"simulating {profile.label} during argument resolution: only resolution is meaningful, "
                       "the launch fails afterwards (no CUDA)",))


@dataclass
class LaunchReport:
    """One configuration launched ``repeat`` times; ``to_dict`` is schema ``bisect-spec/launch/1``."""

    target: Target
    config: Config
    plan: LaunchPlan
    attempts: list[Any]  # launch.LaunchOutcome
    path: Path
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from bisect_spec.launch.server import SCHEMA, flakiness

        first = self.attempts[0].to_dict() if self.attempts else {}
        return {"schema": SCHEMA, "target": {**self.target.describe(), "hardware": self.plan.mode},
                # the first launch's verdict, at the top for scripts (scripts/gpu_check.sh reads these)
                "status": first.get("status"), "classification": first.get("classification"),
                "signature": first.get("signature"), "seconds_to_ready": first.get("seconds_to_ready"),
                "config": self.config.argv(), "notes": self.notes, "path": str(self.path),
                **flakiness(self.attempts), "outcome": self.attempts[0].to_dict() if self.attempts else None,
                "attempts": [a.to_dict() for a in self.attempts]}


def _launch_session(spec: TargetSpec, plan: LaunchPlan) -> Session:
    target = TargetSpec(**{**spec.__dict__, "hardware": plan.in_process_hardware}).resolve()
    return Session(target, jobs=1, timeout=120.0, log_dir=environments.home() / "logs")


def launch_config(session: Session, plan: LaunchPlan, config: Config, log_path: Path, *, timeout: float,
                  server_command: Sequence[str] | None = None) -> Any:
    """Launch one configuration of a session's target for real (see :func:`bisect_spec.launch.server.launch_server`)."""
    from bisect_spec.launch import server as launch

    environment = session.environment
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME") and not CONFIG_ENV.match(k)}
    if session.target.release != environments.CURRENT and environment.path is not None:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1")  # config-only profiles
    env.update(session.env(config))  # the configuration's environment, as in-process
    return launch.launch_server(session.server_argv(config), python=environment.python, pythonpath=environment.pythonpath,
                                env=env, deadline=timeout, log_path=log_path, server_command=server_command,
                                torchvision_shim=environment.torchvision_shim, hardware=plan.hardware,
                                gpus=session.target.hardware.gpus)


def _launch_dir(runs_dir: Path, what: str) -> Path:
    import secrets

    path = runs_dir / f"{what}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch(tokens: Sequence[str], spec: TargetSpec | None = None, *, repeat: int = 1, timeout: float = 600.0,
           runs_dir: Path = Path("runs"), allow_without_gpu: bool = False,
           server_command: Sequence[str] | None = None) -> LaunchReport:
    """Launch SGLang's server for real with these flags (``repeat`` times) and classify each end.

    Logs go to ``runs/launch-<time>/attempt-N.log``; the report to ``launch.json`` beside them.
    :raises UsageError: bad flags, ``repeat < 1``, or no GPU without ``allow_without_gpu``.
    """
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: launch at least once")
    spec = spec or TargetSpec()
    plan = launch_plan(spec, allow_without_gpu=allow_without_gpu)
    config, spec, notes = understand_flags(tokens, spec)
    from bisect_spec.launch.server import leftover_notes

    notes = [*plan.notes, *notes, *leftover_notes([config.argv()])]
    session = _launch_session(spec, plan)
    try:
        config = session.with_draft(session.canonical(config))
        path = _launch_dir(runs_dir, "launch")
        attempts = [launch_config(session, plan, config, path / f"attempt-{n}.log", timeout=timeout,
                                  server_command=server_command) for n in range(1, repeat + 1)]
    finally:
        session.close()
    report = LaunchReport(session.target, config, plan, attempts, path, notes)
    from bisect_spec.runtime import store

    store._atomic_write(path / "launch.json", json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    return report


@dataclass
class CrosscheckReport:
    """In-process verdict vs real launch, per configuration; disagreements are findings of their own."""

    target: Target
    plan: LaunchPlan
    rows: list[dict[str, Any]]
    path: Path
    notes: list[str] = field(default_factory=list)

    @property
    def disagreements(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["agree"]]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "bisect-spec/crosscheck/1", "target": {**self.target.describe(), "hardware": self.plan.mode},
                "notes": self.notes, "path": str(self.path), "checked": len(self.rows),
                "disagreements": len(self.disagreements), "rows": self.rows}


def crosscheck(configs: Sequence[tuple[str, Config]], spec: TargetSpec | None = None, *, timeout: float = 600.0,
               runs_dir: Path = Path("runs"), allow_without_gpu: bool = False,
               server_command: Sequence[str] | None = None) -> CrosscheckReport:
    """For each ``(label, config)``: the in-process verdict and a real launch's, compared.

    In-process runs on the hardware the launch runs on (real GPUs, the CPU, or the same
    simulated profile). Stored as ``crosscheck.json`` with every launch log beside it.
    """
    from bisect_spec.launch import server as launch
    from bisect_spec.runtime import store

    spec = spec or TargetSpec()
    plan = launch_plan(spec, allow_without_gpu=allow_without_gpu)
    leftovers = launch.leftover_notes(raw.argv() for _, raw in configs)
    session = _launch_session(spec, plan)
    path = _launch_dir(runs_dir, "crosscheck")
    rows: list[dict[str, Any]] = []
    try:
        session.start()
        for number, (label, raw) in enumerate(configs, 1):
            config = session.with_draft(session.canonical(raw))
            verdict = session.evaluate(config)
            launched = launch_config(session, plan, config, path / f"config-{number}.log", timeout=timeout,
                                     server_command=server_command)
            compared = launch.compare(verdict.to_dict(), launched)
            rows.append({"label": label, "config": config.argv(), **compared,
                         "in_process": verdict.signature.id if verdict.signature else verdict.status.value,
                         "in_process_headline": verdict.headline, "launch": launched.classification,
                         "launch_headline": launched.headline, "launch_outcome": launched.to_dict()})
    finally:
        session.close()
    report = CrosscheckReport(session.target, plan, rows, path, [*plan.notes, *leftovers])
    store._atomic_write(path / "crosscheck.json", json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    return report


def configs_to_crosscheck(source: str, runs_dir: Path = Path("runs"), *, passing: int = 3) -> list[tuple[str, Config]]:
    """Configurations from a file (one per line: flags or a pasted command; ``#`` comments) or a stored run
    (each signature's smallest configuration and the ``passing`` smallest passing ones).

    :raises UsageError: neither a readable file nor a run.
    """
    from bisect_spec.runtime import store

    path = Path(source)
    if path.is_file():
        import shlex

        found = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    found.append((f"line {number}", parse_command(shlex.split(line)).config))
                except ValueError as exc:
                    raise UsageError(f"{source}:{number}: cannot split the line ({exc})") from exc
        if not found:
            raise UsageError(f"{source} holds no configuration (one per line: SGLang flags)")
        return found
    try:
        _, entries, summary = store.read_run(runs_dir, source)
    except BisectSpecStoreError as exc:
        raise UsageError(f"{source} is neither a file nor a stored run ({exc})") from exc
    if summary is None:
        raise UsageError(f"run {source} did not finish; resume it first: bisect-spec --resume {source}")
    return selected_from_summary(summary, [e["outcome"] for e in entries], passing=passing)


def selected_from_summary(summary: dict[str, Any], outcomes: Sequence[dict[str, Any]], *,
                          passing: int = 3) -> list[tuple[str, Config]]:
    """Each failure signature's smallest configuration plus the ``passing`` smallest passing ones."""
    chosen = [(f"signature {s['id']}", Config.from_argv(s["smallest"])) for s in summary["signatures"] if s.get("smallest")]
    passed = sorted({tuple(o["config"]) for o in outcomes if o.get("status") == "passed"}, key=lambda a: (len(a), a))
    chosen += [("passing", Config.from_argv(list(a))) for a in passed[:passing]]
    return chosen

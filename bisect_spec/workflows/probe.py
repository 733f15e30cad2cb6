"""One configuration evaluated: :func:`probe`, :class:`ProbeSession` (many probes on a warm worker) and the
release smoke's :func:`verify_release`; probe and shrink start with :func:`first_evaluation`."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.errors import ReleaseError, UsageError
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.runtime import environments, sources
from bisect_spec.runtime.pasted_command import understand_flags
from bisect_spec.runtime.session import Session, Target
from bisect_spec.runtime.target_spec import TargetSpec
from bisect_spec.runtime.warm import everywhere as warm_everywhere
from bisect_spec.workflows import smoke


@dataclass
class ProbeResult:
    """One configuration's verdict, with what the tool changed in the user's input."""

    target: Target
    config: Config
    outcome: Outcome
    worker: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    #: the target as understood from the options and a pasted command (its model, draft, GPU count): what every
    #: command the tool prints for this probe names
    spec: TargetSpec | None = None

    #: the nearest configuration that passes, verified (:func:`bisect_spec.reduce.repair.nearest_working`'s best
    #: fix: edits, argv, reason), or None (it passed, a fault of ours, or no nearby configuration passes)
    next_step: dict[str, Any] | None = None

    @property
    def failure_kind(self) -> str | None:
        """``crash`` (SGLang's own code failed: likely an SGLang bug), ``validation`` (a check refused the
        configuration, with or without a message), or None (passed, or not SGLang's failure)."""
        return failure_kind(self.outcome)

    @property
    def missing_draft(self) -> str | None:
        """Why a real launch of this configuration would fail for want of a draft model, or None (a draft is
        given, the algorithm needs none, or the target carries its own MTP layers)."""
        return Session.missing_draft(self.config, self.target.model.config)

    @property
    def heading(self) -> str:
        """The target in one line: release, model (+ draft), hardware, Python."""
        target = self.target
        return (f"SGLang {target.release} · {target.model.name}"
                f"{' + ' + target.draft.name if target.draft else ''} · {self.worker.get('hardware')}"
                f" · Python {self.worker.get('python')}")

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "bisect-spec/probe/1", "target": self.target.describe(), "worker": self.worker,
                "notes": self.notes, "outcome": self.outcome.to_dict(), "failure_kind": self.failure_kind,
                "next_step": self.next_step}


#: exceptions a check raises on purpose; any other one is SGLang's own code failing (a crash, likely a bug)
VALIDATION_EXCEPTIONS = frozenset({"AssertionError", "ValueError", "NotImplementedError", "RuntimeError",
                                   "SystemExit", "ArgumentTypeError", "ArgumentError"})


def failure_kind(outcome: Outcome) -> str | None:
    """``crash`` or ``validation`` for a failure in SGLang, ``will_not_start`` for a configuration the box cannot
    start (out of memory, too few GPUs), None otherwise (see :attr:`ProbeResult.failure_kind`)."""
    if outcome.passed or outcome.tool_fault is not None or outcome.status.value != "failed":
        return None
    if outcome.will_not_start is not None:
        return "will_not_start"
    return "validation" if str(outcome.exception.get("type")) in VALIDATION_EXCEPTIONS else "crash"


#: The target's attention-backend flags.
TARGET_BACKEND_FLAGS = ("--attention-backend", "--decode-attention-backend", "--prefill-attention-backend")
#: Flags that choose what a stage after the weights builds, searched for a fix of a failure raised there
#: (sglang#23490: an EAGLE3 head inherits the target's MLA-only backend; its reporter's way out was
#: ``--speculative-draft-attention-backend trtllm_mha``, which keeps the algorithm and the draft). The target's
#: backend flags only where the user typed none of them: adding ``--decode-attention-backend`` to a typed
#: ``--attention-backend`` would set aside what was typed while looking like an addition (sglang#9330).
STAGE_FLAGS = {"attention_backend": TARGET_BACKEND_FLAGS,
               "draft_worker": ("--speculative-draft-attention-backend", *TARGET_BACKEND_FLAGS)}


def _stage_flags(config: Config, stage: str | None) -> list[str]:
    typed_backend = any(flag in config.flags() for flag in TARGET_BACKEND_FLAGS)
    return [flag for flag in STAGE_FLAGS.get(stage or "", ()) if not (typed_backend and flag in TARGET_BACKEND_FLAGS)]


def shrink_space(session: Session, config: Config, failing: Outcome | None = None) -> Any:
    """Domains for shrinking and fixing: the config's flags plus the core speculative flags, and, for a
    failure (``failing``, the config's outcome) raised in a stage after the weights, the flags that choose
    what that stage builds."""
    from bisect_spec.search.plan import DEFAULT_STRATEGY, load_strategy
    from bisect_spec.search.space import CORE, build_space, without_draft_path

    values = load_strategy(DEFAULT_STRATEGY).values
    stage = failing.record.get("stage") if failing is not None else None
    flags = [*config.flags(), *CORE, *_stage_flags(config, stage if isinstance(stage, str) else None)]
    space = build_space(session.flags(), include=flags, values=values)
    draft = session.target.draft
    # no draft to add: an edit naming one could not be evaluated
    return without_draft_path(space) if draft is None or draft.path is None else space


def cached_evaluations(session: Session, use_cache: bool) -> Callable[[Sequence[Config]], list[Outcome]]:
    """``session.evaluate_many``, answered first from the cross-run outcome cache (the one sweeps fill, keyed by the
    target, its profiles' contents and the evaluating code's digest), each outcome it evaluates then kept there."""
    if not use_cache:
        return lambda configs: list(session.evaluate_many(configs))
    from bisect_spec.runtime import store
    from bisect_spec.runtime.session import target_record

    key = store.OutcomeCache.target_key(target_record(session.target))

    def evaluate_many(configs: Sequence[Config]) -> list[Outcome]:
        cache = store.OutcomeCache(environments.home() / "cache" / "outcomes.sqlite")
        try:
            hits = cache.get_many(key, [c.key() for c in configs])
            todo = [c for c in configs if c.key() not in hits]
            fresh = {o.config.key(): o for o in session.evaluate_many(todo)} if todo else {}
            for outcome in fresh.values():
                if outcome.status.value in store.DURABLE:
                    cache.put(key, outcome.config.key(), outcome.to_dict())
        finally:
            cache.close()
        return [fresh[c.key()] if c.key() in fresh else Outcome.from_dict(hits[c.key()]) for c in configs]

    return evaluate_many


def next_step(session: Session, config: Config, outcome: Outcome, *, use_cache: bool = True) -> dict[str, Any] | None:
    """The nearest configuration that passes, verified on the session (None when nothing near passes); the
    candidates' outcomes come from the cross-run outcome cache where it has them (``use_cache``)."""
    from bisect_spec.reduce.repair import fitting_layout, fixed_then_fitted, nearest_working

    if failure_kind(outcome) is None:
        return None
    cached = cached_evaluations(session, use_cache)
    tried: dict[Config, Outcome] = {}  # every candidate evaluated, and its outcome

    def evaluate_many(configs: Sequence[Config]) -> list[Outcome]:
        outcomes = cached(configs)
        tried.update((o.config, o) for o in outcomes)
        return outcomes

    figures = outcome.will_not_start
    if figures is not None:  # a layout that fits the box, or nothing: no other flag frees a GPU's memory
        return fitting_layout(config, evaluate_many, gpus=session.target.hardware.gpus, cause=str(figures["cause"]),
                              tp=session.canonical_flag("--tp-size"), pp=session.canonical_flag("--pp-size"),
                              fraction=figures.get("mem_fraction_static"))

    # EAGLE3 (or another drafted algorithm) with no draft: the way out is a draft (the warning says so), never
    # another algorithm the user did not ask for, though one may pass on these stages
    keep_algorithm = session.missing_draft(config, session.target.model.config) is not None
    algorithm = config.get("--speculative-algorithm")
    space = shrink_space(session, config, outcome)
    found = nearest_working(config, space, evaluate_many, limit=5 if keep_algorithm else 1, failing=outcome)
    fix = next((fix for fix in found["fixes"]
                if not keep_algorithm or Config.from_argv(fix["argv"]).get("--speculative-algorithm") == algorithm), None)
    if fix is None:  # SGLang accepts an edit, then the box cannot hold it as typed: that edit, at a width that fits
        fix = fixed_then_fitted(config, tried, evaluate_many, gpus=session.target.hardware.gpus, space=space,
                                tp=session.canonical_flag("--tp-size"), pp=session.canonical_flag("--pp-size"),
                                keep_algorithm=keep_algorithm)
    return fix


def check_usage(session: Session, outcome: Outcome) -> None:
    """Turn SGLang's own argparse rejection (bad value type, bad choice) into a usage error."""
    if outcome.status is Status.USAGE:
        message = outcome.exception.get("message") or "argument error"
        raise UsageError(f"SGLang {session.target.release} rejects the flags: {message}")


def probe(tokens: Sequence[str], spec: TargetSpec | None = None, *,
          on_start: Callable[[Session], None] | None = None, timeout: float = 120.0, warm: bool = True,
          notify: Callable[[str], None] | None = None, fix: bool = False, use_cache: bool = True) -> ProbeResult:
    """Evaluate one configuration (flags or a pasted launch command) on one target.

    :param tokens: SGLang flags, or a pasted ``python -m sglang.launch_server ...`` command.
    :param on_start: called once the worker is up (the CLI announces simulated hardware there).
    :param warm: evaluate on the target's warm worker (:mod:`bisect_spec.runtime.warm`), started if none
        runs and left up for the next call until its idle stop; False: a worker of its own.
    :param notify: told at once, in a line, when a worker has to be started (SGLang loading).
    :param fix: on a failure in SGLang, also find the nearest configuration that passes (verified; a few
        hundred evaluations at most): :attr:`ProbeResult.next_step`.
    :param use_cache: take the nearest configuration's candidates' outcomes from the cross-run outcome cache where
        it has them (the configuration asked about is always evaluated).
    :raises UsageError: unknown flag for this release, bad value, not an SGLang command.
    """
    with first_evaluation(tokens, spec, jobs=1, timeout=timeout, on_start=on_start, warm=warm,
                           notify=notify) as (session, full, outcome, notes, understood):
        return ProbeResult(session.target, full, outcome, session.info, notes, understood,
                           next_step(session, full, outcome, use_cache=use_cache) if fix else None)


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
        return ProbeResult(session.target, full, outcome, session.info, notes, spec)

    def _session(self, target: Target) -> Session:
        name = json.dumps([target.describe(), str(target.model.path), str(target.draft.path if target.draft else "")],
                          sort_keys=True)
        with self._lock:
            if name not in self._sessions:
                session = Session(target, jobs=1, timeout=self.timeout, log_dir=environments.home() / "logs",
                                  warm="start" if self.warm else "own", notify=self.notify)
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
    with ProbeSession(spec, timeout=timeout, warm=warm_everywhere(), notify=notify) as session:
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
    missing = session.missing_draft(full, session.target.model.config)
    if missing:
        notes.append(f"warning: {missing}")
    outcome = session.evaluate(full)
    check_usage(session, outcome)
    return full, outcome


@contextlib.contextmanager
def first_evaluation(tokens: Sequence[str], spec: TargetSpec | None, *, jobs: int, timeout: float,
                      on_start: Callable[[Session], None] | None, warm: bool = False,
                      notify: Callable[[str], None] | None = None,
                      ) -> Iterator[tuple[Session, Config, Outcome, list[str], TargetSpec]]:
    """Understand the user's flags, start a session and evaluate them once (probe and shrink start so)."""
    config, spec, notes = understand_flags(tokens, spec or TargetSpec())
    target = spec.resolve()
    if sources.is_label(target.release):  # say what a git:/path: target was taken as
        notes.append(sources.summary(target.release))
    session = Session(target, jobs=jobs, timeout=timeout, log_dir=environments.home() / "logs",
                      warm="start" if warm else "own", notify=notify)
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

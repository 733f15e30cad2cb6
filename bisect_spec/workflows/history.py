"""Does a verdict depend on what its worker evaluated before? A long random history on one worker, then controls,
compared with a fresh worker's verdicts on the same controls.

One worker process serves every target of one release and box (as a warm worker serves every model a user probes):
the history mixes models, drafts and flag combinations drawn from each target's flag space; the controls are fixed
configurations per target (the documented launch commands among them). Each control is evaluated on the worker
after the history and on a fresh worker, and the verdicts are compared field by field (:data:`FIELDS`); a
history entry that later comes back (every ``recheck``-th) is compared with its own fresh evaluation too.

A difference is a leak of process state from one evaluation into the next: never a verdict, always a fault of the
emulation (or of SGLang's in-process reuse that the emulation must undo). ``tests/integration/test_history.py``
runs a short history in CI; ``scripts/history_check.py`` the long one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config
from bisect_spec.runtime.session import Session
from bisect_spec.runtime.target_spec import TargetSpec

#: what a verdict is made of (not its timing or its id)
FIELDS = ("status", "stage", "stages_passed", "exception", "frame", "memory_pool", "cuda_graphs", "attention_backends",
          "draft_worker", "needs_gpu", "will_not_start", "tool_fault", "model_classes")


@dataclass(frozen=True)
class Case:
    """One target of the check: a model and draft on the shared box, with its controls."""

    model: str
    draft: str | None
    controls: tuple[Config, ...]
    #: what a history row of this target starts from (its deployment width, a speculative algorithm); each row
    #: then sets up to :data:`FLAGS_PER_ROW` flags of the strategy's space at random values
    base: Config = field(default_factory=Config)


#: how many flags of the space a history row sets on top of its target's base: few, so most rows get past the
#: argument checks to the stages after the weights, where process state is written
FLAGS_PER_ROW = 3


@dataclass
class HistoryReport:
    """What the check found: how many evaluations the shared worker served, and every difference."""

    release: str
    hardware: str
    evaluations: int = 0
    compared: int = 0
    #: ``{"model", "config", "after", "field", "shared", "fresh"}`` per differing field
    differences: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"release": self.release, "hardware": self.hardware, "evaluations": self.evaluations,
                "compared": self.compared, "differences": self.differences}


def verdict_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of an evaluation record that make its verdict."""
    return {name: record.get(name) for name in FIELDS}


def history_check(release: str, cases: Sequence[Case], *, hardware: str = "h200", gpus: int = 8, length: int = 200,
                  seed: int = 0, recheck: int = 10, strategy: str = "default", flags_per_row: int = FLAGS_PER_ROW,
                  notify: Callable[[str], None] | None = None) -> HistoryReport:
    """Run ``length`` random evaluations across ``cases`` on one worker, then every control; compare the controls
    and every ``recheck``-th history entry with a fresh worker's verdicts.

    :raises ReleaseError: the release is not installed or does not import.
    """
    from bisect_spec.search.plan import load_strategy

    rng = random.Random(seed)
    sessions = [Session(TargetSpec(release=release, model=case.model, draft=case.draft, hardware=hardware,
                                   gpus=gpus, inherit_env=False).resolve(), jobs=1, timeout=300, warm="own")
                for case in cases]
    shared, fresh = sessions[0], None
    report = HistoryReport(release, f"{hardware}x{gpus}")
    try:
        shared.start()
        spaces = [load_strategy(strategy).space(session.flags()) for session in sessions]
        history: list[tuple[int, Config]] = []
        for number in range(length):  # the first case first: a test pins which model a history starts with
            index = rng.randrange(len(cases)) if number else 0
            space = spaces[index]
            chosen: dict[str, Any] = dict(cases[index].base.as_dict())
            for spec in rng.sample(list(space.specs), rng.randrange(flags_per_row + 1)):
                chosen[spec.flag] = spec.values[rng.randrange(len(spec.values))]
            history.append((index, sessions[index].with_draft(sessions[index].canonical(space.complete(chosen)))))
        kept: list[tuple[int, Config, dict[str, Any], str]] = []
        previous = "nothing"
        for number, (index, config) in enumerate(history):
            try:
                argv = sessions[index].argv(config)
            except UsageError:  # a row naming a draft path its draft has none of (NEXTN): not a launch
                continue
            record = shared.pool.evaluate(argv)
            report.evaluations += 1
            if recheck and number % recheck == recheck - 1:
                kept.append((index, config, verdict_fields(record), previous))
            previous = f"{cases[index].model}: {' '.join(config.argv())}"
            if notify and number % 50 == 49:
                notify(f"history: {number + 1}/{length} evaluations on one worker")
        for index, case in enumerate(cases):
            for control in case.controls:
                config = sessions[index].with_draft(sessions[index].canonical(control))
                record = shared.pool.evaluate(sessions[index].argv(config))
                report.evaluations += 1
                kept.append((index, config, verdict_fields(record), f"the {length}-evaluation history"))
        fresh = Session(sessions[0].target, jobs=1, timeout=300, warm="own")
        fresh.start()
        for index, config, seen, after in kept:
            alone = verdict_fields(fresh.pool.evaluate(sessions[index].argv(config)))
            report.compared += 1
            for name in FIELDS:
                if seen.get(name) != alone.get(name):
                    report.differences.append({"model": cases[index].model, "config": config.argv(), "after": after,
                                               "field": name, "shared": seen.get(name), "fresh": alone.get(name)})
        return report
    finally:
        shared.close()
        if fresh is not None:
            fresh.close()

"""The deployment shape: the parallel layout a sweep's rows start from, the one a user of that box would launch.

SGLang's own default is ``--tp-size 1``. On a box of eight GPUs nobody serves Kimi-K2.6 at tp 1, and its weights do
not fit one GPU: a sweep whose rows start there answers for a launch that cannot start. So the base of every row is

* the user's own layout, where their flags give one (``--tp-size``): nothing added;
* else the box's GPU count as ``--tp-size``, where the model starts there (what a user of that box runs);
* else the widest power of two below it that starts (a width the model's heads divide);
* and where no width starts, the box's GPU count, said so: every row then will not start.

Each width is evaluated (SGLang's own build on ``meta``, sized against the box); the widths that will not start
are the ones the plan tests once, not in every combination. Rows still vary ``--tp-size`` and the rest: the base
is what a row has where it sets no ``--tp-size``.

Takes a batch predicate and starts no processes (as :mod:`bisect_spec.reduce.repair`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome

BatchPredicate = Callable[[Sequence[Config]], list[Outcome]]

#: SGLang's canonical spelling of the tensor-parallel width (``--tp`` is its alias).
TP = "--tp-size"


@dataclass(frozen=True)
class DeploymentShape:
    """The base of a sweep's rows and why, with the widths that will not start on the box."""

    base: Config
    reason: str
    #: ``--tp-size`` values that will not start on the box, each with the tool's words
    will_not_start: tuple[tuple[str, str], ...] = field(default=())

    @property
    def line(self) -> str:
        """``base: --tp-size 8 (kimi-k2.6 needs 8 RTX PRO 6000 for its weights)``."""
        return f"base: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"argv": self.base.argv(), "reason": self.reason,
                "will_not_start": [{"value": value, "why": why} for value, why in self.will_not_start]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeploymentShape:
        return cls(Config.from_argv(list(data.get("argv") or [])), str(data.get("reason") or ""),
                   tuple((str(e["value"]), str(e["why"])) for e in data.get("will_not_start") or []))


def widths(gpus: int) -> list[int]:
    """The tensor-parallel widths a box of ``gpus`` GPUs can run, as users pick them: its GPU count, then every
    power of two below it, widest first."""
    found = [gpus] if gpus >= 1 else [1]
    found += [1 << k for k in range(gpus.bit_length(), -1, -1) if (1 << k) < gpus]
    return list(dict.fromkeys(found))


def deployment_shape(evaluate: BatchPredicate, *, gpus: int, given: Config, model: str, gpu: str,
                     tp: str = TP) -> DeploymentShape:
    """The base of a sweep's rows for ``model`` on a box of ``gpus`` ``gpu`` GPUs (see the module's docstring).

    :param given: the flags every row has as typed (a strategy's fixed flags): a ``--tp-size`` there is the shape.
    :param tp: the release's canonical spelling of ``--tp-size`` (0.5.9: ``--tensor-parallel-size``).
    """
    def _row(width: int) -> Config:
        return Config() if width == 1 else Config.of({tp: str(width)})

    if given.get(tp) is not None:
        return DeploymentShape(Config(), f"your flags ({tp} {' '.join(given.get(tp) or ())})")
    candidates = widths(gpus)
    outcomes = {o.config: o for o in evaluate([_row(width) for width in candidates])}
    starts = [w for w in candidates if _row(w) in outcomes and outcomes[_row(w)].will_not_start is None]
    refused = tuple((str(w), str(outcomes[_row(w)].exception.get("message") or "will not start"))
                    for w in sorted(candidates) if _row(w) in outcomes and outcomes[_row(w)].will_not_start is not None)
    if not starts:
        return DeploymentShape(_row(gpus), f"{tp} {gpus}, the box's GPU count: {model} does not start on {gpus} {gpu} "
                               "at any width (every row will not start)", refused)
    passing = [w for w in starts if outcomes[_row(w)].passed]
    width = (passing or starts)[0]
    smallest = min(starts)
    if width == 1:
        return DeploymentShape(Config(), f"SGLang's default {tp} 1 (the box has one GPU)" if gpus == 1
                               else f"SGLang's default {tp} 1", refused)
    why = (f"{model} needs {smallest} {gpu} for its weights" if refused and smallest == width
           else f"the box's {gpus} {gpu}" if width == gpus else f"the widest width that starts on {gpus} {gpu}")
    return DeploymentShape(_row(width), f"{tp} {width} ({why})", refused)

"""Outcome records: what one evaluation of one configuration did.

The worker reports plain facts (see ``evaluator.py``); an :class:`Outcome` adds where it
ran (release, Python, hardware) and the failure :class:`~bisect_spec.model.signature.Signature`.
``to_dict`` is the documented JSON shape used by ``--json`` output and the run store:

``status``      passed | failed | crashed | timeout | usage
``config``      the flags, canonical (``@model``/``@draft`` stand for the profiles)
``argv``        the full argv given to ``prepare_server_args``
``release``     SGLang release; ``python``; ``hardware`` (e.g. ``simulated:rtx-pro-6000x8``)
``resolved``    on pass: resolved values that matter (algorithm, steps, topk, ...)
``given``       flags the user wrote, as SGLang parsed them
``exception``   on failure: ``{"type", "module", "message"}``
``frame``       innermost SGLang frame: ``file`` (relative to the sglang package), ``line``,
                ``function``, ``statement`` (whole, as ``ast.unparse`` writes the source's text), ``source``, ``context``,
                ``guard`` (the enclosing ``if``), ``expression`` (3.11+: the raising part)
``traceback_tail`` on failure: SGLang's traceback (its frames and the final exception, paths relative to
                the sglang package; no bisect-spec frames, no import fallback being handled)
``signature``   on failure: ``{"id", "cross_release_key", "exc_type", "location", ...}``; its ``statement``
                is the normal form (receivers written ``_.``) that groups failures, ``frame.statement`` the text
``crash``       for crashed/timeout: how the worker ended (``segfault (SIGSEGV)``, ``exit(3)``)
``tool_fault``  crashed in bisect-spec's own emulation (the step), not in SGLang: never a verdict

The JSON Schema of this record is ``outcome`` in ``bisect_spec/data/schemas/common.schema.json``.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.model.signature import Signature, signature_of

#: The launch path's stages, as the worker side reads them (``inside/launch/stage.py``): one list, in
#: ``bisect_spec/data/stages.json``, read here as data (this layer imports nothing of ``inside``).
_STAGES: list[dict[str, Any]] = json.loads((Path(__file__).resolve().parent.parent / "data" / "stages.json")
                                           .read_text(encoding="utf-8"))["stages"]

#: Stages in launch order, for the per-stage counts (stages of an older or newer tool version sort last, in name
#: order).
STAGE_ORDER: tuple[str, ...] = tuple(str(stage["name"]) for stage in _STAGES)


def stage_sort_key(stage: str) -> tuple[int, str]:
    """Launch order for a stage name; a stage of another tool version sorts after them all, by name."""
    return (STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER), stage)


#: Stages a real launch runs only after the target's weights load.
AFTER_WEIGHTS = frozenset(str(stage["name"]) for stage in _STAGES if stage["after_weights"])


class Status(enum.StrEnum):
    """How an evaluation ended."""

    PASSED = "passed"
    FAILED = "failed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    USAGE = "usage"
    FLAKY = "flaky"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Outcome:
    """One configuration evaluated on one release, model, draft and hardware."""

    config: Config
    status: Status
    release: str
    python: str
    hardware: str
    record: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    signature: Signature | None = None

    @classmethod
    def from_record(cls, config: Config, record: dict[str, Any], *, release: str, python: str, hardware: str) -> Outcome:
        return cls(config, Status(record.get("status", "crashed")), release, python, hardware, record, signature_of(record))

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    @property
    def will_not_start(self) -> dict[str, Any] | None:
        """The figures of a configuration that will not start on the box (``cause``: ``weights``, out of memory;
        ``gpus``, more GPUs than it has; ``needed``, ``available``), or None."""
        figures = self.record.get("will_not_start")
        return figures if self.status is Status.FAILED and isinstance(figures, dict) else None

    @property
    def stopped_early(self) -> dict[str, str]:
        """A pass's stages that stopped early at a step no CPU can take (stage: why); empty for a full pass."""
        stops: dict[str, str] = self.record.get("needs_gpu") or {} if self.passed else {}
        return stops

    @property
    def verdict(self) -> str:
        """The verdict level, as people read it: ``PASSED`` (every check a CPU can run, ran), ``PASSED UP TO`` (a
        stage stopped early), ``WILL NOT START`` (out of memory, too few GPUs), ``FAILED`` (SGLang refused or
        crashed), else the status in capitals (``CRASHED``, ``TIMEOUT``, ``USAGE``)."""
        if self.passed:
            return "PASSED UP TO" if self.stopped_early else "PASSED"
        if self.will_not_start is not None:
            return "WILL NOT START"
        return self.status.value.upper()

    @property
    def tool_fault(self) -> str | None:
        """The step of bisect-spec's own emulation that failed (status crashed), or None."""
        fault = self.record.get("tool_fault")
        return str(fault) if fault else None

    @property
    def reached(self) -> str:
        """How far along ``launch_server``'s path it got, in words ("attention-backend selection, after
        the weights load"): the last stage a PASSED outcome ran, or the stage a failure stopped in."""
        return str(self.record.get("reached") or self.record.get("stage") or "?")

    @property
    def resolved(self) -> dict[str, Any]:
        resolved: dict[str, Any] = self.record.get("resolved") or {}
        return resolved

    @property
    def exception(self) -> dict[str, Any]:
        exception: dict[str, Any] = self.record.get("exception") or {}
        return exception

    @property
    def frame(self) -> dict[str, Any]:
        frame: dict[str, Any] = self.record.get("frame") or {}
        return frame

    @property
    def headline(self) -> str:
        """One line: ``passed`` or ``AssertionError: <message> (file:line in function)``."""
        if self.passed:
            return "passed"
        if self.will_not_start is not None:
            return f"will not start: {self.exception.get('message', '')}"
        if self.status in (Status.CRASHED, Status.TIMEOUT):
            return f"{self.status}: {self.record.get('crash', '')}"
        exc = self.exception
        where = f" ({self.frame.get('file')}:{self.frame.get('line')} in {self.frame.get('function')})" if self.frame else ""
        message = exc.get("message") or ""
        return f"{exc.get('type', self.status)}{': ' + message if message else ''}{where}"

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.record.items() if k not in ("status", "id")}
        data.update(status=self.status.value, config=self.config.argv(), release=self.release,
                    python=self.python, hardware=self.hardware)
        if self.signature is not None:
            data["signature"] = self.signature.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        record = {k: v for k, v in data.items() if k not in ("config", "release", "python", "hardware", "signature")}
        signature = Signature.from_dict(data["signature"]) if data.get("signature") else None
        if record.get("status") == "failed":  # derived data: a cached record gets this version's grouping
            signature = signature_of(record)
        return cls(Config.from_argv(data.get("config", [])), Status(data["status"]), data["release"], data["python"],
                   data["hardware"], record, signature)

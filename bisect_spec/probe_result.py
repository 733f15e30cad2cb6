"""What a probe answers: one configuration's verdict on one target, with what the tool changed in the input.

Its own module so that what renders it (:mod:`bisect_spec.render`) needs nothing of
:mod:`bisect_spec.api`, which runs the probe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .flags import Config
from .outcome import Outcome
from .session import Target


@dataclass
class ProbeResult:
    """One configuration's verdict, with what the tool changed in the user's input."""

    target: Target
    config: Config
    outcome: Outcome
    worker: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "bisect-spec/probe/1", "target": self.target.describe(), "worker": self.worker,
                "notes": self.notes, "outcome": self.outcome.to_dict()}

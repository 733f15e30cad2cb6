"""What a probe answers: one configuration's verdict on one target, with what the tool changed in the input.

The probe workflow's result (:func:`bisect_spec.api.probe`); what renders it as text
(:func:`bisect_spec.report.text.probe_text`) takes its parts, so the report layer needs nothing of this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.runtime.session import Target


@dataclass
class ProbeResult:
    """One configuration's verdict, with what the tool changed in the user's input."""

    target: Target
    config: Config
    outcome: Outcome
    worker: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def heading(self) -> str:
        """The target in one line: release, model (+ draft), hardware, Python."""
        target = self.target
        return (f"SGLang {target.release} · {target.model.name}"
                f"{' + ' + target.draft.name if target.draft else ''} · {self.worker.get('hardware')}"
                f" · Python {self.worker.get('python')}")

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "bisect-spec/probe/1", "target": self.target.describe(), "worker": self.worker,
                "notes": self.notes, "outcome": self.outcome.to_dict()}

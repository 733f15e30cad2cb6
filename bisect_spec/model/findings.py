"""Passing is not the same as right: findings in configurations that resolve.

Three kinds, grouped like failures (a :class:`~bisect_spec.model.signature.Signature` with
``kind="finding"``):

``override``     a value the user gave was replaced by resolution (both values kept),
                 e.g. NGRAM silently sets the user's ``--speculative-eagle-topk 1`` to 10;
``left-none``    speculation is on but a speculative field stayed ``None``: later code
                 compares it (``speculative_num_draft_tokens=None`` after steps + topk);
``nonsense``     a nonsensical value was accepted (``--speculative-num-steps 0`` or ``-1``).

Pure: no I/O, no processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bisect_spec.model.outcome import Outcome
from bisect_spec.model.signature import Signature

SPECULATIVE_COUNTS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
#: Fields whose value must be a positive count when given.
POSITIVE = (*SPECULATIVE_COUNTS, "tp_size", "dp_size", "pp_size", "page_size", "max_running_requests",
            "cuda_graph_max_bs")
#: Algorithms that use the EAGLE-style steps/topk/draft-token triple.
TREE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
#: Algorithm names SGLang documents as aliases of another (resolved name -> given names).
ALIASES = {"EAGLE": ("NEXTN",)}


@dataclass(frozen=True)
class Finding:
    """One suspicious thing about one passing configuration."""

    kind: str
    field: str
    detail: str
    given: Any = None
    resolved: Any = None

    @property
    def signature(self) -> Signature:
        return Signature("finding", self.kind, self.field, self.detail, self.detail)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "field": self.field, "detail": self.detail, "given": self.given,
                "resolved": self.resolved, "signature": self.signature.to_dict()}


def findings_of(outcome: Outcome) -> list[Finding]:
    """Findings for a passing outcome (none for failures: those have signatures)."""
    if not outcome.passed:
        return []
    resolved = outcome.resolved
    given = outcome.record.get("given") or {}
    found: list[Finding] = []
    algorithm = resolved.get("speculative_algorithm")
    for name, value in sorted(given.items()):
        if name not in resolved or name.endswith("_path"):
            continue
        now = resolved[name]
        if name == "speculative_algorithm" and value in ALIASES.get(str(now), ()):
            continue  # documented aliasing (NEXTN is EAGLE), not an override
        if value is not None and now != value and not _same(value, now):
            detail = f"{name} given {_kind(value)}, resolution replaced it"
            if algorithm:
                detail += f" under {algorithm}"
            found.append(Finding("override", name, detail, value, now))
    if algorithm in TREE_ALGORITHMS:
        for name in SPECULATIVE_COUNTS:
            if name in resolved and resolved[name] is None:
                found.append(Finding("left-none", name, f"{name} left None with {algorithm}", given.get(name), None))
    for name in POSITIVE:
        value = given.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            found.append(Finding("nonsense", name, f"{name} {'0' if value == 0 else 'negative'} accepted",
                                 value, resolved.get(name)))
    return found


def _same(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _kind(value: Any) -> str:
    """The given value, generalised so one override pattern is one finding (``1`` vs ``2``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(value)
    return "a non-positive number" if value <= 0 else "a positive number"

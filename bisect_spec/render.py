"""Plain-text rendering for the terminal: tables, verdicts, failing source.

Pure functions from results to strings; the CLI decides where they go.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import ProbeResult
    from .outcome import Outcome


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, max_width: int = 70) -> str:
    """A left-aligned text table; cells longer than ``max_width`` are cut with an ellipsis."""
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value: Any, max_width: int) -> str:
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    return text if len(text) <= max_width else text[: max_width - 1] + "…"


def source_block(frame: dict[str, Any]) -> str:
    """The failing statement with its context, the failing lines marked with ``>``."""
    if not frame.get("context"):
        return f"    {frame.get('statement', '')}"
    first, last = frame.get("statement_lines", [0, 0])
    guard = (frame.get("guard") or {}).get("line")
    out = []
    for number, text in frame["context"]:
        mark = ">" if first <= number <= last else ("?" if number == guard else " ")
        out.append(f"  {number:>5} {mark} {text}")
    return "\n".join(out)


def outcome_text(outcome: Outcome) -> str:
    """Verdict, signature and failing source (or resolved values) of one outcome."""
    lines = []
    if outcome.passed:
        lines.append("verdict:  PASSED")
        resolved = outcome.resolved
        keys = [k for k in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                            "speculative_num_draft_tokens", "attention_backend", "prefill_attention_backend",
                            "decode_attention_backend", "page_size", "tp_size", "dp_size", "max_running_requests",
                            "cuda_graph_max_bs", "mem_fraction_static", "disable_overlap_schedule") if k in resolved]
        lines.append(table(["resolved", "value"], [[k, resolved[k]] for k in keys]))
        given = outcome.record.get("given") or {}
        overridden = [(k, v, resolved[k]) for k, v in given.items() if k in resolved and resolved[k] != v]
        for key, was, now in overridden:
            lines.append(f"note: SGLang changed {key}: you gave {was!r}, it resolved to {now!r}")
        return "\n".join(lines)
    lines.append(f"verdict:  {outcome.status.value.upper()}  {outcome.headline}")
    if outcome.signature is not None:
        sig = outcome.signature
        lines.append(f"signature: {sig.id}  (cross-release key {sig.cross_release_key})")
    frame = outcome.frame
    if frame.get("statement"):
        lines.append(f"at {frame.get('file')}:{frame.get('line')} in {frame.get('function')}:")
        lines.append(source_block(frame))
        if frame.get("guard"):
            lines.append(f"guarded by line {frame['guard']['line']}: {frame['guard']['text']}")
    return "\n".join(lines)


def probe_text(result: ProbeResult) -> str:
    target = result.target
    head = (f"SGLang {target.release} · {target.model.name}"
            f"{' + ' + target.draft.name if target.draft else ''} · {result.worker.get('hardware')}"
            f" · Python {result.worker.get('python')}")
    return "\n".join([head, f"flags:    {result.config}", outcome_text(result.outcome)])

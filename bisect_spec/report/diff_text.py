"""``diff.md`` and the terminal text of ``bisect-spec diff``, from the ``bisect-spec/diff/1`` document.

Written for a pull-request comment: the gate's answer first, then a count per change, then each
change with the flags that show it (the minimal reproducer where one was shrunk), what the other
side does with exactly those flags, and the code on both sides. Messages are SGLang's own (the
example's exception), never the grouping's normal form. Pure: text in, text out.
"""

from __future__ import annotations

import shlex
from typing import Any

from bisect_spec.model.verdict_kinds import GATED, KINDS, MEANING

_HEADINGS = {
    "new": "New failures", "wider": "Known failures catching more", "defaults": "Changed defaults",
    "fixed": "Fixed failures", "narrower": "Known failures catching less", "moved": "Moved failures",
    "message": "Changed messages", "replaced": "Failures replaced by other known ones",
}
#: groups shown in full per kind; the rest are counted
SHOWN = 8


def _flags(argv: list[str]) -> str:
    return shlex.join(argv) if argv else "(no flags)"


def _verdict(side: dict[str, Any]) -> str:
    if side.get("status") == "passed":
        return f"passes (up to {side.get('reached')})" if side.get("reached") not in (None, "?") else "passes"
    return str(side.get("headline"))


def _there(reproducer: dict[str, Any]) -> dict[str, Any]:
    return {"status": reproducer["there_status"], "headline": reproducer["there_headline"],
            "reached": reproducer.get("there_reached")}


def _code(side: dict[str, Any]) -> list[str]:
    """The failing statement with the lines around it, numbered as in the release's file."""
    context = side.get("context")
    if not context:
        return ["```python", str(side["statement"]), "```"] if side.get("statement") else []
    place = str(side.get("place") or "")
    line = place.rsplit(":", 1)[-1].split(" ", 1)[0] if ":" in place else ""
    width = max(len(str(n)) for n, _ in context)
    body = [f"{'>' if str(n) == line else ' '}{n:>{width}}  {text}" for n, text in context]
    return ["```", *body, "```"]


def _there_code(found: dict[str, Any] | None, side: str) -> list[str]:
    """The other side's code where the failure is raised (or that it has no such statement or function)."""
    if not found or not found.get("function"):
        return []
    where = f"`{found['function']}` in `{found['file']}`"
    if found.get("found") == "statement":
        numbered = [f"{'>' if n == found['line'] else ' '}{n:>5}  {text}" for n, text in found["context"]]
        return [f"{side}: the same statement, line {found['line']} of {where} (the configuration does not reach it, "
                "or passes it)", "```", *numbered, "```"]
    if found.get("found") == "no such function":
        return [f"{side}: no {where}."]
    return [f"{side}: {where} (line {found.get('line')}) has no such statement."]


def _group(number: int, group: dict[str, Any], old: str, new: str) -> list[str]:
    kind = group["kind"]
    count = group["count"]
    plural = "s" if count != 1 else ""
    if kind == "defaults":
        detail = group["detail"]
        out = [f"#### {number}. `{detail['field']}`: {detail['old_value']!r} on {old}, {detail['new_value']!r} on {new} "
               f"({count} configuration{plural})", "",
               f"- simplest configuration: `{_flags(group['example'])}`"]
        for move in (detail.get("transitions") or [])[1:4]:
            out.append(f"- also {move['old']} → {move['new']} ({move['count']}): `{_flags(move['example'])}`")
        return [*out, ""]
    failing = group["old"] if kind in ("fixed", "narrower") else group["new"]
    exception = failing.get("exception") or {}
    if exception.get("message"):
        words = f"`{exception.get('type', '')}: {exception.get('message')}`"
    elif failing.get("statement"):  # a bare assert: its statement is what a reader can search for
        statement = ' '.join(str(failing['statement']).split())
        words = f"`{exception.get('type') or failing.get('headline')}` (no message) at `{statement}`"
    else:
        words = f"`{exception.get('type') or failing.get('headline')}`"
    out = [f"#### {number}. {words} ({count} configuration{plural})", ""]
    if group["detail"].get("unmasked"):
        out.append(f"- {group['detail']['unmasked']}")
    reproducer = group.get("reproducer") or {}
    if reproducer.get("argv") is not None:
        here = old if reproducer["here"] == "old" else new
        there = old if reproducer["there"] == "old" else new
        shrunk = "1-minimal" if reproducer.get("status") == "minimal" else f"not shrunk ({reproducer.get('status')})"
        out += [f"- reproducer ({shrunk} on {here}): `{_flags(reproducer['argv'])}`",
                f"- on {there}, the same flags: {_verdict(_there(reproducer))}"]
    else:
        out.append(f"- simplest configuration: `{_flags(group['example'])}`")
        if reproducer.get("note"):
            out.append(f"- {reproducer['note']}")
    if kind in ("moved", "message"):
        out += [f"- on {old}: `{group['old'].get('place')}`", f"- on {new}: `{group['new'].get('place')}`"]
        if kind == "message":
            out += [f"- {old} says: {group['detail'].get('old_message')!r}",
                    f"- {new} says: {group['detail'].get('new_message')!r}"]
        out += ["", f"{old}:", *_code(group["old"]), f"{new}:", *_code(group["new"])]
    else:
        other = group["new"] if kind in ("fixed", "narrower") else group["old"]
        side_name = new if kind in ("fixed", "narrower") else old
        failing_name = old if kind in ("fixed", "narrower") else new
        out.append(f"- raised at `{failing.get('place')}` on {failing_name}")
        if reproducer.get("argv") is None:
            out.append(f"- the simplest configuration on {side_name}: {_verdict(other)}")
        out += ["", f"{failing_name}:", *_code(failing), *_there_code(group["detail"].get("there_code"), side_name)]
    return [*out, ""]


def diff_markdown(data: dict[str, Any]) -> str:
    """The diff for people: a pull-request comment."""
    old, new = data["old"], data["new"]
    target = data.get("target") or {}
    counts = data.get("counts") or {}
    gating = data.get("gating") or []
    flags = f" · flags `{_flags(data['flags'])}`" if data.get("flags") else ""
    out = [f"## bisect-spec diff: SGLang {old} → {new}", "",
           f"{target.get('model')} + {target.get('draft') or 'no draft'} · {target.get('hardware')} · "
           f"strategy `{data.get('strategy')}`{flags} (`@model` and `@draft` stand for their config directories)", ""]
    if gating:
        what = ", ".join(f"{_HEADINGS[k].lower()}: {counts[k]}" for k in KINDS if k in GATED and counts.get(k))
        out.append(f"**The gate fails**: {what} (`--allow` accepts one by its signature id or field).")
    else:
        out.append("**The gate passes**: no new failure, no known failure catching more, no changed default"
                   + (f" that `--allow` does not list ({', '.join(data['allow'])})" if data.get("allow") else "") + ".")
    not_compared = data.get("not_compared") or {}
    skipped = sum(not_compared.values())
    out += ["", f"{data.get('compared', 0)} configurations compared on both sides"
            + (f"; {skipped} not compared:" if skipped else ".")]
    named = {"old": old, "new": new}
    for why, n in sorted(not_compared.items(), key=lambda item: -item[1])[:6]:
        side, _, rest = why.partition(" ")
        out.append(f"- {n}: {named.get(side.rstrip(':'), side.rstrip(':'))}{':' if side.endswith(':') else ''} {rest}")
    if len(not_compared) > 6:
        out.append(f"- and {len(not_compared) - 6} more reasons in diff.json")
    out.append("")
    if any(counts.get(k) for k in KINDS):
        out += ["| change | groups | what it means |", "|---|---|---|"]
        out += [f"| {_HEADINGS[k]} | {counts[k]} | {MEANING[k]} |" for k in KINDS if counts.get(k)]
        out.append("")
    else:
        out += ["No change of verdict, failure, place, message or resolved value.", ""]
    for kind in KINDS:
        groups = [g for g in data.get("groups", []) if g["kind"] == kind]
        if not groups:
            continue
        out += [f"### {_HEADINGS[kind]}", ""]
        for number, group in enumerate(groups[:SHOWN], 1):
            out += _group(number, group, old, new)
        if len(groups) > SHOWN:
            out += [f"… and {len(groups) - SHOWN} more in diff.json.", ""]
    out.append(f"Runs: {data['runs'].get('old')} and {data['runs'].get('new')}.")
    return "\n".join(out) + "\n"

"""Plain-text rendering for the terminal: tables, verdicts, failing source.

Pure functions from results to strings; the CLI decides where they go.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bisect_spec.model.outcome import AFTER_WEIGHTS, stage_sort_key
from bisect_spec.report.bug_report import reason_heading
from bisect_spec.report.night import (
    FIXED,
    ID_LEGEND,
    NEW,
    by_failure,
    cell_id_of,
    cells_text,
    key_of,
    night_line,
    night_verdicts,
)
from bisect_spec.report.summary import shown_message, users_failures, verdicts_line, will_not_start_line

if TYPE_CHECKING:
    from bisect_spec.model.outcome import Outcome


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


#: What a PASSED verdict never covers: the steps after the stages, which need the weights on a GPU.
NOT_CHECKED = ("not checked: the weights, the KV memory pool's size and CUDA-graph capture (they need the loaded "
               "weights on a GPU: bisect-spec launch runs a real one)")
#: The same, where SGLang sized the pool on the simulated box (stage ``memory_pool``).
NOT_CHECKED_AFTER_SIZING = ("not checked: the weights' values, the memory the box itself takes (CUDA context, "
                            "communication buffers) and CUDA-graph capture (bisect-spec launch runs a real one)")


#: The stages whose checks read what SGLang sized on the simulated box (a failure there shows the figures).
SIZED_STAGES = frozenset({"memory_pool", "cuda_graph_sizes", "target_worker"})


def cuda_graphs_line(graphs: dict[str, Any]) -> str:
    """The batch sizes SGLang chose for the target's CUDA graphs (the capture itself not run)."""
    if graphs.get("disabled"):
        return "CUDA graphs: none captured (SGLang's graph setup captures no decode graph)"
    sizes = graphs.get("capture_bs") or []
    shown = ", ".join(map(str, sizes)) if len(sizes) <= 8 else f"{', '.join(map(str, sizes[:4]))}, …, {sizes[-1]}"
    rows = graphs.get("shared_logits_rows")
    shared = f", a shared logits buffer of {rows} rows" if isinstance(rows, int) else ""
    return (f"CUDA graphs SGLang would capture: {len(sizes)} batch sizes ({shown}), "
            f"{graphs.get('num_tokens_per_bs')} tokens per request{shared}; the capture itself not run")


def memory_pool_line(pool: dict[str, Any], *, failed: bool | None = False) -> str:
    """What SGLang sized on the simulated box, in its own units (GiB, tokens), and how far to trust it: a pass is
    an upper bound, a failure of the sizing holds on a real box; ``failed=None`` (a later check failed on the
    figures, not on the memory) gives the figures alone."""
    gib = 1 << 30
    line = (f"memory pool SGLang sized on the simulated box: weights {pool['weights_bytes'] / gib:.2f} GiB per GPU "
            f"of {pool['total_bytes'] / gib:.2f} GiB, mem_fraction_static {pool.get('mem_fraction_static')}")
    if pool.get("max_total_num_tokens") is not None:
        line += f", KV cache {pool['max_total_num_tokens']} tokens"
    if pool.get("max_running_requests") is not None:
        line += f", {pool['max_running_requests']} running requests"
    if pool.get("draft_pool_bytes") is not None:  # up to 0.5.13: the draft's weights and pool, on top
        line += (f"; the draft's weights {pool.get('draft_weights_bytes', 0) / gib:.2f} GiB and pool "
                 f"{pool['draft_pool_bytes'] / gib:.2f} GiB beside it leave {pool.get('free_after_draft_bytes', 0) / gib:.2f}"
                 " GiB")
    elif pool.get("draft_weights_bytes"):  # 0.5.14+: SGLang's sizing charged them
        line += f" (the draft's weights, {pool['draft_weights_bytes'] / gib:.2f} GiB, charged by SGLang's sizing)"
    if pool.get("processing_skipped"):
        line += f" (post-load processing not run: {', '.join(pool['processing_skipped'])})"
    if failed is None:
        return line
    return line + ("; a real box has less free memory, so it fails there too" if failed
                   else "; a real box has less free memory, so this is an upper bound")


def outcome_text(outcome: Outcome) -> str:
    """Verdict, signature and failing source (or resolved values) of one outcome."""
    lines = []
    if outcome.passed:
        if outcome.stopped_early:
            lines.append(f"verdict:  PASSED UP TO {outcome.reached}")
            lines.append("          not every check ran: a stage stopped at a step no CPU can take")
        else:
            lines.append(f"verdict:  PASSED  every check a CPU can run, ran (up to {outcome.reached})")
        for stage, call in outcome.stopped_early.items():
            lines.append(f"          stage {stage} stopped early: {call}")
        if outcome.record.get("attention_backends"):
            lines.append(f"          attention backends SGLang chose: {', '.join(outcome.record['attention_backends'])}")
        if outcome.record.get("draft_worker"):
            lines.append(f"          draft worker SGLang chose: {outcome.record['draft_worker']}")
        if outcome.record.get("draft_attention_backends"):
            lines.append("          the draft's attention backends: "
                         f"{', '.join(outcome.record['draft_attention_backends'])}")
        pool = outcome.record.get("memory_pool")
        if pool:
            lines.append(f"          {memory_pool_line(pool)}")
        graphs = outcome.record.get("cuda_graphs")
        if graphs:
            lines.append(f"          {cuda_graphs_line(graphs)}")
        lines.append(f"          {NOT_CHECKED_AFTER_SIZING if pool else NOT_CHECKED}")
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
    oom = outcome.will_not_start
    if oom is not None:
        lines.append(f"verdict:  WILL NOT START  {will_not_start_line(oom)}")
        lines.append(f"          {outcome.exception.get('message', '')}")
        lines.append("kind:     a configuration error for this box (predicted from SGLang's own build on meta), "
                     "not an SGLang bug")
        lines.append(f"signature: {outcome.signature.id if outcome.signature else ''}")
        return "\n".join(lines)
    lines.append(f"verdict:  {outcome.status.value.upper()}  {outcome.headline}")
    if outcome.record.get("stage") and outcome.tool_fault is None:
        lines.append(f"stage:    {outcome.reached}")
        pool = outcome.record.get("memory_pool")
        if outcome.record.get("stage") in SIZED_STAGES and pool:  # what the failing check read
            sizing = outcome.record["stage"] == "memory_pool"
            lines.append(f"          {memory_pool_line(pool, failed=True if sizing else None)}")
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


def probe_text(heading: str, config: object, outcome: Outcome) -> str:
    """A probe's answer: ``heading`` (the target, :meth:`ProbeResult.heading`), the flags, the verdict."""
    return "\n".join([heading, f"flags:    {config}", outcome_text(outcome)])


def release_history_line(bisection: dict[str, Any]) -> str:
    """One line for ``shrink --bisect``: a first bad release only where an older release passes; a failure as
    old as the oldest release that can run the model says so (and what its sibling model shows)."""
    if bisection.get("first_bad"):
        return f"first bad release: SGLang {bisection['first_bad']} (last good {bisection['last_good']})"
    if not bisection.get("fails_from"):
        return f"first bad release: {bisection.get('none')}"
    since = bisection["fails_from"]
    if bisection.get("model_limited"):
        line = f"fails on every release evaluated that knows the model ({since} …): no first bad release"
    else:
        line = f"fails on every release evaluated, from the oldest ({since} …): no first bad release"
    sibling = bisection.get("sibling") or {}
    if sibling.get("first_bad"):
        line += f"; with {sibling['model']}: first bad release {sibling['first_bad']} (last good {sibling['last_good']})"
    elif sibling.get("fails_from"):
        line += f"; with {sibling['model']}: fails from {sibling['fails_from']}"
    elif sibling.get("model"):
        line += f"; with {sibling['model']}: {sibling.get('none')}"
    return line


def next_step_text(kind: str | None, fix: dict[str, Any] | None, probe_command: str, shrink_command: str, *,
                   searched: bool = True, without_fix: str | None = None) -> str:
    """What a failed probe says to do next: what kind of failure it is, the nearest configuration that passes
    (verified) as a command to paste (when ``searched``; else ``without_fix``, what to do instead, where nothing
    near passes), and ``shrink`` for more. Empty for a pass or a fault of ours."""
    if kind is None:
        return ""
    lines = []
    if kind == "will_not_start" and fix is not None:
        what = ("the largest --mem-fraction-static that starts" if any("--mem-fraction-static" in edit
                                                                        for edit in fix["edits"])
                else "the nearest layout that starts on this box")
        lines.append(f"next:     {what} (verified, "
                     f"{'a full pass' if fix.get('full_pass', True) else 'a pass that stopped early'}): "
                     f"{', '.join(fix['edits'])}")
        lines.append(f"          {probe_command}")
        lines.append(f"more:     {shrink_command}")
        return "\n".join(lines)
    if kind == "will_not_start":
        lines.append("next:     no parallel layout or --mem-fraction-static of this box holds it: a box with more GPU "
                     "memory (--hardware, --gpus)")
        lines.append(f"more:     {shrink_command}")
        return "\n".join(lines)
    if kind == "crash":
        lines.append("kind:     SGLang's own code crashed (not a validation message): likely an SGLang bug; "
                     "shrink writes bug_report.md")
    if fix is not None and fix.get("keeps_intent") is False:
        # nothing that keeps what the user asked for passes near: say so, and that this changes it
        lines.append(f"next:     nothing one or two edits away passes and keeps what you asked for; this passes "
                     f"(verified) but changes it: {', '.join(fix['edits'])}")
        if fix.get("reason"):
            lines.append(f"          ({fix['reason']})")
        lines.append(f"          {probe_command}")
    elif fix is not None:
        lines.append(f"next:     the nearest configuration that passes (verified): {', '.join(fix['edits'])}")
        lines.append(f"          {probe_command}")
    elif searched and without_fix:
        lines.append(f"next:     {without_fix}")
    elif searched:
        lines.append("next:     no configuration one or two edits away passes")
    lines.append(f"more:     {shrink_command}")
    lines.append("          (a 1-minimal reproducer, which flags matter, the nearest working configurations, "
                 "bug_report.md)")
    return "\n".join(lines)


def tool_fault_lines(faults: list[dict[str, Any]]) -> list[str]:
    """bisect-spec's own faults in a sweep, apart from SGLang's failures: one line each, with a way to report."""
    if not faults:
        return []
    total = sum(int(f["count"]) for f in faults)
    lines = [f"bisect-spec's own faults (not SGLang's verdicts, never shrunk): {total} configuration"
             f"{'' if total == 1 else 's'}; please report them against bisect-spec"]
    lines += [f"  {f['count']:>5} × {f['step']}   e.g. bisect-spec probe --debug -- {' '.join(f['example'])}"
              for f in faults]
    return lines


#: lines of the user's own failure cards before the "more" line: the default job's summary then opens with
#: the answer to the user's question and its "more" line inside one 50-line screen
CARD_LINES = 30


def summary_text(summary: dict[str, Any], *, width: int = 120, run_path: str | None = None,
                 algorithm: str | None = None, flag: str | None = None, grep: str | None = None,
                 findings: bool = False) -> str:
    """The end of a sweep for a terminal ``width`` columns wide: the answer to the user's question first.

    With filters (``algorithm``, ``flag``, ``grep``: :func:`bisect_spec.report.summary.matches`), the
    signatures that match, every one. Else, when the target's draft names an algorithm, the failures a
    user of that draft can hit (its algorithm family's; fewest flags first) as cards, up to
    :data:`CARD_LINES` lines and a "more" line, then everything else under one line per algorithm (each
    expandable with ``runs show --algorithm``). Without a draft: speculative failures first
    (:func:`bisect_spec.report.summary.speculative_reason`), then the other constraints. Then the counts
    and findings; the last lines say where the reproducers and the HTML report are.
    """
    from bisect_spec.report.summary import matches, speculative_reason, users_algorithms

    signatures = summary["signatures"]
    counts = ", ".join(f"{v} {k}" for k, v in summary["counts"].items())
    target = summary["target"]
    head = (f"SGLang {target['release']} · {target['model']}{' + ' + target['draft'] if target.get('draft') else ''}"
            f" · {target['hardware']} · strategy {summary['strategy']} (seed {summary['seed']})")
    show = f"bisect-spec runs show {_run_reference(run_path)}"
    users = users_algorithms(target)
    if algorithm is not None or flag is not None or grep is not None:
        chosen = [s for s in signatures if matches(s, algorithm=algorithm, flag=flag, grep=grep)]
        asked = " ".join(f"--{name} {value}" for name, value in (("algorithm", algorithm), ("flag", flag),
                                                                  ("grep", grep)) if value is not None)
        parts = [f"{len(chosen)} of {len(signatures)} failure signatures match {asked}"]
        if chosen:
            parts.append(_fitted_signatures(_simplest_first(chosen), width))
    elif users:
        parts = [*starts_lines(summary.get("starts"), target, width, run_path), *_users_question(
            signatures, users, target, width, show)]
    else:
        speculative = [s for s in signatures if s.get("speculative", speculative_reason(s))]
        other = [s for s in signatures if not s.get("speculative", speculative_reason(s))]
        parts = [f"speculative decoding: {_failures(len(speculative))}"]
        if speculative:
            parts.append(_fitted_signatures(speculative, width))
        parts += ["", f"other constraints met on the way: {_failures(len(other))}"]
        if other:
            parts.append(_fitted_signatures(other, width))
    parts += ["", head]
    if summary.get("shape", {}).get("reason"):
        parts.append(f"base: {summary['shape']['reason']}")
    parts.append(f"{summary['evaluated']} configurations: {counts}; {len(signatures)} failure signatures")
    if summary.get("verdicts"):
        parts.append(f"verdicts: {verdicts_line(summary['verdicts'])}")
    if summary.get("stages"):
        parts.append(_wrapped(stages_line(summary["stages"]), width, "  "))
    parts += tool_fault_lines(summary.get("tool_faults") or [])
    if summary.get("release_warning"):
        parts.append(f"warning: {summary['release_warning']}")
    if summary.get("masking"):
        parts.append(_wrapped(masking_line(summary["masking"]), width, "  "))
    if summary.get("peel"):
        peel = summary["peel"]
        new = len(peel["new_signatures"])
        parts.append(f"peeling: {peel['rows']} failing rows again without their failure's reproducer "
                     f"({len(peel['levels'])} levels), {new} new signature{'' if new == 1 else 's'}")
    if summary["findings"] and findings:
        parts += ["", f"{len(summary['findings'])} findings in passing configurations:",
                  _fitted_findings(summary["findings"], width)]
    elif summary["findings"]:
        parts += ["", _wrapped(folded_findings(summary["findings"]) + f"; list them: {show} --findings", width, "  ")]
    if run_path is not None:
        shrunk = [s for s in signatures if (s.get("shrink") or {}).get("reproducers")]
        parts.append("")
        if shrunk:
            line = (f"reproducers:  {run_path}/reproducers/<id>/{{launch.sh,repro.py,test_regression.py,"
                    f"bug_report.md}} ({len(shrunk)} signatures)")
            if len(line) > width:  # the directory on one line, the files under it
                line = (f"reproducers:  {run_path}/reproducers/<id>/ ({len(shrunk)} signatures)\n"
                        "              launch.sh, repro.py, test_regression.py, bug_report.md")
            parts.append(line)
        else:
            parts.append("reproducers:  none written (--no-shrink, or nothing failed)")
        parts.append(f"HTML report:  {run_path}/report.html")
    return "\n".join(parts)


def folded_findings(findings: Sequence[dict[str, Any]]) -> str:
    """Findings in passing configurations, one count per kind (``override ×12, ignored ×3``)."""
    kinds: dict[str, int] = {}
    for finding in findings:
        kinds[str(finding["kind"])] = kinds.get(str(finding["kind"]), 0) + int(finding.get("count") or 0)
    shown = ", ".join(f"{kind} ×{count}" for kind, count in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{len(findings)} findings in passing configurations ({shown})"


def starts_lines(starts: dict[str, Any] | None, target: dict[str, Any], width: int,
                 run_path: str | None) -> list[str]:
    """"Starts on your box": the command to launch (the furthest-reaching configuration of the draft's algorithm,
    with the user's model and draft), what SGLang resolves it to, and the draft's knobs by verdict."""
    if not starts:
        return []
    family = "/".join(starts.get("algorithms") or [])
    if not starts.get("argv"):
        return [f"starts on your box ({family}): no configuration of {family} passed; see what bites below", ""]
    verdict = starts["verdict"]
    stopped = starts.get("stopped") or {}
    said = ("PASSED: every check a CPU can run, ran" if verdict == "PASSED" else
            f"PASSED UP TO {starts['reached']}: " + "; ".join(f"{stage}: {why}" for stage, why in stopped.items()))
    parts = [f"starts on your box ({family}, {target.get('hardware')}, SGLang {target.get('release')}): "
             f"{starts['full_passes']} of {starts['passes']} passing {family} configurations ran every check",
             _wrapped(f"  {starts['command']}", width, "    "), _wrapped(f"  verdict: {said}", width, "    ")]
    resolved = starts.get("resolved") or {}
    if resolved:
        words = {"speculative_algorithm": "algorithm", "speculative_num_steps": "steps", "speculative_eagle_topk":
                 "topk", "speculative_num_draft_tokens": "draft tokens", "attention_backend": "attention",
                 "prefill_attention_backend": "prefill", "decode_attention_backend": "decode",
                 "speculative_draft_attention_backend": "draft attention", "page_size": "page size"}
        line = "  resolves to: " + ", ".join(f"{words.get(k, k)} {v}" for k, v in resolved.items())
        pool = starts.get("memory_pool") or {}
        if pool.get("max_total_num_tokens") is not None:
            line += f"; KV cache {pool['max_total_num_tokens']} tokens"
        sizes = (starts.get("cuda_graphs") or {}).get("capture_bs") or []
        if sizes:
            line += f"; CUDA graphs for batch sizes {sizes[0]} … {sizes[-1]} ({len(sizes)})"
        parts.append(_wrapped(line, width, "    "))
    probe = " ".join(shlex.quote(a) for a in starts["argv"])
    parts.append(_wrapped(f"  check it: bisect-spec probe --model {target.get('model')} --draft {target.get('draft')} "
                          f"--hardware {target.get('hardware')} --sglang {target.get('release')} -- {probe}",
                          width, "    "))
    parts += knob_lines(starts.get("knobs") or [], width)
    return [*parts, ""]


def knob_lines(cells: Sequence[dict[str, Any]], width: int, *, rows: int = 8) -> list[str]:
    """The draft's knobs by verdict: one line per (steps, topk), a cell per draft-token count
    (``-``: not given, SGLang's default)."""
    if not cells:
        return []
    from bisect_spec.report.summary import KNOB_LEGEND, KNOB_MARKS, knob_grid

    tokens, lines = knob_grid(cells)
    head = "  knobs (steps, topk) × draft tokens: " + "  ".join(f"{t or '-':>4}" for t in tokens)
    out = [head if len(head) <= width else head[: width - 1] + "…"]
    label = len("  knobs (steps, topk) × draft tokens: ")
    for (steps, topk), marks in list(lines.items())[:rows]:
        name = f"    steps {steps or '-'}, topk {topk or '-'}"
        line = f"{name:<{label}}" + "  ".join(f"{KNOB_MARKS.get(marks.get(t, ''), ''):>4}" for t in tokens)
        out.append(line if len(line) <= width else line[: width - 1] + "…")
    if len(lines) > rows:
        out.append(f"    … {len(lines) - rows} more settings (report.html draws them all)")
    out.append(f"    {KNOB_LEGEND}")
    return out


def _run_reference(run_path: str | None) -> str:
    """``RUN --runs-dir DIR`` for a stored run (``RUN`` when unknown)."""
    if run_path is None:
        return "RUN"
    from pathlib import PurePath

    path = PurePath(run_path)
    return f"{path.name} --runs-dir {path.parent}" if str(path.parent) not in ("", ".", "runs") else path.name


def _simplest_first(signatures: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    from bisect_spec.report.summary import reproducer_of

    return sorted(signatures, key=lambda s: (len(reproducer_of(s)), -int(s.get("count") or 0), s["id"]))


def _users_question(signatures: Sequence[dict[str, Any]], users: frozenset[str], target: dict[str, Any], width: int,
                    show: str) -> list[str]:
    """The failures a user of the target's draft can hit, then one line per other algorithm."""
    from bisect_spec.report.summary import NO_ALGORITHM, algorithm_of, shown_message, users_failures, without_a_draft_path

    family = ",".join(sorted(users))
    mine, rest = users_failures(list(signatures), target)
    parts = [f"your draft ({target.get('draft')}, {family.replace(',', '/')}): {_failures(len(mine))}"
             + (", fewest flags first" if len(mine) > 1 else "")]
    cards: list[str] = []
    used = 0
    for sig in mine:
        card = _fitted_signatures([sig], width)
        own = [argv for name, argv in sorted((sig.get("algorithms") or {}).items()) if name in users]
        if algorithm_of(sig) not in users and own:  # the reproducer runs another algorithm: the user's own way in
            seen = _wrapped(f"  seen with {'/'.join(sorted(users))}: {' '.join(own[0])}", width, " " * 11)
            card += "\n" + (seen if seen.count("\n") < 2 else
                            f"  seen with {'/'.join(sorted(users))} too ({len(own[0])} words; --json has it)")
        lines = card.count("\n") + 1
        if cards and used + lines > CARD_LINES:
            break
        cards.append(card)
        used += lines
    parts += cards
    if len(cards) < len(mine):
        parts.append(f"… {len(mine) - len(cards)} more: {show} --algorithm {family}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for sig in rest:
        name = algorithm_of(sig)
        groups.setdefault(f"{name}, no draft path" if name in users and without_a_draft_path(sig) else name,
                          []).append(sig)
    parts += ["", f"everything else: {_failures(len(rest))}" + (", one line per algorithm" if rest else "")]
    name_width = max((len(n) for n in groups), default=0)
    for name, members in sorted(groups.items(), key=lambda item: (item[0] == NO_ALGORITHM, -len(item[1]), item[0])):
        top = _simplest_first(members)[0]
        label = "(no algorithm)" if name == NO_ALGORITHM else name
        line = (f"  {label:<{max(name_width, 14)}} {_failures(len(members)):>12}  "
                f"e.g. {top['exc_type'] or top['kind']}: {shown_message(top)}")
        parts.append(line if len(line) <= width else line[: width - 1] + "…")
    if rest:
        parts.append(_wrapped(f"  expand one: {show} --algorithm NAME", width, "    "))
    return parts


def masking_line(masking: dict[str, Any]) -> str:
    """How many required tuples the sweep saw without a mask (``bisect_spec.search.masking``)."""
    later = masking.get("rounds", [])[1:]
    return (f"required tuples: {masking['required_tuples']}, {masking['covered_without_mask']} covered without a mask, "
            f"{masking['proven_to_fail']} proven to fail, {masking['still_masked']} still masked "
            f"({len(later)} masking-aware round{'' if len(later) == 1 else 's'}, {sum(r['rows'] for r in later)} rows)")


def _failures(count: int) -> str:
    return f"{count} failure{'' if count == 1 else 's'}"


def _fitted_signatures(signatures: Sequence[dict[str, Any]], width: int) -> str:
    """Signatures fitted to ``width`` columns, nothing a reader needs cut: one card each.

    The first line holds id, exception, count and location; then the reproducer and the
    message, wrapped at spaces so a flag and its value stay together. A table row would
    have to cut the reproducer to fit, and the reproducer is the one thing to copy.
    """
    cards = []
    for sig in signatures:
        where, line, reproducer, message = _signature_cells(sig)
        head = f"{sig['id']}  {sig['exc_type'] or sig['kind']} ×{sig['count']}  {where}{':' + str(line) if line else ''}"
        label = "minimal:" if sig.get("shrink") else "seen:   "
        card = [_wrapped(head, width, "    "), _wrapped(f"  {label} {reproducer}", width, " " * 11)]
        if message:
            card.append(_wrapped(f"  message: {message}", width, " " * 11))
        variants = sig.get("variants") or []
        if len(variants) > 1:  # the values formatted into the message, most frequent first
            shown = ", ".join(f"{v['values']} ×{v['count']}" for v in variants[:3])
            total = sig.get("variant_count") or len(variants)
            card.append(_wrapped(f"  values:  {total} variants: {shown}{', …' if total > 3 else ''}", width, " " * 11))
        cards.append("\n".join(card))
    return "\n".join(cards)


def _fitted_findings(findings: Sequence[dict[str, Any]], width: int) -> str:
    """Findings one line each (they are not failures: the details are in ``runs show --json`` and
    the HTML report), cut to ``width`` with an ellipsis."""
    lines = []
    for f in findings:
        line = f"{f['id']}  {f['kind']} ×{f['count']}  {f['detail']}  (seen: {' '.join(f['smallest']) or 'defaults'})"
        lines.append(line if len(line) <= width else line[:width - 1] + "…")
    return "\n".join(lines)


def _wrapped(text: str, width: int, indent: str) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width=width, subsequent_indent=indent, break_on_hyphens=False,
                                   break_long_words=True)) or text


def _signature_cells(sig: dict[str, Any]) -> tuple[str, int | None, str, str]:
    """Location (function in file), line, reproducer and message of one signature."""
    frame = sig.get("example_frame") or {}
    file = str(frame.get("file") or sig.get("location", "").split("::", 1)[0] or "-")
    function = frame.get("function") or (sig.get("location", "").rsplit("::", 1)[-1] if sig.get("location") else "")
    where = f"{function} in {file}" if function else file
    shrunk = sig.get("shrink")
    reproducer = (" ".join(shrunk["minimal_argv"]) or "(defaults)") if shrunk else (" ".join(sig["smallest"]) or "(defaults)")
    return where, frame.get("line"), reproducer, shown_message(sig)


def fitted(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int, *, ratios: Sequence[int],
           right: Sequence[int] = ()) -> str:
    """A plain-text table (``rich``) no wider than ``width`` columns; cells cut with an ellipsis.

    Columns with ratio 0 keep their natural width (ids, counts); the others share the
    rest in proportion to their ratio.
    """
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, width=width, collapse_padding=True)
    for index, (header, ratio) in enumerate(zip(headers, ratios, strict=True)):
        grid.add_column(header, no_wrap=True, overflow="ellipsis", ratio=ratio or None,
                        justify="right" if index in right else "left")
    for row in rows:
        grid.add_row(*(" ".join(str("" if v is None else v).split()) for v in row))
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, highlight=False, markup=False, emoji=False).print(grid)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())


def stages_line(stages: dict[str, dict[str, int]]) -> str:
    """How far configurations got along ``launch_server``'s path: passed ones by the last stage that
    ran, those whose last stage stopped early at a step only a GPU runs by that stage (summaries before
    stop 38 counted them as passed), failed ones by the stage that raised; stages after the weights marked ``+w``."""
    def ordered(counts: dict[str, int]) -> str:
        names = sorted(counts, key=stage_sort_key)
        return ", ".join(f"{counts[n]} {n}{' (+w)' if n in AFTER_WEIGHTS else ''}" for n in names) or "none"
    passed, stopped = stages.get("passed") or {}, stages.get("stopped") or {}
    parts = [f"passed up to {ordered(passed)}"] if passed or not stopped else []
    if stopped:
        parts.append(f"passed, then stopped early (a step only a GPU runs) in {ordered(stopped)}")
    return (f"stages reached: {'; '.join(parts)}; failed in {ordered(stages.get('failed') or {})} "
            "((+w): after the weights load)")


def summary_markdown(summary: dict[str, Any]) -> str:
    """The run summary as Markdown (for PRs and issues)."""
    target = summary["target"]
    lines = [f"# bisect-spec sweep: SGLang {target['release']}, {target['model']}"
             f"{' + ' + target['draft'] if target.get('draft') else ''}, {target['hardware']}", "",
             f"Strategy `{summary['strategy']}` (seed {summary['seed']}), {summary['evaluated']} configurations: "
             + ", ".join(f"{v} {k}" for k, v in summary["counts"].items()),
             *(["", f"Verdicts: {verdicts_line(summary['verdicts'])}"] if summary.get("verdicts") else []),
             *(["", stages_line(summary["stages"])] if summary.get("stages") else []),
             *_starts_markdown(summary.get("starts")), "", "## Failure signatures", "",
             "| id | exception | SGLang location | count | smallest config seen | message |", "|---|---|---|---|---|---|"]
    mine, rest = users_failures(list(summary["signatures"]), target)
    if mine:  # the user's question first: the draft's own failures, then the rest (the table's order says so)
        lines[-4] = f"## Failure signatures: the {len(mine)} a user of the {target.get('draft')} draft can hit first"
    for sig in [*mine, *rest]:
        frame = sig.get("example_frame") or {}
        where = f"`{frame.get('file')}::{frame.get('function')}`" if frame else "-"
        shrunk = sig.get("shrink")
        minimal = f" → minimal `{' '.join(shrunk['minimal_argv']) or '(defaults)'}`" if shrunk else ""
        lines.append(f"| `{sig['id']}` | {sig['exc_type'] or sig['kind']} | {where} | {sig['count']} | "
                     f"`{' '.join(sig['smallest']) or '(defaults)'}`{minimal} | "
                     f"{_md(shown_message(sig))} |")
    if summary["findings"]:
        lines += ["", "## Findings in passing configurations", "",
                  "| id | finding | field | count | smallest config seen | detail |", "|---|---|---|---|---|---|"]
        for f in summary["findings"]:
            lines.append(f"| `{f['id']}` | {f['kind']} | `{f['field']}` | {f['count']} | `{' '.join(f['smallest'])}` | "
                         f"{_md(f['detail'])} |")
    return "\n".join(lines) + "\n"


def _starts_markdown(starts: dict[str, Any] | None) -> list[str]:
    """"Starts on your box" in Markdown: the command, its verdict, what it resolves to."""
    if not starts:
        return []
    family = "/".join(starts.get("algorithms") or [])
    if not starts.get("argv"):
        return ["", "## Starts on your box", "", f"No configuration of {family} passed."]
    resolved = ", ".join(f"{k} {v}" for k, v in (starts.get("resolved") or {}).items())
    return ["", "## Starts on your box", "", f"{starts['verdict']} ({starts['full_passes']} of {starts['passes']} "
            f"passing {family} configurations ran every check):", "", "```bash", str(starts.get("command")), "```",
            *(["", f"Resolves to: {resolved}."] if resolved else [])]


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def shrink_text(report: Any) -> str:
    """A shrink report for the terminal: reproducer, proof, explanation, fixes, files."""
    data = report.to_dict()
    sig = data["signature"] or {}
    lines = [f"SGLang {data['target']['release']} · {data['target']['model']}"
             f"{' + ' + data['target']['draft'] if data['target'].get('draft') else ''} · {data['target']['hardware']}",
             f"original ({len(data['original_argv']) and len([a for a in data['original_argv'] if a.startswith('--')])} flags): "
             f"{' '.join(data['original_argv'])}",
             f"signature {sig.get('id')}: {sig.get('exc_type')} in {sig.get('location')}",
             f"status:   {data['status']}{' (' + data['stop_reason'] + ')' if data['stop_reason'] else ''}"
             f" after {data['evaluations']} evaluations"]
    if data["status"] == "flaky":
        return "\n".join(lines)
    lines += ["", f"minimal reproducer: {' '.join(data['minimal_argv'])}", "",
              "1-minimal, proven by these evaluations:"]
    lines += [f"  {step['change']:<45} -> {step['outcome']}" for step in data["proof"]]
    if report.minimal is not None:
        lines += ["", outcome_text(report.minimal)]
    if data["explanation"]:
        lines += ["", "why:"] + [f"  {f['verdict']}" for f in data["explanation"]["flags"]]
    fixes = (data["nearest_working"] or {}).get("fixes") or []
    if fixes:
        lines += ["", "nearest working configurations (each verified by an evaluation):"]
        said = None
        for fix in fixes:
            reason = fix.get("reason") or ""
            if reason and reason != said:  # once for the fixes that share it
                lines.append(f"  {reason_heading(reason)}")
                said = reason
            lines.append(f"    {'; '.join(fix['edits'])}")
    elif data["nearest_working"] is not None:
        lines += ["", "no working configuration within two edits"]
    if data["other_signatures"]:
        lines += ["", f"{len(data['other_signatures'])} other signature(s) met on the way: "
                  + ", ".join(o["signature"]["id"] for o in data["other_signatures"])]
    newest, bisection = data.get("newest"), data.get("bisection")
    if newest:
        said = "fails the same way" if newest["same"] else f"{newest['verdict']} ({newest['headline']})"
        lines += ["", f"newest release: SGLang {newest['release']} {said}"]
    if bisection:
        lines.append(release_history_line(bisection))
    if data["files"]:
        lines += ["", "reproducers:"] + [f"  {path}" for path in data["files"].values()]
    return "\n".join(lines)


def side_by_side(before: dict[str, Any] | None, after: dict[str, Any] | None, *, width: int = 62) -> str:
    """Two code blocks in two columns, changed lines marked (``|`` changed, ``<`` only left, ``>`` only right)."""
    import difflib
    import textwrap

    def lines(block: dict[str, Any] | None) -> list[str]:
        return textwrap.dedent(str(block["source"])).splitlines() if block and block.get("source") else []

    def head(block: dict[str, Any] | None) -> str:
        if not block:
            return "(no matching code)"
        return f"{block.get('release')} {block.get('file')}:{block.get('start')} {block.get('function') or ''}".strip()

    def cut(text: str) -> str:
        return text if len(text) <= width else text[: width - 1] + "…"

    left, right = lines(before), lines(after)
    out = [f"{cut(head(before)).ljust(width)}   {cut(head(after))}", f"{'-' * width}   {'-' * width}"]
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            span = list(zip(left[i1:i2], right[j1:j2], strict=True))
            if len(span) > 6:  # long unchanged runs: first and last two lines
                span = [*span[:2], ("⋮", "⋮"), *span[-2:]]
            out += [f"{cut(a).ljust(width)}   {cut(b)}" for a, b in span]
            continue
        a_part, b_part = left[i1:i2], right[j1:j2]
        for k in range(max(len(a_part), len(b_part))):
            a = a_part[k] if k < len(a_part) else ""
            b = b_part[k] if k < len(b_part) else ""
            mark = "|" if a and b else ("<" if a else ">")
            out.append(f"{cut(a).ljust(width)} {mark} {cut(b)}")
    return "\n".join(out)


def bisect_text(report: Any) -> str:
    """What ``bisect-spec bisect`` prints: the timeline, the verdict change and each boundary's code."""
    data = report.to_dict()
    target = data["target"]
    out = [f"bisect: {' '.join(data['config'])}",
           f"target: {target.get('model')} + {target.get('draft') or 'no draft'} · hardware {target.get('hardware')}"
           f"{' x' + str(target.get('gpus')) if target.get('gpus') else ''}",
           f"releases {data['releases'][0]} … {data['releases'][-1]}: evaluated {data['evaluated_count']} of "
           f"{len(data['releases'])} releases{' (--scan: every installed one)' if data.get('scan') else ''}, skipped "
           f"{sum(1 for e in data['evaluated'] if not e.get('key'))}, environments built {len(data['environments_built'])}"
           f" in {data['seconds']} s", ""]
    rows = []
    for segment in data["segments"]:
        span = segment["first"] if segment["first"] == segment["last"] else f"{segment['first']} – {segment['last']}"
        verdict = segment["verdict"] or "?"
        what = (f"{verdict.upper()}  {segment.get('headline') or ''}" if verdict != "passed" else "passed")
        rows.append([span, f"{len(segment['probed'])}/{segment['releases']}", what,
                     segment.get("cross_release_key") or ""])
    out += [table(["releases", "probed", "verdict", "key"], rows, max_width=90), ""]
    verdict_changes = [b for b in data["boundaries"] if b["kind"] == "verdict"]
    moves = [b for b in data["boundaries"] if b["kind"] == "moved"]
    old, new = data["terms"]["old"], data["terms"]["new"]
    if data["first_bad"]:
        first = verdict_changes[0]
        out.append(f"first {new} release: {first['first_bad']} (last {old}: {first['last_good']}): "
                   f"{first['before'].get('headline')} → {first['after'].get('headline')}")
        if first["skipped_between"]:
            out.append(f"  (releases in between could not be evaluated: {', '.join(first['skipped_between'])})")
    else:
        segments = data["segments"]
        verdict = segments[0]["verdict"] if segments else "?"
        keys = {s.get("cross_release_key") for s in segments}
        same = f" as one failure (cross-release key {next(iter(keys))})" if verdict != "passed" and len(keys) == 1 else ""
        out.append(f"no verdict change: {verdict} on every release evaluated{same}")
    if moves:
        out.append(f"the failure moved {len(moves)} time{'s' if len(moves) != 1 else ''}:")
        for move in moves:
            out.append(f"  {move['last_good']} → {move['first_bad']}: {move['before'].get('location')} → "
                       f"{move['after'].get('location')}")
    for boundary in data["boundaries"]:
        title = "verdict change" if boundary["kind"] == "verdict" else "move"
        out += ["", f"{title} {boundary['last_good']} → {boundary['first_bad']}:",
                side_by_side(boundary.get("code_before"), boundary.get("code_after"))]
    for note in data["notes"]:
        out.append(f"note: {note}")
    for warning in data.get("warnings", []):
        out.append(f"warning: {warning}")
    return "\n".join(out)


def nightly_text(data: dict[str, Any]) -> str:
    """The terminal summary of a nightly: one row per cell, then one per failure (its cross-release key) by the
    night's verdict (:func:`bisect_spec.report.night.night_verdicts`, as every nightly output reads it)."""
    verdicts = night_verdicts(data)
    rows = []
    for cell in data["cells"]:
        counts = cell.get("counts") or {}
        mine = [v for v in verdicts if v["cell"] == cell_id_of(cell) and v["verdict"] != FIXED and v["change"] != "not-checked"]
        rows.append([cell["id"], cell["status"] if cell["status"] != "skipped" else f"skipped: {cell.get('reason')}",
                     cell.get("evaluated") or "", counts.get("passed", ""),
                     sum(v for k, v in counts.items() if k != "passed") if counts else "",
                     len(mine) if cell["status"] == "done" else "",
                     sum(1 for v in mine if v["verdict"] == NEW) or ""])
    out = [f"nightly {data['id']} · matrix {data['matrix'].get('name')} · strategy {data['matrix'].get('strategy')} · "
           f"baseline {data.get('baseline') or 'none'}",
           table(["cell", "status", "evaluated", "passed", "failed", "failures", "new"], rows, max_width=60)]
    failures = by_failure(verdicts)
    if failures:
        out += ["", table(["id", "verdict", "cells", "failure", "detail"],
                          [[r["id"], r["word"], cells_text(r, brief=True), r["title"], r["detail"] or " ".join(r["smallest"])]
                           for r in failures], max_width=120), ID_LEGEND]
    if data.get("baseline") and not data.get("changes"):
        out.append(f"no change against {data['baseline']}")
    elif not data.get("baseline"):
        out.append("no baseline: every failure is known (found on the first night: the baseline of the next), none new")
    bisected = [c for c in data.get("changes", []) if c.get("commits")]
    if bisected:
        out += ["", "regressions bisected to the commit:"]
        out += [f"  {c['cell']} {key_of(c)}: {commit_line(c['commits'])}" for c in bisected]
    out.append(night_line(verdicts))
    return "\n".join(out)


def commit_line(summary: dict[str, Any]) -> str:
    """One line for a nightly's commit bisection (:func:`bisect_spec.workflows.nightly.commit_summary`)."""
    if summary.get("error"):
        return f"not bisected: {summary['error']}"
    if not summary.get("changed"):
        return f"no verdict change between {summary['old']} and {summary['new']}"
    first = summary.get("first")
    if first:
        pr = f" (PR #{first['pr']})" if first.get("pr") else ""
        return f"{first['short']} {first['subject']}{pr}, {summary['evaluations']} evaluations of {summary['commits']} commits"
    candidates = summary.get("candidates") or []
    return f"one of {len(candidates)} commits {candidates[0]} … {candidates[-1]} (the others could not be evaluated)"


def nightly_markdown(data: dict[str, Any]) -> str:
    """``nightly.md``: the night's verdict per failure first (what a reviewer needs), then every cell."""
    verdicts = night_verdicts(data)
    out = [f"# Nightly {data['id']}", "",
           f"Matrix `{data['matrix'].get('name')}`, strategy `{data['matrix'].get('strategy')}`, "
           f"baseline `{data.get('baseline') or 'none'}`: **{night_line(verdicts)}**.", ""]
    if not data.get("baseline"):
        out += ["No baseline: every failure below is reported as found (known), none as new.", ""]
    failures = by_failure(verdicts)
    if failures:
        out += ["| id | verdict | cells | failure | detail |", "|---|---|---|---|---|"]
        out += [f"| `{r['id']}` | {r['word']} | {cells_text(r)} | {r['title'].replace('|', '/')} | "
                f"{(r['detail'] or ' '.join(r['smallest'])).replace('|', '/')} |" for r in failures]
        out += ["", f"{ID_LEGEND}.", ""]
        out += [f"- `{key_of(c)}` ({c['cell']}): {commit_line(c['commits'])}" for c in data.get("changes", [])
                if c.get("commits")]
        out += [""] if any(c.get("commits") for c in data.get("changes", [])) else []
    out += ["| cell | status | evaluated | failures (id) |", "|---|---|---|---|"]
    for cell in data["cells"]:
        status = cell["status"] if cell["status"] != "skipped" else f"skipped: {cell.get('reason')}"
        keys = dict.fromkeys(key_of(s) for s in cell.get("signatures") or [])
        out.append(f"| {cell['id']} | {status} | {cell.get('evaluated') or ''} | "
                   f"{', '.join('`' + key + '`' for key in keys)} |")
    return "\n".join(out) + "\n"


def commits_text(report: Any, *, diff_lines: int = 80) -> str:
    """What ``bisect-spec bisect --repo`` prints for the commits: the probes, the first commit (or the
    candidates, as git names them) and the failing function's diff between its parent and it."""
    data = report.to_dict()
    old, new = data["old"], data["new"]

    def verdict(record: dict[str, Any]) -> str:
        if record.get("key") is None:
            return f"skipped: {record.get('reason')}"
        if record.get("verdict") == "passed":
            return "passed"
        return f"{str(record.get('verdict')).upper()}  {record.get('headline')}"

    count = data["commits"]
    out = [f"commits {old['rev']} … {new['rev']} in {data['repo']}: {count} touch python/sglang, each laid "
           f"over the SGLang {data['environment']} environment",
           f"evaluated {data['evaluations']} commits in {data['seconds']} s (a binary search over {count} needs at most "
           f"ceil(log2 {count}) + 2 = {math.ceil(math.log2(count)) + 2 if count > 1 else 2} without skips)", ""]
    rows = [[r["role"], r["short"], r["subject"], verdict(r)] for r in data["evaluated"]]
    out += [table(["", "commit", "subject", "verdict"], rows, max_width=70), ""]
    if not data["changed"]:
        out += [f"note: {note}" for note in data["notes"]]
        return "\n".join(out)
    first = data["first"]
    if first is not None:
        pr = f"PR #{first['pr']}" if first.get("pr") else "no PR number in the subject"
        out += ["first commit with the new verdict:",
                f"  {first['sha']}", f"  {first['date']}  {first['subject']}  ({pr})",
                f"  {verdict(data['last_old'])}  →  {verdict(data['first_new'])}"]
        out += [f"  changed: {line}" for line in first.get("changed_files", [])[:12]]
    else:
        candidates = data["candidates"]
        out.append(f"the first commit with the new verdict is one of these {len(candidates)}, after "
                   f"{data['last_old']['short']} ({verdict(data['last_old'])}):")
        shown = candidates if len(candidates) <= 16 else [*candidates[:10], None, *candidates[-5:]]
        for entry in shown:
            if entry is None:
                out.append(f"  … {len(candidates) - 15} more")
                continue
            how = {"untested": "untested (between commits skipped for the same reason)", "new": verdict(data["first_new"]),
                   "skipped": f"skipped: {entry.get('reason')}"}[entry["tested"]]
            out.append(f"  {entry['short']}  {_cell(entry['subject'], 60)}  {_cell(how, 90)}")
    function = data.get("function")
    if data.get("diff"):
        lines = _failing_hunks_first(data["diff"], (data.get("first_new") or {}).get("line") if function else None)
        title = (f"{function['file']}::{function['function']}, {'parent' if first else 'last old'} → "
                 f"{'commit' if first else 'first new'}" if function else "python/sglang, last old → first new")
        out += ["", f"diff of {title}:", *lines[:diff_lines]]
        if len(lines) > diff_lines:
            out.append(f"… {len(lines) - diff_lines} more lines (--json has the whole diff)")
    out += ["", *[f"note: {note}" for note in data["notes"]]] if data["notes"] else []
    return "\n".join(out)


def _failing_hunks_first(diff: str, line: int | None) -> list[str]:
    """A unified diff's lines with the hunks around the failing ``line`` (of the new side) first."""
    lines = diff.splitlines()
    head = [x for x in lines[:2] if x.startswith(("---", "+++"))]
    hunks: list[list[str]] = []
    for text in lines[len(head):]:
        if text.startswith("@@") or not hunks:
            hunks.append([])
        hunks[-1].append(text)
    if line is None:
        return lines

    def covers(hunk: list[str]) -> bool:
        match = re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", hunk[0])
        return match is not None and int(match[1]) <= int(line) < int(match[1]) + int(match[2] or 1)

    return head + [x for hunk in sorted(hunks, key=lambda h: not covers(h)) for x in hunk]


def smoke_table(results: list[Any]) -> str:
    """The release smoke per release: verdict, cases run, and each failing case in SGLang's words."""
    rows = []
    for result in results:
        ran = ", ".join(c.name for c in result.cases)
        rows.append([result.release, "verified" if result.verified else "UNVERIFIED", len(result.cases),
                     f"{result.seconds:.1f}", (result.error or ran)[:90]])
    lines = [table(["release", "smoke", "cases", "seconds", "cases run (or why none)"], rows)]
    for result in results:
        for case in result.failures:
            lines.append(f"{result.release}: {case.name}: expected {case.expect}, got {case.headline[:200]} "
                         f"(stage {case.stage or '?'}; {case.why})")
    return "\n".join(lines)

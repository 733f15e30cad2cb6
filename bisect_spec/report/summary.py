"""Clustering: outcomes grouped by signature, findings grouped likewise, as plain data.

The summary is deterministic for a given set of outcomes (sorted, no timestamps), so
two runs of the same strategy and seed give byte-identical ``summary.json`` files.
Pure: no I/O, no processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bisect_spec.model.findings import findings_of
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.signature import Signature, variant_of
from bisect_spec.search.space import DRAFT_FLAG, FlagSpace, simplicity_key

#: How a configuration names the draft's path (``bisect_spec.report.bug_report.DRAFT_TOKEN``).
DRAFT_TOKEN = "@draft"
#: Variants (the values that triggered one signature) kept per signature, most frequent first.
MOST_VARIANTS = 12


#: The verdict levels a sweep counts apart, in the order people read them: ``will_start`` (every check a CPU can run,
#: ran), ``passed_up_to`` (a stage stopped at a step no CPU can take: not every check ran), ``will_not_start`` (the
#: box cannot start it: out of memory, too few GPUs), ``failed`` (SGLang refused or crashed).
VERDICT_LEVELS = ("will_start", "passed_up_to", "will_not_start", "failed")
#: :attr:`Outcome.verdict` -> its level (the other verdicts, CRASHED, TIMEOUT, USAGE, are none)
_LEVEL_OF = {"PASSED": "will_start", "PASSED UP TO": "passed_up_to", "WILL NOT START": "will_not_start",
             "FAILED": "failed"}
#: Each level in the words of the summary line.
VERDICT_WORDS = {"will_start": "will start", "passed_up_to": "passed up to a GPU step",
                 "will_not_start": "will not start (out of memory, too few GPUs)", "failed": "failed"}


def verdict_level(outcome: Outcome) -> str | None:
    """The outcome's :data:`VERDICT_LEVELS` entry; None for what is no verdict on the configuration (a fault of
    bisect-spec's, a crash of the worker, a timeout, a usage error)."""
    return None if outcome.tool_fault is not None else _LEVEL_OF.get(outcome.verdict)


def verdicts_line(verdicts: dict[str, int]) -> str:
    """``will start: 12 · passed up to a GPU step: 40 · will not start (...): 633 · failed: 9``."""
    return " · ".join(f"{VERDICT_WORDS[level]}: {verdicts.get(level, 0)}" for level in VERDICT_LEVELS)


def summarise(outcomes: Sequence[Outcome], space: FlagSpace | None, target: dict[str, Any], strategy: str,
              seed: int) -> dict[str, Any]:
    """Signature and finding tables of a sweep."""
    counts: dict[str, int] = {}
    groups: dict[Signature, list[Outcome]] = {}
    finding_groups: dict[Signature, list[tuple[Outcome, dict[str, Any]]]] = {}
    tool_faults: dict[str, dict[str, Any]] = {}
    #: passed ones by the last stage that ran; "stopped" those whose last stage stopped early at a step only a GPU
    #: runs (its checks before it passed: not a pass of that stage); failed ones by the stage that raised
    stages: dict[str, dict[str, int]] = {"passed": {}, "stopped": {}, "failed": {}}
    stages_run: set[str] = set()  # every stage some evaluation entered: what this release's launch path covers
    verdicts = dict.fromkeys(VERDICT_LEVELS, 0)
    for outcome in outcomes:
        counts[outcome.status.value] = counts.get(outcome.status.value, 0) + 1
        level = verdict_level(outcome)
        if level is not None:
            verdicts[level] += 1
        if outcome.record.get("stage"):
            stages_run.update([*outcome.record.get("stages_passed", []), outcome.record["stage"]])
        stage = outcome.record.get("stage")
        if outcome.status.value in stages and stage:
            stopped = outcome.passed and stage in (outcome.record.get("needs_gpu") or {})
            by_stage = stages["stopped" if stopped else outcome.status.value]
            by_stage[stage] = by_stage.get(stage, 0) + 1
        fault = outcome.tool_fault
        if fault is not None:  # bisect-spec's own fault: counted apart, never a signature of SGLang's
            entry = tool_faults.setdefault(fault, {"step": fault, "count": 0, "example": outcome.config.argv(),
                                                    "crash": outcome.record.get("crash", "")})
            entry["count"] += 1
            continue
        if outcome.signature is not None:
            groups.setdefault(outcome.signature, []).append(outcome)
        for finding in findings_of(outcome):
            finding_groups.setdefault(finding.signature, []).append((outcome, finding.to_dict()))

    def smallest(configs: list[Config]) -> Config:
        return min(configs, key=lambda c: simplicity_key(c, space))

    signatures = []
    for sig, members in groups.items():
        best = smallest([o.config for o in members])
        example = next(o for o in members if o.config == best)
        frame = example.frame
        variants: dict[str, int] = {}
        for member in members:
            variant = variant_of({"status": member.status.value, **member.record})
            if variant:
                variants[variant] = variants.get(variant, 0) + 1
        by_algorithm: dict[str, list[Config]] = {}
        for member in members:
            value = member.config.get("--speculative-algorithm")
            by_algorithm.setdefault(value[0].upper() if value else NO_ALGORITHM, []).append(member.config)
        signatures.append({
            **sig.to_dict(), "title": sig.title, "count": len(members), "smallest": best.argv(),
            "headline": example.headline, "stage": example.record.get("stage"),
            # what a person reads: SGLang's own words, as the smallest configuration raised them (a shrink
            # replaces them with the minimal reproducer's); ``message`` is the normal form that groups
            "sglang_message": str(example.exception.get("message") or ""), "sglang_message_from": best.argv(),
            "example_frame": {k: frame.get(k) for k in ("file", "line", "function", "statement", "guard")} if frame else None,
            "variants": [{"values": v, "count": n}
                         for v, n in sorted(variants.items(), key=lambda item: (-item[1], item[0]))[:MOST_VARIANTS]],
            "variant_count": len(variants),
            # each algorithm the failing configurations ran, with its smallest one: who can hit this failure
            "algorithms": {name: smallest(configs).argv() for name, configs in sorted(by_algorithm.items())},
        })
    signatures.sort(key=lambda s: (-s["count"], s["id"]))
    findings = []
    for sig, pairs in finding_groups.items():
        best = smallest([member.config for member, _ in pairs])
        detail = next(found for member, found in pairs if member.config == best)
        findings.append({"id": sig.id, "kind": sig.exc_type, "field": sig.location, "detail": detail["detail"],
                         "given": detail["given"], "resolved": detail["resolved"], "count": len(pairs),
                         "smallest": best.argv()})
    findings.sort(key=lambda f: (-f["count"], f["id"]))
    for entry in signatures:
        entry["speculative"] = speculative_reason(entry)
    return {"schema": "bisect-spec/summary/1", "target": target, "strategy": strategy, "seed": seed,
            "evaluated": len(outcomes), "counts": dict(sorted(counts.items())), "verdicts": verdicts,
            "stages": {kind: dict(sorted(by.items())) for kind, by in stages.items()},
            "stages_run": sorted(stages_run), "signatures": signatures,
            "findings": findings,
            "tool_faults": sorted(tool_faults.values(), key=lambda f: (-f["count"], f["step"]))}


#: Files whose failing statements are speculative decoding's own checks.
SPECULATIVE_FILES = ("srt/speculative/", "srt/arg_groups/speculative_hook.py")


def speculative_reason(entry: dict[str, Any]) -> str:
    """Why a signature counts as a speculative-decoding failure, or ``""`` when it does not.

    In order: the failing statement is in speculative code (:data:`SPECULATIVE_FILES`, or a
    ``server_args.py`` function about speculation); its shrunk, 1-minimal reproducer needs a
    ``--speculative-*`` flag; its message or statement names speculative decoding.
    """
    frame = entry.get("example_frame") or {}
    location = str(entry.get("location") or "")
    file = str(frame.get("file") or location.split("::", 1)[0])
    function = str(frame.get("function") or location.rsplit("::", 1)[-1])
    if any(file.startswith(prefix) or f"/{prefix}" in file for prefix in SPECULATIVE_FILES):
        return f"raised in {file}"
    if file.endswith("srt/server_args.py") and ("specul" in function.lower() or "eagle" in function.lower()):
        return f"raised in server_args.py::{function}"
    minimal = (entry.get("shrink") or {}).get("minimal_argv") or []
    needed = sorted({a for a in minimal if a.startswith("--speculative-")})
    if needed:
        return "its minimal reproducer needs " + " ".join(needed)
    text = f"{entry.get('sglang_message', '')} {entry.get('message', '')} {entry.get('statement', '')}".lower()
    if "speculative" in text:
        return "its message names speculative decoding"
    return ""


def shown_message(sig: dict[str, Any]) -> str:
    """The message a person reads for a signature: SGLang's own words (``sglang_message``); for a bare
    ``assert`` (no message), its statement, labelled as one. A summary stored before ``sglang_message``
    existed shows its normal form. One line."""
    if "sglang_message" not in sig:
        return " ".join(str(sig.get("message") or sig.get("statement") or "").split())
    said = " ".join(str(sig.get("sglang_message") or "").split())
    if said:
        return said
    statement = (sig.get("example_frame") or {}).get("statement") or ""
    statement = " ".join(str(statement).split())
    return f"(no message; the failing statement) {statement}" if statement else ""


#: algorithms SGLang runs through one path (it turns NEXTN into EAGLE): a user of one meets the others' checks
ALGORITHM_FAMILIES = (frozenset({"EAGLE", "NEXTN"}),)
#: what ``--algorithm none`` selects: failures whose reproducer names no speculative algorithm
NO_ALGORITHM = "none"


def reproducer_of(sig: dict[str, Any]) -> list[str]:
    """The signature's minimal reproducer (after a shrink), else the smallest configuration seen."""
    minimal = (sig.get("shrink") or {}).get("minimal_argv")
    return list(minimal if minimal is not None else sig.get("smallest") or [])


def algorithm_of(sig: dict[str, Any]) -> str:
    """The speculative algorithm the reproducer names (upper case), or :data:`NO_ALGORITHM`."""
    argv = reproducer_of(sig)
    for index, token in enumerate(argv):
        if token == "--speculative-algorithm" and index + 1 < len(argv):
            return argv[index + 1].upper()
        if token.startswith("--speculative-algorithm="):
            return token.split("=", 1)[1].upper()
    return NO_ALGORITHM


def algorithms_of(sig: dict[str, Any]) -> set[str]:
    """Every algorithm a failing configuration of the signature ran (its reproducer's, for an older summary)."""
    return set(sig.get("algorithms") or ()) or {algorithm_of(sig)}


def users_algorithms(target: dict[str, Any]) -> frozenset[str]:
    """The algorithms the user's draft runs under (its family), or none when no draft names one."""
    algorithm = str(target.get("draft_algorithm") or "").upper()
    if not algorithm:
        return frozenset()
    return next((family for family in ALGORITHM_FAMILIES if algorithm in family), frozenset({algorithm}))


def without_a_draft_path(sig: dict[str, Any]) -> bool:
    """Whether the signature's failure needs the draft path left out: its shrink gave the minimal reproducer the
    draft's path and it no longer failed so (``shrink.draft_path_avoids``; a summary without the check says
    nothing, and the signature stays where its algorithm puts it)."""
    return (sig.get("shrink") or {}).get("draft_path_avoids") is True


def users_failures(signatures: list[dict[str, Any]], target: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the failures a user of the target's draft can hit, fewest flags first; every other one, as given).

    A user of the draft can hit a failure when its reproducer needs a speculative algorithm and
    configurations with the draft's algorithm (or its family's) failed so: a failure whose reproducer needs
    no algorithm is not about the draft, whatever rows it was met in, and neither is one that the draft's
    path avoids (:func:`without_a_draft_path`: EAGLE3 with no draft builds the target's own class as the
    draft, sglang#36528), since a user of the draft passes its path. Without a draft algorithm, none.
    """
    users = users_algorithms(target)
    mine = [s for s in signatures if users and algorithm_of(s) != NO_ALGORITHM and algorithms_of(s) & users
            and not without_a_draft_path(s)]
    mine.sort(key=lambda s: (len(reproducer_of(s)), -int(s.get("count") or 0), s["id"]))
    ids = {s["id"] for s in mine}
    return mine, [s for s in signatures if s["id"] not in ids]


def matches(sig: dict[str, Any], *, algorithm: str | None = None, flag: str | None = None,
            grep: str | None = None) -> bool:
    """Whether a signature passes the filters of ``runs show`` and ``report``.

    ``algorithm``: comma-separated names (case-insensitive; ``none``: no algorithm); ``flag``: the reproducer
    sets it (``--page-size``); ``grep``: a regular expression (case-insensitive) found in SGLang's message,
    the statement, the location or the exception's name.
    """
    import re

    wanted = {a.strip().upper() for a in algorithm.split(",")} if algorithm is not None else set()
    if algorithm is not None and not {a.upper() for a in algorithms_of(sig)} & wanted:
        return False
    if flag is not None:
        name = flag if flag.startswith("--") else f"--{flag}"
        if not any(t == name or t.startswith(f"{name}=") for t in reproducer_of(sig)):
            return False
    if grep is not None:
        frame = sig.get("example_frame") or {}
        text = " ".join(str(x or "") for x in (shown_message(sig), frame.get("statement"), sig.get("statement"),
                                                 sig.get("location"), sig.get("exc_type")))
        if re.search(grep, text, re.IGNORECASE) is None:
            return False
    return True


def triage(summary: dict[str, Any]) -> None:
    """(Re)classify every signature of ``summary`` in place, after shrinking added reproducers."""
    for entry in summary["signatures"]:
        entry["speculative"] = speculative_reason(entry)


def will_not_start_line(figures: dict[str, Any]) -> str:
    """Needed against available, per GPU: ``out of memory: needs ≥ 95.64 GiB per GPU, has 95.59 GiB``."""
    gib = 1 << 30
    if figures.get("cause") == "gpus":
        return f"the layout needs {figures.get('needed')} GPUs per node, the box has {figures.get('available')}"
    at_least = "≥ " if figures.get("at_least") else ""
    what = "the weights"
    if figures.get("cause") == "draft":
        what = f"the target's and the draft's weights{' and pools' if 'draft_pool' in figures else ''}"
    return (f"out of memory: {what} need {at_least}{float(figures.get('needed', 0)) / gib:.2f} GiB per GPU, "
            f"{float(figures.get('available', 0)) / gib:.2f} GiB available")


#: The resolved values a launch command is read with (``Outcome.resolved``), in the order people read them.
STARTS_RESOLVED = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                   "speculative_num_draft_tokens", "attention_backend", "prefill_attention_backend",
                   "decode_attention_backend", "speculative_draft_attention_backend", "page_size")
#: The draft's knobs a map shows.
KNOBS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")


def _algorithm(outcome: Outcome) -> str | None:
    value = outcome.config.get("--speculative-algorithm")
    return value[0].upper() if value else None


def starts_on_the_box(outcomes: Sequence[Outcome], space: FlagSpace | None, users: frozenset[str]) -> dict[str, Any] | None:
    """What a user of the draft launches on the box: the configuration that got furthest with the draft's own
    algorithm (every check run first, then the stage reached), the simplest of those; with the draft's path where
    any row gave it. Its values as SGLang resolved them, the pool and graph sizes, and how many such rows passed.
    None where no row of the draft's algorithm passed (or no draft was named)."""
    from bisect_spec.model.outcome import stage_sort_key

    mine = [o for o in outcomes if o.passed and _algorithm(o) in users]
    with_draft = [o for o in mine if DRAFT_TOKEN in o.config.flag_argv()]
    mine = with_draft or mine
    if not users or not mine:
        return None

    def key(outcome: Outcome) -> tuple[Any, ...]:
        stage = str(outcome.record.get("stage") or "")
        return (bool(outcome.stopped_early), -stage_sort_key(stage)[0], simplicity_key(outcome.config, space))

    best = min(mine, key=key)
    full = sum(1 for o in mine if not o.stopped_early)
    return {"argv": best.config.argv(), "verdict": best.verdict, "reached": best.reached,
            "stopped": dict(best.stopped_early), "full_passes": full, "passes": len(mine),
            "resolved": {k: best.resolved[k] for k in STARTS_RESOLVED if best.resolved.get(k) is not None},
            **{part: best.record[part] for part in ("memory_pool", "cuda_graphs") if best.record.get(part)}}


def knob_map(outcomes: Sequence[Outcome], users: frozenset[str], base: Config) -> list[dict[str, Any]]:
    """The draft's knobs by verdict at the deployment shape: every row of the draft's algorithm that sets nothing
    but those knobs (steps, topk, draft tokens; the base's flags aside), with the draft's path where any row gave
    it, one cell per setting (its worst verdict)."""
    allowed = {"--speculative-algorithm", DRAFT_FLAG, *KNOBS, *base.flags()}
    cells: dict[tuple[str, ...], dict[str, Any]] = {}
    # with the draft's path where rows gave it: the user passes it (a row without it builds another draft)
    drafted = any(DRAFT_TOKEN in o.config.flag_argv() for o in outcomes if _algorithm(o) in users)
    for outcome in outcomes:
        if drafted and DRAFT_TOKEN not in outcome.config.flag_argv():
            continue
        level = verdict_level(outcome)
        if level is None or _algorithm(outcome) not in users or not set(outcome.config.flags()) <= allowed:
            continue
        if any(outcome.config.get(flag) != value for flag, value in base.items):
            continue
        setting = tuple(" ".join(outcome.config.get(knob) or ("",)) for knob in KNOBS)
        cell = cells.setdefault(setting, {"steps": setting[0], "topk": setting[1], "draft_tokens": setting[2],
                                          "levels": {}})
        cell["levels"][level] = cell["levels"].get(level, 0) + 1
    for cell in cells.values():  # the worst level a setting met (with or without the draft's path)
        cell["verdict"] = next(level for level in reversed(VERDICT_LEVELS) if level in cell["levels"])
    return sorted(cells.values(), key=lambda c: tuple(knob_order(v) for v in (c["steps"], c["topk"], c["draft_tokens"])))


#: How a knob map's cell reads each verdict level (the terminal's and report.html's map alike).
KNOB_MARKS = {"will_start": "ok", "passed_up_to": "ok*", "will_not_start": "OOM", "failed": "FAIL"}
KNOB_LEGEND = "ok: every check ran · ok*: passed up to a GPU step · OOM: will not start · FAIL: SGLang refused"


def knob_grid(cells: Sequence[dict[str, Any]]) -> tuple[list[str], dict[tuple[str, str], dict[str, str]]]:
    """A knob map laid out: the draft-token values in a reader's order, and (steps, topk) -> draft tokens -> level."""
    tokens = sorted({c["draft_tokens"] for c in cells}, key=knob_order)
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for cell in cells:
        rows.setdefault((cell["steps"], cell["topk"]), {})[cell["draft_tokens"]] = cell["verdict"]
    return tokens, rows


def knob_order(text: str) -> tuple[int, float]:
    """How a knob's values line up for a reader: not given (SGLang's choice), then the values people use, smallest
    first, then 0 and the negative ones (the nonsense the sweep also tries)."""
    try:
        number = float(text)
    except ValueError:
        return (0, 0.0) if text == "" else (3, 0.0)
    return (1, number) if number > 0 else (2, -number)

"""Reports of a sweep run or a nightly matrix: Markdown, JSON, JUnit XML and HTML strings.

Pure: data in, strings out. :func:`bisect_spec.api.report` reads the files (a run's
``run.json``/``summary.json``/``results.jsonl.gz``, or a ``nightly.json``); the CLI writes the output.

Both inputs become one model first (:func:`report_model`), so the four formats cannot
disagree: a sweep run is a nightly of one cell without a baseline. The model *is* the JSON
format, schema ``bisect-spec/report/1``::

    schema      "bisect-spec/report/1"
    kind        "sweep" | "nightly"
    id          run id or nightly id;  title: one line;  baseline: nightly id compared against, or null
    totals      cells, cells_done, cells_skipped, cells_error, evaluated, counts {status: n} (summed over
                cells), signatures (distinct per-release signature ids), failures (distinct cross-release keys),
                regressions, fixed, still_failing, known (``failures[]`` by verdict), changed (message-changed,
                location-moved)
    cells[]     id, release, model, draft, hardware, strategy, status (done|skipped|error), reason, run,
                evaluated, counts, stages (a sweep's per-stage counts, as its summary.json has them; optional),
                signatures[]:
                  id, cross_release_key, kind, exc_type, location, title, message, statement (in the source's
                  own words, see :func:`source_statement`), count,
                  smallest (argv), minimal (shrunk 1-minimal argv or null), change ("new" | "message-changed"
                  | "location-moved" | null), verdict (the night's, on its failure: see failures[]; null for a
                  sweep), known (true when a baseline exists and the verdict is not new)
    changes[]   the nightly's changes as given (cell, against, change, cross_release_key, signature, title, before, after)
    failures[]  the night's verdict per failure, one per (cell, cross-release key): new, still failing, fixed or
                known (:func:`bisect_spec.report.night.night_verdicts`, which every format, nightly.md, the
                terminal and the exit status read); [] for a sweep
    matrix[]    one per facet (model, draft, hardware): facet, releases (version order), rows[]:
                  cross_release_key, title, location, cells {release: {count, share, signatures, change,
                  verdict, location, moved_from} or null when absent}; a signature that vanished has count 0 and change
                  "vanished"; moved_from names the previous release's location where this release's differs
    findings[]  a sweep's findings in passing configurations (summary.json), [] for a nightly

Optional keys missing from the input read as empty: a report of a half-written nightly
is still a report.
"""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.model.outcome import AFTER_WEIGHTS, stage_sort_key
from bisect_spec.report.night import (
    FIXED,
    ID_LEGEND,
    KNOWN,
    KNOWN_WHY,
    NEW,
    STILL_FAILING,
    by_failure,
    cells_text,
    night_verdicts,
    verdict_counts,
)
from bisect_spec.report.summary import (
    algorithm_of,
    algorithms_of,
    shown_message,
    speculative_reason,
    users_failures,
    verdicts_line,
)
from bisect_spec.versions import version_key

SCHEMA = "bisect-spec/report/1"
FAILED_KINDS = ("failed", "will_not_start")  # other signature kinds (crashed, timeout, usage) are errors, not failures
CHANGED = ("message-changed", "location-moved")


@dataclass(frozen=True)
class SweepInput:
    """One stored sweep run: ``run.json``, ``summary.json`` and the records of ``results.jsonl.gz``."""

    run_id: str
    meta: dict[str, Any]
    summary: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class NightlyInput:
    """One nightly matrix (``nightly.json``, schema ``bisect-spec/nightly/1``)."""

    nightly: dict[str, Any]


ReportInput = SweepInput | NightlyInput


def argv_text(argv: Sequence[str] | None) -> str:
    """Flags as one shell-quoted line; ``(defaults)`` for none."""
    return " ".join(shlex.quote(a) for a in argv) if argv else "(defaults)"


# -- the model ------------------------------------------------------------------------------------------


def report_model(data: ReportInput) -> dict[str, Any]:
    """The report as plain data (the JSON format, schema ``bisect-spec/report/1``)."""
    if isinstance(data, SweepInput):
        return _sweep_model(data)
    return _nightly_model(data.nightly)


def _signature_entry(sig: dict[str, Any], change: str | None, verdict: str | None,
                     has_baseline: bool) -> dict[str, Any]:
    shrunk = sig.get("shrink") or {}
    location = sig.get("location") or ""
    return {"id": sig.get("id", "?"), "cross_release_key": sig.get("cross_release_key") or sig.get("id", "?"),
            "kind": sig.get("kind") or "failed", "exc_type": sig.get("exc_type"), "location": location,
            "title": sig.get("title") or _title_of(sig), "message": shown_message(sig),
            "normal_message": sig.get("message") or "",
            "statement": source_statement(sig), "count": int(sig.get("count") or 0),
            "smallest": list(sig.get("smallest") or []),
            "minimal": list(shrunk["minimal_argv"]) if shrunk.get("minimal_argv") is not None else None,
            "change": change, "verdict": verdict, "known": has_baseline and verdict != NEW,
            "speculative": bool(sig.get("speculative", speculative_reason(sig))),
            "algorithm": algorithm_of(sig), "algorithms": sorted(algorithms_of(sig)),
            "reproducers": (sig.get("shrink") or {}).get("reproducers")}


def answer_first(signatures: list[dict[str, Any]], target: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The failures a user of the target's draft can hit first (fewest flags first), then speculative-decoding
    failures, then the other constraints, each most frequent first (the terminal summary's order:
    :func:`bisect_spec.report.text.summary_text`)."""
    mine, rest = users_failures(signatures, target or {})
    return mine + sorted(rest, key=lambda s: (not s.get("speculative", speculative_reason(s)), -int(s.get("count") or 0)))


def source_statement(sig: dict[str, Any]) -> str:
    """The failing statement as SGLang's source writes it (``cfg.speculative_eagle_topk``).

    A signature's own ``statement`` is its normal form (receivers written ``_.``), made for
    grouping, not for reading; the example frame of a sweep's signature has the source's text.
    An input without one (a nightly from before frames were kept) shows the normal form.

    >>> source_statement({"statement": "assert _.speculative_eagle_topk is None",
    ...                   "example_frame": {"statement": "assert cfg.speculative_eagle_topk is None"}})
    'assert cfg.speculative_eagle_topk is None'
    """
    return str((sig.get("example_frame") or {}).get("statement") or sig.get("statement") or "")


def _title_of(sig: dict[str, Any]) -> str:
    what = sig.get("exc_type") or sig.get("kind") or "failure"
    function = str(sig.get("location") or "").rpartition("::")[2]
    return f"{what} in {function}" if function else str(what)


def _sweep_model(data: SweepInput) -> dict[str, Any]:
    summary = data.summary
    target = summary.get("target") or data.meta.get("target") or {}
    release, model = str(target.get("release", "?")), str(target.get("model", "?"))
    draft, hardware = target.get("draft"), str(target.get("hardware", "?"))
    yours = {s["id"] for s in users_failures(list(summary.get("signatures") or []), target)[0]}
    entries = [_signature_entry(s, None, None, False) for s in answer_first(list(summary.get("signatures") or []), target)]
    for entry in entries:
        entry["yours"] = entry["id"] in yours  # a user of the target's draft can hit it
    cell = {"id": f"{release}/{model}/{draft or 'none'}/{hardware}", "release": release, "model": model,
            "draft": draft, "hardware": hardware, "strategy": summary.get("strategy"), "status": "done", "reason": None,
            "run": data.run_id, "evaluated": int(summary.get("evaluated") or 0), "counts": dict(summary.get("counts") or {}),
            "signatures": entries}
    if summary.get("stages"):
        cell["stages"] = summary["stages"]
    if summary.get("verdicts"):
        cell["verdicts"] = dict(summary["verdicts"])
    title = (f"sweep {data.run_id}: SGLang {release} · {model}{' + ' + draft if draft else ''} · {hardware}"
             f" · strategy {summary.get('strategy')} (seed {summary.get('seed')})")
    return _assemble("sweep", data.run_id, title, None, [cell], [], [], list(summary.get("findings") or []))


def _nightly_model(nightly: dict[str, Any]) -> dict[str, Any]:
    baseline = nightly.get("baseline")
    changes = [c for c in nightly.get("changes") or [] if isinstance(c, dict)]
    change_of = {(c.get("cell"), c.get("signature")): c.get("change") for c in changes}
    change_of_key = {(c.get("cell"), c.get("cross_release_key")): c.get("change") for c in changes}
    failures = night_verdicts(nightly)  # the night's verdict per failure: every format reads it
    verdict_of = {(v["cell"], v["cross_release_key"]): v["verdict"] for v in failures}
    cells = []
    for raw in nightly.get("cells") or []:
        cell_id = str(raw.get("id") or "/".join(str(raw.get(k)) for k in ("release", "model", "draft", "hardware")))
        signatures = []
        for sig in raw.get("signatures") or []:
            change = change_of.get((cell_id, sig.get("id"))) or change_of_key.get((cell_id, sig.get("cross_release_key")))
            key = sig.get("cross_release_key") or sig.get("id", "?")
            signatures.append(_signature_entry(sig, change if change != "vanished" else None,
                                               verdict_of.get((cell_id, key)), baseline is not None))
        cells.append({"id": cell_id, "release": str(raw.get("release") or cell_id.split("/")[0]),
                      "model": raw.get("model"), "draft": raw.get("draft"), "hardware": raw.get("hardware"),
                      "strategy": raw.get("strategy"), "status": raw.get("status") or "done", "reason": raw.get("reason"),
                      "run": raw.get("run"), "evaluated": int(raw.get("evaluated") or 0),
                      "counts": dict(raw.get("counts") or {}), "signatures": signatures,
                      **({"verdicts": dict(raw["verdicts"])} if raw.get("verdicts") else {})})
    matrix = nightly.get("matrix") or {}
    strategy = str(matrix.get("strategy") or "").rpartition("/")[2].removesuffix(".toml")
    title = (f"nightly {nightly.get('id', '?')}" + (f" · matrix {matrix['name']}" if matrix.get("name") else "")
             + (f" · strategy {strategy}" if strategy else ""))
    return _assemble("nightly", str(nightly.get("id", "?")), title, baseline, cells, changes, failures, [])


def _assemble(kind: str, report_id: str, title: str, baseline: str | None, cells: list[dict[str, Any]],
              changes: list[dict[str, Any]], failures: list[dict[str, Any]],
              findings: list[dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for cell in cells:
        for status, number in cell["counts"].items():
            counts[status] = counts.get(status, 0) + int(number)
    verdicts: dict[str, int] = {}
    for cell in cells:
        for level, number in (cell.get("verdicts") or {}).items():
            verdicts[level] = verdicts.get(level, 0) + int(number)
    status_count = {s: sum(1 for c in cells if c["status"] == s) for s in ("done", "skipped", "error")}
    totals = {"cells": len(cells), "cells_done": status_count["done"], "cells_skipped": status_count["skipped"],
              "cells_error": status_count["error"], "evaluated": sum(c["evaluated"] for c in cells),
              "counts": dict(sorted(counts.items())), **({"verdicts": verdicts} if verdicts else {}),
              "signatures": len({s["id"] for c in cells for s in c["signatures"]}),
              "failures": len({s["cross_release_key"] for c in cells for s in c["signatures"]}),
              "regressions": verdict_counts(failures)[NEW], "fixed": verdict_counts(failures)[FIXED],
              "still_failing": verdict_counts(failures)[STILL_FAILING], "known": verdict_counts(failures)[KNOWN],
              "changed": sum(1 for c in changes if c.get("change") in CHANGED)}
    return {"schema": SCHEMA, "kind": kind, "id": report_id, "title": title, "baseline": baseline, "totals": totals,
            "cells": cells, "changes": changes, "failures": failures, "matrix": _matrix(cells, changes),
            "findings": findings}


def facet_of(cell: dict[str, Any]) -> str:
    """What a cell is besides its release: ``model + draft · hardware``."""
    draft = cell.get("draft")
    return f"{cell.get('model') or '?'}{' + ' + draft if draft else ''} · {cell.get('hardware') or '?'}"


def _matrix(cells: list[dict[str, Any]], changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Release × cross-release-key tables, one per facet, releases in version order."""
    by_id = {c["id"]: c for c in cells}
    facets: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        facets.setdefault(facet_of(cell), []).append(cell)
    tables = []
    for facet, members in facets.items():
        releases = sorted({c["release"] for c in members}, key=version_key)
        rows: dict[str, dict[str, Any]] = {}
        for cell in sorted(members, key=lambda c: version_key(c["release"])):  # the newest release names the row
            for sig in cell["signatures"]:
                row = rows.setdefault(sig["cross_release_key"], {"cross_release_key": sig["cross_release_key"], "cells": {}})
                row.update(title=sig["title"], location=sig["location"])
                slot = row["cells"].setdefault(cell["release"], {"count": 0, "share": 0.0, "signatures": [], "change": None,
                                                                 "verdict": sig["verdict"], "location": sig["location"],
                                                                 "moved_from": None})
                slot["count"] += sig["count"]
                slot["share"] = round(slot["count"] / cell["evaluated"], 4) if cell["evaluated"] else 0.0
                slot["signatures"].append(sig["id"])
                slot["change"] = slot["change"] or sig["change"]
        for change in changes:
            where = by_id.get(str(change.get("cell")))
            if change.get("change") != "vanished" or where is None or facet_of(where) != facet:
                continue
            before = change.get("before") or {}
            key = str(change.get("cross_release_key") or change.get("signature"))
            row = rows.setdefault(key, {"cross_release_key": key, "title": change.get("title") or key,
                                        "location": before.get("location") or "", "cells": {}})
            row["cells"].setdefault(where["release"], {"count": 0, "share": 0.0, "signatures": [change.get("signature")],
                                                      "change": "vanished", "verdict": FIXED})
        index = {release: number for number, release in enumerate(releases)}
        ordered = sorted(rows.values(), key=lambda r: (min(index[x] for x in r["cells"]),
                                                       -sum(s["count"] for s in r["cells"].values()), r["title"]))
        for row in ordered:
            row["cells"] = {release: row["cells"].get(release) for release in releases}
            previous = None
            for slot in row["cells"].values():  # one failure whose file or function moved between releases
                if slot is None or not slot.get("location"):
                    continue
                if previous is not None and slot["location"] != previous:
                    slot["moved_from"] = previous
                previous = slot["location"]
        tables.append({"facet": facet, "model": members[0].get("model"), "draft": members[0].get("draft"),
                       "hardware": members[0].get("hardware"), "releases": releases, "rows": ordered})
    return tables


def cell_of(model: dict[str, Any], facet: str, release: str) -> dict[str, Any] | None:
    """The cell of a facet and release (None when the matrix has no such cell)."""
    return next((c for c in model["cells"] if facet_of(c) == facet and c["release"] == release), None)


# -- JSON -----------------------------------------------------------------------------------------------


def to_json(data: ReportInput) -> str:
    """The model as indented JSON, keys sorted (byte-stable for the same input)."""
    return json.dumps(report_model(data), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# -- Markdown -------------------------------------------------------------------------------------------


def _md(text: Any, limit: int = 200) -> str:
    flat = " ".join(str(text if text is not None else "").split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _code(text: str) -> str:
    return f"`{text.replace('`', '')}`" if text else ""


def headline(model: dict[str, Any]) -> str:
    """One sentence of counts: cells, configurations by status, distinct failures, changes."""
    totals = model["totals"]
    counts = ", ".join(f"{n} {status}" for status, n in totals["counts"].items()) or "nothing evaluated"
    parts = []
    if model["kind"] == "nightly":
        states = [f"{totals['cells_' + s]} {s}" for s in ("done", "skipped", "error") if totals["cells_" + s]]
        parts.append(f"{totals['cells']} cells ({', '.join(states) or 'none'})")
    if totals.get("verdicts"):  # the verdict levels apart: a pass that stopped early is never a plain pass
        counts = verdicts_line(totals["verdicts"])
    parts.append(f"{totals['evaluated']} configurations: {counts}")
    parts.append(f"{totals['failures']} distinct failure{'s' if totals['failures'] != 1 else ''}"
                 + (f" ({totals['signatures']} per-release signatures)" if totals["signatures"] != totals["failures"] else ""))
    if model["baseline"]:
        plural = "s" if totals["regressions"] != 1 else ""
        parts.append(f"against {model['baseline']}: {totals['regressions']} regression{plural}, "
                     f"{totals['fixed']} fixed, {totals['changed']} changed")
    elif model["kind"] == "nightly":
        parts.append("no baseline")
    return " · ".join(parts)


def to_markdown(data: ReportInput) -> str:
    """Markdown for a PR or an issue: headline, then changes and matrix (nightly) or signatures (sweep)."""
    model = report_model(data)
    lines = [f"# bisect-spec {model['title']}", "", headline(model), ""]
    if model["kind"] == "nightly":
        lines += _md_changes(model) + _md_matrix(model) + _md_cells(model)
    else:
        lines += _md_stages(model["cells"][0]) + _md_signatures(model["cells"][0]) + _md_findings(model["findings"])
    return "\n".join(lines).rstrip("\n") + "\n"


def _md_changes(model: dict[str, Any]) -> list[str]:
    """The night's verdict per failure (:func:`bisect_spec.report.night.by_failure`), ids by cross-release key."""
    lines = []
    if not model["baseline"]:
        lines += ["No baseline: every failure below is reported as found (known), none as new.", ""]
    elif not model["changes"]:
        lines += [f"None changed since {model['baseline']}: the same failures as the baseline.", ""]
    rows = by_failure(model["failures"])
    if not rows:
        return lines
    since = f" against {model['baseline']}" if model["baseline"] else ""
    lines += [f"## The night's verdict per failure{since}", "",
              "| id | verdict | cells | failure | where | smallest reproducer |", "|---|---|---|---|---|---|"]
    for row in rows:
        word = "**new (regression)**" if row["verdict"] == NEW else row["word"]
        where = _md(row["detail"]) if row["detail"] else _code(str(row["location"] or ""))
        lines.append(f"| {_code(row['id'])} | {word} | {_md(cells_text(row), 300)} | {_md(row['title'])} | {where} | "
                     f"{_code(argv_text(row['smallest']))} |")
    return [*lines, "", f"{ID_LEGEND}.", ""]


def _md_matrix(model: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for table in model["matrix"]:
        releases = table["releases"]
        lines += [f"## Release × failure: {table['facet']}", "",
                  "| failure | " + " | ".join(releases) + " |", "|---|" + "---|" * len(releases)]
        status_row = []
        for release in releases:
            cell = cell_of(model, table["facet"], release)
            status_row.append(cell["status"] if cell and cell["status"] != "done" else
                              f"{cell['counts'].get('passed', 0)}/{cell['evaluated']} pass" if cell else "-")
        lines.append("| *cell* | " + " | ".join(status_row) + " |")
        for row in table["rows"]:
            shown = []
            for release in releases:
                slot = row["cells"][release]
                if slot is None:
                    shown.append("·")
                elif slot["change"] == "vanished":
                    shown.append("fixed")
                else:
                    mark = " **new**" if slot.get("verdict") == NEW else {
                        "message-changed": " (msg changed)", "location-moved": " (moved)"}.get(slot["change"] or "", "")
                    shown.append(f"{slot['count']}{mark}")
            lines.append(f"| {_md(row['title'], 80)} {_code(row['cross_release_key'])} | " + " | ".join(shown) + " |")
        if not table["rows"]:
            lines.append("| (no failures) | " + " | ".join("·" for _ in releases) + " |")
        lines.append("")
    return lines


def _md_cells(model: dict[str, Any]) -> list[str]:
    lines = ["## Cells", "", "| cell | status | evaluated | passed | failed | failures | note |", "|---|---|---|---|---|---|---|"]
    for cell in model["cells"]:
        failed = sum(n for status, n in cell["counts"].items() if status != "passed")
        lines.append(f"| {_code(cell['id'])} | {cell['status']} | {cell['evaluated']} | {cell['counts'].get('passed', 0)} | "
                     f"{failed} | {len({s['cross_release_key'] for s in cell['signatures']})} | {_md(cell['reason'] or '')} |")
    return [*lines, ""]


STAGE_HEADERS = ("stage", "after the weights load", "passed: the last stage run", "passed, then stopped early in it",
                 "failed in it")


def stage_rows(stages: dict[str, dict[str, int]] | None) -> list[tuple[str, bool, int, int, int]]:
    """A sweep's per-stage counts as rows in launch order: stage, whether a real launch runs it only after
    the weights load, configurations that passed with it the last stage run, that passed but stopped
    early in it (at a step only a GPU runs), that failed in it. Stages of another tool version sort last."""
    stages = stages or {}
    passed, stopped, failed = (stages.get(k) or {} for k in ("passed", "stopped", "failed"))
    names = sorted({*passed, *stopped, *failed}, key=stage_sort_key)
    return [(n, n in AFTER_WEIGHTS, passed.get(n, 0), stopped.get(n, 0), failed.get(n, 0)) for n in names]


def _md_stages(cell: dict[str, Any]) -> list[str]:
    rows = stage_rows(cell.get("stages"))
    if not rows:
        return []
    lines = ["## How far configurations got along launch_server's path", "", "| " + " | ".join(STAGE_HEADERS) + " |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {_code(name)} | {'yes' if after else ''} | {passed} | {stopped} | {failed} |"
              for name, after, passed, stopped, failed in rows]
    return [*lines, ""]


def _md_signatures(cell: dict[str, Any]) -> list[str]:
    if not cell["signatures"]:
        return ["No failure signatures: every configuration resolved.", ""]
    lines = ["## Failure signatures", "", "| id | type | location | count | smallest reproducer | minimal reproducer (shrunk) |",
             "|---|---|---|---|---|---|"]
    for sig in cell["signatures"]:
        minimal = _code(argv_text(sig["minimal"])) if sig["minimal"] is not None else "-"
        lines.append(f"| {_code(sig['id'])} | {_md(sig['exc_type'] or sig['kind'])} | {_code(sig['location'])} | "
                     f"{sig['count']} | {_code(argv_text(sig['smallest']))} | {minimal} |")
    return [*lines, ""]


def _md_findings(findings: list[dict[str, Any]]) -> list[str]:
    if not findings:
        return []
    lines = ["## Findings in passing configurations", "", "| id | finding | field | count | smallest | detail |",
             "|---|---|---|---|---|---|"]
    for finding in findings:
        lines.append(f"| {_code(str(finding.get('id')))} | {_md(finding.get('kind'))} | "
                     f"{_code(str(finding.get('field') or ''))} | {finding.get('count', 0)} | "
                     f"{_code(argv_text(finding.get('smallest')))} | {_md(finding.get('detail'))} |")
    return [*lines, ""]


# -- JUnit XML ------------------------------------------------------------------------------------------


def to_junit(data: ReportInput) -> str:
    """JUnit XML for CI dashboards (Jenkins, GitLab, GitHub test reporters).

    One ``<testsuite>`` per cell; ``classname`` is ``sglang-0_5_23.<model>/<draft>/<hardware>``
    (dots in the version would split Jenkins' package tree), so dashboards group by release,
    then by facet.

    * a sweep: each testcase is one signature, a ``<failure>`` (crashes and timeouts an ``<error>``):
      the failures exist, nothing says they are expected;
    * a nightly: each testcase is one failure of the cell, named ``title [cross-release key]`` (the id every
      nightly output gives it), by the night's verdict (:func:`bisect_spec.report.night.night_verdicts`, which
      the exit status, ``nightly.md`` and the other formats read too): ``new`` is a ``<failure>`` (``<error>``
      for a crash or timeout) whose message starts with ``regression since``; ``still failing`` is
      ``<skipped type="still-failing">``, as pytest reports an xfail: dashboards show it, greyed, and a
      build gate fails only on what got worse; ``known`` (the first night: found, the baseline of the next;
      or not judged) is ``<skipped type="known">``; ``fixed`` is a passing testcase named ``fixed: ...``.
      So failures + errors counted over the failures is the night's regressions, exit 3 when not 0;
    * a cell without failures is one passing testcase; a skipped cell one ``<skipped>``, a cell
      that errored one ``<error>`` (message = the cell's reason).

    Failure ``message`` = title and location; its body = the smallest reproducer seen, the
    shrunk one when present, and the failing statement.
    """
    model = report_model(data)
    root = ET.Element("testsuites", name=f"bisect-spec {model['kind']} {model['id']}")
    for cell in model["cells"]:
        suite = ET.SubElement(root, "testsuite", name=cell["id"])
        properties = ET.SubElement(suite, "properties")
        for key in ("release", "model", "draft", "hardware", "strategy", "status", "run"):
            if cell.get(key) is not None:
                ET.SubElement(properties, "property", name=key, value=str(cell[key]))
        for level, number in (cell.get("verdicts") or {}).items():  # the verdict levels, counted apart
            ET.SubElement(properties, "property", name=f"verdicts.{level}", value=str(number))
        facet = "/".join(str(cell.get(k)) for k in ("model", "draft", "hardware"))
        classname = f"sglang-{cell['release'].replace('.', '_')}.{facet}"
        if cell["status"] != "done":
            case = ET.SubElement(suite, "testcase", classname=classname, name=f"cell {cell['status']}")
            ET.SubElement(case, "skipped" if cell["status"] in ("skipped", "pending") else "error",
                          message=cell["reason"] or cell["status"], type=cell["status"])
        if model["kind"] == "nightly":
            mine = [f for f in model["failures"] if f["cell"] == cell["id"]]
            for failure in mine:
                sigs = [s for s in cell["signatures"] if s["cross_release_key"] == failure["cross_release_key"]]
                _junit_night_case(suite, classname, failure, sigs, cell, model["baseline"])
        else:
            mine = list(cell["signatures"])
            for sig in cell["signatures"]:
                _junit_case(suite, classname, sig, cell)
        if cell["status"] == "done" and not mine:
            ET.SubElement(suite, "testcase", classname=classname,
                          name=f"no failure signature ({cell['evaluated']} configurations)")
    for element in (*root.iter("testsuite"), root):
        cases = list(element.iter("testcase"))
        element.set("tests", str(len(cases)))
        for tag, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            element.set(attribute, str(sum(1 for case in cases if case.find(tag) is not None)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _junit_body(sig: dict[str, Any], cell: dict[str, Any]) -> str:
    body = [f"seen in {sig['count']} of {cell['evaluated']} configurations",
            f"smallest reproducer: {argv_text(sig['smallest'])}"]
    if sig["minimal"] is not None:
        body.append(f"minimal reproducer (shrunk): {argv_text(sig['minimal'])}")
    if sig["statement"]:
        body.append(f"statement: {sig['statement']}")
    if sig["message"]:
        body.append(f"message: {sig['message']}")
    return "\n".join(body)


def _junit_case(suite: ET.Element, classname: str, sig: dict[str, Any], cell: dict[str, Any]) -> None:
    """A sweep's signature: a failure (an error for crashes and timeouts)."""
    case = ET.SubElement(suite, "testcase", classname=classname, name=f"{sig['title']} [{sig['id']}]")
    where = f"{sig['title']} at {sig['location']}" if sig["location"] else sig["title"]
    tag = "failure" if sig["kind"] in FAILED_KINDS else "error"
    ET.SubElement(case, tag, type=str(sig["exc_type"] or sig["kind"]), message=where).text = _junit_body(sig, cell)


def _junit_night_case(suite: ET.Element, classname: str, failure: dict[str, Any], sigs: list[dict[str, Any]],
                      cell: dict[str, Any], baseline: str | None) -> None:
    """One failure of a nightly's cell, by its verdict; named by its cross-release key."""
    key, title = failure["cross_release_key"], failure["title"]
    where = f"{title} at {failure['location']}" if failure["location"] else title
    if failure["verdict"] == FIXED:
        ET.SubElement(suite, "testcase", classname=classname, name=f"fixed: {title} [{key}]")
        return
    case = ET.SubElement(suite, "testcase", classname=classname, name=f"{title} [{key}]")
    body = "\n".join(_junit_body(sig, cell) for sig in sigs) or f"smallest reproducer: {argv_text(failure['smallest'])}"
    if failure["verdict"] == NEW:
        tag = "failure" if failure["kind"] in FAILED_KINDS else "error"
        ET.SubElement(case, tag, type=str(failure["exc_type"] or failure["kind"]),
                      message=f"regression since {baseline}: {where}").text = body
    elif failure["verdict"] == STILL_FAILING:
        ET.SubElement(case, "skipped", type="still-failing", message=f"still failing, known since {baseline}: {where}"
                      ).text = body
    else:
        ET.SubElement(case, "skipped", type="known", message=f"known: {KNOWN_WHY[failure['why']]}: {where}").text = body

"""The night's verdict per failure: the one decision every output of a nightly reads.

A nightly's exit status, ``nightly.md``, its terminal summary and ``bisect-spec report`` in every format
(Markdown, JSON, JUnit, HTML) say what failed and what is new by :func:`night_verdicts`, never each by its
own reading of the changes. One failure is one (cell, cross-release key): the key is the failure's id in
every nightly output (a cell's run names the same failure by a per-release signature id of its own; the
``signatures`` of ``nightly.json`` pair the two). Verdicts:

``new``            in tonight's cell, not in the cell it is compared with: a regression (exit 3, a JUnit
                   ``<failure>``, or ``<error>`` for a crash or timeout)
``still failing``  in tonight's cell and in the one compared with (also when its location moved or its
                   message changed: ``change`` says so); JUnit ``<skipped type="still-failing">``
``fixed``          in the cell compared with, gone tonight; a passing JUnit testcase
``known``          seen, and not judged either way: the first night (no baseline: the baseline of the next),
                   a cell with nothing to compare it with, a failure new behind a stage the older release does
                   not run (``masked``), a failure of the baseline in a stage tonight's release does not run
                   (``not-checked``); JUnit ``<skipped type="known">``

Pure: a ``nightly.json``'s data in, plain data out.
"""

from __future__ import annotations

from typing import Any

NEW, STILL_FAILING, FIXED, KNOWN = "new", "still failing", "fixed", "known"
VERDICTS = (NEW, FIXED, STILL_FAILING, KNOWN)  # the order every output lists them in

#: The one line every nightly output carries about its ids.
ID_LEGEND = ("id: the failure across releases (its cross-release key); per release: each cell's run "
             "(`bisect-spec runs show`) names it by a signature id of its own, and nightly.json's "
             "cells[].signatures[] pair each id with its key")

#: Why a failure is ``known``, by the change that made it so (None: nothing was compared).
KNOWN_WHY = {None: "not compared", "first-night": "found on the first night: the baseline of the next",
             "masked": "new behind a stage the older release does not run", "not-checked": "not checked: its stage "
             "does not run on this release"}

#: The same in a table's few words.
KNOWN_SHORT = {None: "not compared", "first-night": "first night", "masked": "behind a stage not run there",
               "not-checked": "its stage not run here"}


def key_of(record: dict[str, Any]) -> str:
    """A signature's or change's cross-release key (its id where an old record has none)."""
    return str(record.get("cross_release_key") or record.get("signature") or record.get("id") or "?")


def cell_id_of(cell: dict[str, Any]) -> str:
    return str(cell.get("id") or "/".join(str(cell.get(k)) for k in ("release", "model", "draft", "hardware")))


def night_verdicts(nightly: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per (cell, cross-release key) the night saw or the cell compared with had, in cell order:

    ``cell``, ``cross_release_key``, ``verdict`` (:data:`VERDICTS`), ``change`` (the comparison's word:
    ``new``, ``vanished``, ``location-moved``, ``message-changed``, ``masked``, ``not-checked``, or null),
    ``why`` (for ``known``: :data:`KNOWN_WHY`'s key), ``against`` (the cell compared with, or null), ``kind``
    and ``exc_type`` (of the signature), ``title``, ``location``, ``count``, ``smallest``, ``before`` and
    ``after`` (the change's sides, for moved or reworded failures).
    """
    baseline = nightly.get("baseline")
    changes: dict[tuple[str, str], dict[str, Any]] = {}
    for change in nightly.get("changes") or []:
        if isinstance(change, dict):
            changes.setdefault((str(change.get("cell")), key_of(change)), change)
    out: list[dict[str, Any]] = []
    for cell in nightly.get("cells") or []:
        cell_id = cell_id_of(cell)
        # a cell the comparison had nothing for (recorded since 2026-12-06; before, every cell was compared)
        compared = bool(baseline) and ("against" not in cell or cell.get("against") is not None)
        grouped: dict[str, list[dict[str, Any]]] = {}
        for sig in cell.get("signatures") or []:
            grouped.setdefault(key_of(sig), []).append(sig)
        for key, sigs in grouped.items():
            change = changes.get((cell_id, key))
            word = change.get("change") if change else None
            if word == "new":
                verdict, why = NEW, None
            elif not baseline:
                verdict, why = KNOWN, "first-night"
            elif word == "masked":
                verdict, why = KNOWN, "masked"
            elif compared or change:
                verdict, why = STILL_FAILING, None
            else:
                verdict, why = KNOWN, None
            first = sigs[0]
            out.append(_entry(cell_id, key, verdict, word, why, change, cell.get("against"),
                              {"kind": first.get("kind") or "failed", "exc_type": first.get("exc_type"),
                               "title": first.get("title"), "location": first.get("location"),
                               "count": sum(int(s.get("count") or 0) for s in sigs),
                               "smallest": list(first.get("smallest") or [])}))
        for (where, key), change in changes.items():
            if where != cell_id or change.get("change") not in ("vanished", "not-checked") or key in grouped:
                continue
            before = change.get("before") or {}
            verdict, why = (FIXED, None) if change["change"] == "vanished" else (KNOWN, "not-checked")
            out.append(_entry(cell_id, key, verdict, change["change"], why, change, change.get("against"),
                              {"kind": "failed", "exc_type": None, "title": change.get("title"),
                               "location": before.get("location"), "count": 0,
                               "smallest": list(before.get("smallest") or [])}))
    return out


def _entry(cell: str, key: str, verdict: str, change: str | None, why: str | None, record: dict[str, Any] | None,
           against: Any, facts: dict[str, Any]) -> dict[str, Any]:
    record = record or {}
    title = facts.pop("title") or record.get("title") or key
    return {"cell": cell, "cross_release_key": key, "verdict": verdict, "change": change, "why": why,
            "against": record.get("against") or against, "title": str(title), **facts,
            "before": record.get("before"), "after": record.get("after")}


def verdict_counts(verdicts: list[dict[str, Any]]) -> dict[str, int]:
    """How many (cell, failure) pairs got each verdict, every verdict named."""
    return {v: sum(1 for entry in verdicts if entry["verdict"] == v) for v in VERDICTS}


def verdict_word(entry: dict[str, Any]) -> str:
    """The verdict as people read it, with what the comparison adds (moved, reworded, why known)."""
    verdict = entry["verdict"]
    if verdict == NEW:
        return "new (regression)"
    if verdict == STILL_FAILING and entry["change"] in ("location-moved", "message-changed"):
        return f"still failing, {'moved' if entry['change'] == 'location-moved' else 'message changed'}"
    if verdict == KNOWN:
        return f"known: {KNOWN_SHORT[entry['why']]}"
    return str(verdict)


def night_line(verdicts: list[dict[str, Any]]) -> str:
    """``2 new (regressions) · 10 still failing · 1 fixed · 0 known``: the night in one line."""
    counts = verdict_counts(verdicts)
    return (f"{counts[NEW]} new (regression{'s' if counts[NEW] != 1 else ''}) · {counts[STILL_FAILING]} still failing · "
            f"{counts[FIXED]} fixed · {counts[KNOWN]} known")


def failed_the_night(verdicts: list[dict[str, Any]]) -> bool:
    """Whether the night fails (exit 3): a failure is new."""
    return any(entry["verdict"] == NEW for entry in verdicts)


def change_detail(entry: dict[str, Any]) -> str:
    """What moved or was reworded (``a → b``), else ''."""
    before, after = entry.get("before") or {}, entry.get("after") or {}
    if entry.get("change") == "location-moved":
        return f"{before.get('location')} → {after.get('location')}"
    if entry.get("change") == "message-changed":
        return f"{before.get('message')!r} → {after.get('message')!r}"
    return ""


def by_failure(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdicts one row per failure: (id, verdict word, detail) with the cells it holds for, new first,
    then fixed, still failing, known (the terminal's and nightly.md's table)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in verdicts:
        detail = change_detail(entry)
        row = rows.setdefault((entry["cross_release_key"], verdict_word(entry), detail),
                              {"id": entry["cross_release_key"], "verdict": entry["verdict"], "word": verdict_word(entry),
                               "title": entry["title"], "detail": detail, "location": entry["location"],
                               "cells": [], "against": [],
                               "smallest": entry["smallest"]})
        row["cells"].append(entry["cell"])
        row["against"].append(entry["against"])
    return sorted(rows.values(), key=lambda r: (VERDICTS.index(r["verdict"]), r["title"], r["id"], r["word"]))


def cells_text(row: dict[str, Any], *, brief: bool = False) -> str:
    """A row's cells in a few words: the cell (and what it was compared with, where another), or how many and
    which (``brief``: how many, on which releases)."""
    if len(row["cells"]) == 1:
        against = row["against"][0]
        return str(row["cells"][0]) + (f" vs {against}" if against and against != row["cells"][0] else "")
    if brief:
        releases = list(dict.fromkeys(str(cell).split("/")[0] for cell in row["cells"]))
        return f"{len(row['cells'])} cells on {', '.join(releases)}"
    return f"{len(row['cells'])} cells: " + ", ".join(row["cells"])

#!/usr/bin/env python
"""Recall per algorithm: does the plan focused on the user's draft find every failing statement that the full plan
finds for the algorithms it sweeps?

Two stored runs of the same target: the focused one (the default, ``--algorithms draft``) and the full one
(``--algorithms all``), both cold (``--no-cache``). A *failing statement* is where SGLang raised, the signature's
``location`` (file, function, line of the raising statement), whatever the message. Each row's algorithm is its
``--speculative-algorithm`` as given (``none`` without one). For every algorithm the focused run swept, the table
counts the full run's statements for that algorithm and how many of them the focused run found (for the same
algorithm), and lists the ones it missed.

Usage: python scripts/recall_by_algorithm.py FOCUSED_RUN_DIR FULL_RUN_DIR [--json]
       (a run directory: ``runs/<id>``, as ``bisect-spec ... --runs-dir runs`` leaves it)
"""

from __future__ import annotations

import argparse
import collections
import gzip
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def rows(run: Path) -> list[dict[str, Any]]:
    """The run's results (``results.jsonl.gz``, or a plain ``results.jsonl`` of an older run)."""
    gz, plain = run / "results.jsonl.gz", run / "results.jsonl"
    if gz.is_file():
        text = gzip.decompress(gz.read_bytes()).decode()
    elif plain.is_file():
        text = plain.read_text()
    else:
        raise SystemExit(f"error: {run} holds no results.jsonl.gz: pass a run directory (runs/<id>)")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def algorithm(config: list[str]) -> str:
    for flag, value in itertools.pairwise(config):
        if flag == "--speculative-algorithm":
            return value.upper()
    return "none"


def statements(run: Path) -> dict[str, set[str]]:
    """Each algorithm's failing statements in the run (signature locations of its FAILED rows)."""
    found: dict[str, set[str]] = collections.defaultdict(set)
    for row in rows(run):
        signature = row.get("signature") or {}
        if row.get("status") == "failed" and signature.get("kind") == "failed" and signature.get("location"):
            found[algorithm(row.get("config") or [])].add(str(signature["location"]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("focused", type=Path)
    parser.add_argument("full", type=Path)
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args(argv)
    focused, full = statements(args.focused), statements(args.full)
    swept = sorted({algorithm(row.get("config") or []) for row in rows(args.focused)})
    table = []
    for name in swept:
        wanted = full.get(name, set())
        missed = sorted(wanted - focused.get(name, set()))
        table.append({"algorithm": name, "full": len(wanted), "found": len(wanted) - len(missed), "missed": missed,
                      "focused_only": len(focused.get(name, set()) - wanted)})
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        out = Table(title=f"failing statements per algorithm: {args.focused.name} (focused) vs {args.full.name} (full)")
        for column in ("algorithm", "full plan", "focused plan found", "recall", "only the focused plan"):
            out.add_column(column, justify="left" if column == "algorithm" else "right")
        for entry in table:
            recall = f"{100 * entry['found'] / entry['full']:.0f} %" if entry["full"] else "-"
            out.add_row(entry["algorithm"], str(entry["full"]), str(entry["found"]), recall, str(entry["focused_only"]))
        console = Console()
        console.print(out)
        for entry in table:
            for location in entry["missed"]:
                console.print(f"missed ({entry['algorithm']}): {location}", highlight=False)
    return 1 if any(entry["missed"] for entry in table) else 0


if __name__ == "__main__":
    sys.exit(main())

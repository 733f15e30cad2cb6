#!/usr/bin/env python
"""Compare two stored sweep runs byte for byte, apart from times, run ids and local paths.

For refactors that must not change behaviour: run the same command on a cold cache before and
after (``--no-cache``, two ``--runs-dir``), then compare. Exit status 0 when every file agrees.

Usage: python scripts/compare_runs.py RUN_DIR_BEFORE RUN_DIR_AFTER
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

FILES = ("run.json", "summary.json", "summary.md", "results.jsonl.gz", "report.html")


def text_of(path: Path) -> str:
    """A stored file's text (a ``.gz`` one gunzipped: two gzips of one text may differ by compressor version)."""
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def normalised(text: str, run: Path) -> str:
    """``text`` without what differs between two identical runs: the run id, its directory, times; and what a
    reproducer keeps of the worker that evaluated it (what SGLang printed, which logs a few lines once per process,
    and the order the worker met its CPU-only imports in), never part of a verdict."""
    text = text.replace(run.name, "RUN").replace(str(run.parent), "RUNS")
    text = re.sub(r"\d{8}-\d{6}", "TIME", text)
    text = re.sub(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]", "[TIME]", text)
    text = re.sub(r'"stderr_tail": *"(?:[^"\\]|\\.)*"', '"stderr_tail": ""', text)
    text = re.sub(r"^CPU_IMPORTS = (\[.*\])$", lambda m: f"CPU_IMPORTS = {sorted(json.loads(m[1]))}", text,
                  flags=re.MULTILINE)
    return re.sub(r"\"seconds\": *[0-9.e-]+", "\"seconds\": 0", text)


def compare(before: Path, after: Path) -> list[str]:
    differences = []
    files = [Path(name) for name in FILES]
    for side in (before, after):
        files += [p.relative_to(side) for p in (side / "reproducers").rglob("*") if p.is_file()]
    for name in sorted(set(files)):
        old, new = before / name, after / name
        if not old.is_file() and not new.is_file():  # a file neither run wrote (a run with no report)
            continue
        if not (old.is_file() and new.is_file()):
            differences.append(f"{name}: only in {'the first' if old.is_file() else 'the second'} run")
        elif normalised(text_of(old), before) != normalised(text_of(new), after):
            differences.append(f"{name}: differs")
    return differences


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    before, after = Path(sys.argv[1]), Path(sys.argv[2])
    differences = compare(before, after)
    for line in differences:
        print(line)
    print(f"{'identical' if not differences else f'{len(differences)} file(s) differ'} "
          f"(apart from times and ids): {before} vs {after}")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())

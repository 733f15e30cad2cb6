#!/usr/bin/env python
"""Benchmark: the main job (``bisect-spec --model kimi-k2.6 --draft eagle3``), cold, on two checkouts side by side.

Each checkout runs the same command in one run of this script, one after the other, with ``--no-cache`` (no
outcome of an earlier run is reused) and a fresh runs folder; the installed releases are shared (installs are not
timed). Printed: wall-clock seconds per phase (``timing.json``'s ``phases``; a checkout that predates them shows its
total only), the configurations evaluated, the evaluations' own seconds summed (what the workers spent), and the
ratio after/before. Run it on a quiet machine: the phases are wall-clock.

Usage: python scripts/bench_main_job.py --before /path/to/old/checkout [--after .] [-- extra sweep options]
       (``git worktree add /tmp/before <commit>`` makes a checkout of an older commit)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bisect_spec.runtime import store

COMMAND = ["--model", "kimi-k2.6", "--draft", "eagle3", "--no-cache"]


def run_once(checkout: Path, extra: list[str]) -> dict[str, Any]:
    """The main job on ``checkout``'s code: its timing.json, configurations, and evaluation seconds."""
    runs = Path(tempfile.mkdtemp(prefix="bench-main-job-"))
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bisect_spec", *COMMAND, "--runs-dir", str(runs), *extra], env=env,
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    [run] = [p for p in runs.iterdir() if p.is_dir()]
    timing = json.loads((run / "timing.json").read_text())
    configs = len(store.read_results(run, "rerun the benchmark") or [])  # results.jsonl.gz, or an older plain file
    # the journal keeps each evaluation's own seconds (the results leave durations out)
    seconds = sum(float((entry.get("outcome") or {}).get("seconds") or 0) for entry in store.read_journal(run))
    return {"wall": wall, "phases": timing.get("phases") or {}, "seconds": timing.get("seconds"), "configs": configs,
            "evaluation_seconds": seconds, "workers": timing.get("jobs")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("extra", nargs="*")
    options = parser.parse_args()
    for path in (options.before, options.after):
        if not (path / "bisect_spec" / "__init__.py").is_file():  # else the installed code would run unnoticed
            parser.error(f"{path} is not a bisect-spec checkout (no bisect_spec/ package): give one, e.g. a git worktree")
    results = {name: run_once(path, options.extra) for name, path in (("before", options.before),
                                                                      ("after", options.after))}
    table = Table(title="the main job, cold (" + " ".join(["bisect-spec", *COMMAND]) + ")")
    for column in ("", "before (s)", "after (s)", "after/before"):
        table.add_column(column, justify="right" if column else "left")
    phases = list(dict.fromkeys([*results["before"]["phases"], *results["after"]["phases"]]))
    rows = [(phase, results["before"]["phases"].get(phase), results["after"]["phases"].get(phase)) for phase in phases]
    rows += [("whole run (timing.json)", results["before"]["seconds"], results["after"]["seconds"]),
             ("evaluations' own seconds, summed", results["before"]["evaluation_seconds"],
              results["after"]["evaluation_seconds"]),
             ("configurations", results["before"]["configs"], results["after"]["configs"])]
    for name, before, after in rows:
        ratio = f"{after / before:.2f}" if isinstance(before, (int, float)) and before and isinstance(after, (int, float)) else ""
        table.add_row(name, _cell(before), _cell(after), ratio)
    Console().print(table)
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"


if __name__ == "__main__":
    sys.exit(main())

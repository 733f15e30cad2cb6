#!/usr/bin/env python
"""Commit bisection on synthetic histories between two real releases: commits, evaluations, seconds per pair.

Each pair's history is built from the two release wheels (``tests/synthetic_history.py``: one
commit per added, changed and deleted file, changed files in dependency order) under
``$BISECT_SPEC_HOME/test-histories`` and reused; every commit runs over the older release's
environment, which must be installed. The goal per pair is ``ceil(log2 N) + 2`` evaluations
(both ends included) naming the commit that changed the file holding the check, or a skip
range containing it.

Pairs (``--pairs`` picks some):

* ``type-error``: 0.5.1.post3 → 0.5.2, deepseek-v3 + eagle3, ``--speculative-num-steps 1
  --speculative-num-draft-tokens 3`` (passes, then the TypeError in ``srt/server_args.py``);
  ``--without-box-packages`` runs it once more without the simulated box's GPU packages;
* ``cutlass-mla``: 0.4.6 → 0.4.6.post1, ``--attention-backend cutlass_mla`` (rejected, then accepted).

Usage: python scripts/bench_commit_bisect.py [--pairs type-error,cutlass-mla] [--without-box-packages] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.synthetic_history

from bisect_spec import api
from bisect_spec.runtime import environments, profiles
from tests.synthetic_history import build


@dataclass(frozen=True)
class Pair:
    old: str
    new: str
    flags: tuple[str, ...]
    culprit_file: str
    box_packages: bool = True


PAIRS = {
    "type-error": Pair("0.5.1.post3", "0.5.2", ("--speculative-num-steps", "1", "--speculative-num-draft-tokens", "3"),
                       "srt/server_args.py"),
    "cutlass-mla": Pair("0.4.6", "0.4.6.post1", ("--attention-backend", "cutlass_mla"), "srt/server_args.py"),
}


def without_box_packages() -> None:
    real = profiles.load_hardware

    def load(name: str = "auto", gpus: int = profiles.DEFAULT_GPUS) -> profiles.HardwareProfile:
        found = real(name, gpus)
        return profiles.HardwareProfile(found.name, {**found.record, "simulate_packages": False} if found.record
                                        else found.record, found.gpus)

    profiles.load_hardware = load  # type: ignore[assignment]


def run(name: str, pair: Pair) -> dict[str, Any]:
    started = time.perf_counter()
    history = build(pair.old, pair.new, environments.home() / "test-histories")
    built = time.perf_counter() - started
    spec = api.TargetSpec(model="deepseek-v3", draft="eagle3", hardware="rtx-pro-6000")
    clock = time.perf_counter()
    report = api.bisect_commits(list(pair.flags), spec, repo=history.repo, old=history.old_tag, new=history.new_tag,
                                progress=lambda m: print(f"  [{time.perf_counter() - clock:6.1f}s] {m}", file=sys.stderr))
    seconds = time.perf_counter() - clock
    data = report.to_dict()
    culprit = history.commit_touching(pair.culprit_file)
    found = [c["sha"] for c in data["candidates"]]
    return {"pair": name, "old": pair.old, "new": pair.new, "box_packages": pair.box_packages,
            "commits": data["commits"], "evaluations": data["evaluations"],
            "goal": math.ceil(math.log2(data["commits"])) + 2 if data["commits"] > 1 else 2,
            "seconds": round(seconds, 1), "history_seconds": round(built, 1),
            "seconds_per_evaluation": round(seconds / max(1, data["evaluations"]), 1),
            "exact": data["exact"], "candidates": len(found), "culprit_found": culprit in found,
            "first": data["first"]["subject"] if data["first"] else None,
            "old_verdict": data["old"].get("headline") or data["old"].get("verdict"),
            "new_verdict": data["new"].get("headline") or data["new"].get("verdict"),
            "skipped": sum(1 for e in data["evaluated"] if e.get("key") is None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(PAIRS), help=f"comma-separated: {', '.join(PAIRS)}")
    parser.add_argument("--without-box-packages", action="store_true",
                        help="also run type-error without the simulated box's GPU packages (the simulation before them)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    chosen = [(name, PAIRS[name]) for name in args.pairs.split(",") if name]
    rows = []
    for name, pair in chosen:
        print(f"{name}: {pair.old} → {pair.new}", file=sys.stderr)
        rows.append(run(name, pair))
        if name == "type-error" and args.without_box_packages:
            original = profiles.load_hardware
            without_box_packages()
            try:
                rows.append(run(f"{name}-no-box-packages", Pair(pair.old, pair.new, pair.flags, pair.culprit_file, False)))
            finally:
                profiles.load_hardware = original  # type: ignore[assignment]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'pair':<26}{'commits':>8}{'evals':>7}{'goal':>6}{'seconds':>9}{'s/eval':>8}  {'answer':<8} culprit  first")
    for row in rows:
        answer = "exact" if row["exact"] else f"{row['candidates']} cands"
        print(f"{row['pair']:<26}{row['commits']:>8}{row['evaluations']:>7}{row['goal']:>6}{row['seconds']:>9}"
              f"{row['seconds_per_evaluation']:>8}  {answer:<8} {'yes' if row['culprit_found'] else 'NO':<8} "
              f"{row['first'] or ''}")
        print(f"{'':<26}{row['old_verdict']} → {row['new_verdict']}; skipped {row['skipped']}")
    return 0 if all(r["culprit_found"] and r["evaluations"] <= r["goal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

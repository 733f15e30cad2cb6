#!/usr/bin/env python
"""How many environments a bisection builds, in a fresh home, against the ceil(log2 N) + 1 goal.

A fresh ``BISECT_SPEC_HOME`` shares only the heavy base venv with your usual home (a
symlink: the base is the same for every release), so every release overlay the bisection
needs is really built. ``--prebuilt`` releases are installed before the clock starts
(the usual case: the newest release is already there).

Usage: python scripts/bench_bisect_builds.py [--good 0.4.6] [--prebuilt 0.5.23] [--moves]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_FLAGS = ["--speculative-num-steps", "1", "--speculative-num-draft-tokens", "3"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--good", default="0.4.6")
    parser.add_argument("--bad", default=None)
    parser.add_argument("--prebuilt", default="0.5.23", help="comma-separated releases built before timing")
    parser.add_argument("--moves", action="store_true", help="also locate the moves (more evaluations)")
    parser.add_argument("flags", nargs="*", default=DEFAULT_FLAGS)
    args = parser.parse_args()

    usual = Path(os.environ.get("BISECT_SPEC_HOME") or Path.home() / ".cache" / "bisect-spec")
    fresh = Path(tempfile.mkdtemp(prefix="bisect-builds-")) / "home"
    (fresh / "envs").mkdir(parents=True)
    for base in (usual / "envs").glob("base-py*"):
        (fresh / "envs" / base.name).symlink_to(base)
    os.environ["BISECT_SPEC_HOME"] = str(fresh)

    from bisect_spec import api
    from bisect_spec.runtime import environments

    for release in filter(None, args.prebuilt.split(",")):
        environments.ensure(release)
    releases = [r for r in environments.available_releases()
                if environments.version_key(args.good) <= environments.version_key(r)
                and (args.bad is None or environments.version_key(r) <= environments.version_key(args.bad))]
    started = time.perf_counter()
    report = api.bisect(args.flags, api.TargetSpec(model="deepseek-v3", draft="eagle3", hardware="rtx-pro-6000"),
                        old=args.good, new=args.bad, moves=args.moves,
                        progress=lambda m: print(f"[{time.perf_counter() - started:6.1f}s] {m}", file=sys.stderr))
    seconds = time.perf_counter() - started
    data = report.to_dict()
    goal = math.ceil(math.log2(len(releases))) + 1
    print(f"releases {len(releases)} ({releases[0]} … {releases[-1]}), prebuilt: {args.prebuilt or 'none'}")
    print(f"last good {data['last_good']}, first bad {data['first_bad']}")
    print(f"evaluated {len(data['evaluated'])} releases: {', '.join(e['release'] for e in data['evaluated'])}")
    print(f"environments built {len(data['environments_built'])} (goal ≤ ceil(log2 {len(releases)}) + 1 = {goal}): "
          f"{', '.join(data['environments_built'])}")
    for note in data["notes"]:
        print(f"note: {note}")
    print(f"wall time {seconds:.0f} s (fresh home {fresh})")
    return 0 if len(data["environments_built"]) <= goal else 1


if __name__ == "__main__":
    sys.exit(main())

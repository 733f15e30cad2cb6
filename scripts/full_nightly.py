#!/usr/bin/env python
"""The full nightly: ≥ 20 SGLang releases × two hardware profiles, with timing and environment builds.

Writes a matrix over the newest ``--releases`` releases with recorded pins, runs
``bisect-spec nightly`` on it (building missing environments), then reports: wall time,
environments built during the run (and how long they took), cells done/skipped, and the
release × signature picture as a table (cross-release key per row, one column per release).

Usage: python scripts/full_nightly.py [--releases 24] [--strategy quick] [--out /tmp/full-nightly]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bisect_spec import api
from bisect_spec.runtime import environments


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=24, help="the newest N releases with recorded pins")
    parser.add_argument("--strategy", default="quick")
    parser.add_argument("--hardware", default="h100x8,rtx-pro-6000x8")
    parser.add_argument("--model", default="deepseek-v3")
    parser.add_argument("--out", type=Path, default=Path("/tmp/full-nightly"))
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    matrix = args.out / "full-nightly.toml"
    boxes = ", ".join(f'"{h}"' for h in args.hardware.split(","))
    matrix.write_text(f'name = "full-nightly"\nstrategy = "{args.strategy}"\nreleases = ["newest:{args.releases}"]\n'
                      f'models = ["{args.model}"]\ndrafts = ["eagle3"]\nhardware = [{boxes}]\n')
    before = set(environments.installed())
    started = time.perf_counter()
    data = api.nightly(matrix, out=args.out / "nightlies", baseline="none", jobs=args.jobs,
                       progress=lambda m: print(f"[{time.perf_counter() - started:7.1f}s] {m}", file=sys.stderr))
    seconds = time.perf_counter() - started
    built = sorted(set(environments.installed()) - before, key=environments.version_key)
    build_seconds = sum(environments.describe(r).get("install_seconds", 0.0) for r in built)
    cells = data["cells"]
    releases = sorted({c["release"] for c in cells}, key=environments.version_key)
    print(f"\nfull nightly: {len(releases)} releases ({releases[0]} … {releases[-1]}) × "
          f"{len(args.hardware.split(','))} hardware profiles = {len(cells)} cells, strategy {args.strategy}")
    print(f"wall time {seconds:.0f} s; environments built during the run: {len(built)} "
          f"({build_seconds:.0f} s of installs), already built: {len(before & set(releases))}")
    print(f"cells done {sum(c['status'] == 'done' for c in cells)}, skipped {sum(c['status'] == 'skipped' for c in cells)}, "
          f"evaluations {sum(c.get('evaluated') or 0 for c in cells)}")
    for cell in cells:
        if cell["status"] == "skipped":
            print(f"  skipped {cell['id']}: {cell['reason']}")
    keys: dict[str, dict[str, str]] = {}
    titles: dict[str, str] = {}
    for cell in cells:
        for signature in cell.get("signatures") or []:
            keys.setdefault(signature["cross_release_key"], {})[cell["release"]] = signature["location"].split("::")[-1]
            titles[signature["cross_release_key"]] = signature.get("title") or ""
    print("\nrelease × signature (function where it fails; '.' = not seen):")
    print("key         " + " ".join(r.rjust(6)[-6:] for r in releases) + "  title")
    for key in sorted(keys, key=lambda k: (-len(keys[k]), k)):
        print(f"{key}  " + " ".join(("#" if keys[key].get(r) else ".").rjust(6) for r in releases) + f"  {titles[key][:60]}")
    summary = {"releases": releases, "cells": len(cells), "seconds": round(seconds, 1), "built": built,
               "build_seconds": round(build_seconds, 1), "nightly": data["path"]}
    (args.out / "full-nightly-summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nnightly stored in {data['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

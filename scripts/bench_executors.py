#!/usr/bin/env python
"""Benchmark: the Ray executor's overhead against the local one, on the same sweep.

The same ``api.sweep`` (strategy quick, fixed seed, ``use_cache=False`` so every result is
evaluated, no shrinking) runs with ``executor="local"`` and ``executor="ray"``
alternately, ``--repeat`` times each, in one process. Ray is started once before the
first Ray sweep (a local instance with ``--cpus`` CPUs; its start-up is reported apart),
so each Ray sweep pays what a nightly pays per (release, hardware) slot: placing the
actors, starting their workers, and every request crossing Ray. Both runs' results.jsonl
and summary.json must be byte-identical; the script says so and exits 1 otherwise.

Usage: python scripts/bench_executors.py [--release 0.5.23] [--jobs 2] [--repeat 2] [--out bench_executors.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bisect_spec import api
from bisect_spec.ray_executor import import_ray


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--strategy", default="quick")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    spec = api.TargetSpec(release=args.release, model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    started = time.perf_counter()
    ray = import_ray()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
             object_store_memory=100 * 1024 * 1024)
    ray_start = time.perf_counter() - started
    seconds: dict[str, list[float]] = {"local": [], "ray": []}
    files: dict[str, set[tuple[bytes, bytes]]] = {"local": set(), "ray": set()}
    evaluated = 0
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeat):
            for executor in ("local", "ray"):
                runs_dir = Path(tmp) / f"{executor}-{round_}"
                began = time.perf_counter()
                result = api.sweep(spec, strategy=args.strategy, seed=args.seed, jobs=args.jobs, runs_dir=runs_dir,
                                   use_cache=False, executor=executor)
                seconds[executor].append(time.perf_counter() - began)
                evaluated = len(result.outcomes)
                files[executor].add(((result.run_path / "results.jsonl").read_bytes(),
                                     (result.run_path / "summary.json").read_bytes()))
                print(f"{executor:5} round {round_ + 1}: {seconds[executor][-1]:6.2f} s, {evaluated} outcomes", flush=True)
    ray.shutdown()
    identical = len(files["local"] | files["ray"]) == 1
    local, remote = statistics.median(seconds["local"]), statistics.median(seconds["ray"])
    report = {"release": args.release, "strategy": args.strategy, "seed": args.seed, "jobs": args.jobs,
              "outcomes": evaluated, "ray_start_seconds": round(ray_start, 2),
              "local_seconds": [round(s, 2) for s in seconds["local"]], "ray_seconds": [round(s, 2) for s in seconds["ray"]],
              "ratio_ray_over_local": round(remote / local, 3), "identical_results": identical}
    print(f"\nRay start-up (once): {ray_start:.2f} s")
    print(f"median sweep wall time: local {local:.2f} s, ray {remote:.2f} s  ->  ray/local = {remote / local:.3f}")
    print(f"results.jsonl and summary.json identical across executors and rounds: {identical}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())

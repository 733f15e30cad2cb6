#!/usr/bin/env python
"""Benchmark: the Ray executor's overhead against the local one, on the same sweep.

The same ``api.sweep`` (strategy quick, fixed seed, ``use_cache=False`` so every result is
evaluated, no shrinking) runs with ``executor="local"`` and ``executor="ray"``
alternately, ``--repeat`` times each, in one process. Ray is started once before the
first Ray sweep (a local instance with ``--cpus`` CPUs; its start-up is reported apart),
so each Ray sweep pays what a nightly pays per (release, hardware) slot: placing the
actors, starting their workers, and every request crossing Ray. Both runs' results.jsonl.gz
and summary.json must be byte-identical; the script says so and exits 1 otherwise.

Sweep wall time includes starting the workers (importing SGLang, seconds that vary with
the machine's load), so the evaluation phase is also timed alone: with a started session
of each executor, the quick plan's covering array through ``evaluate_many`` (parallel,
pipelined) and its first ``--sequential`` configurations one ``evaluate`` at a time (the
search phase's path, where every request crosses Ray on its own), alternately, and
reported per evaluation.

Usage: python scripts/bench_executors.py [--release 0.5.23] [--jobs 2] [--repeat 3] [--out bench_executors.json]
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
from bisect_spec.runtime.ray_executor import import_ray
from bisect_spec.runtime.session import Session
from bisect_spec.search.plan import covering_plan, load_strategy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--strategy", default="quick")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sequential", type=int, default=100)
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
                files[executor].add(((result.run_path / "results.jsonl.gz").read_bytes(),
                                     (result.run_path / "summary.json").read_bytes()))
                print(f"{executor:5} round {round_ + 1}: {seconds[executor][-1]:6.2f} s, {evaluated} outcomes", flush=True)
    phase = evaluation_phase(spec, args)
    ray.shutdown()
    identical = len(files["local"] | files["ray"]) == 1
    local, remote = statistics.median(seconds["local"]), statistics.median(seconds["ray"])
    report = {"release": args.release, "strategy": args.strategy, "seed": args.seed, "jobs": args.jobs,
              "outcomes": evaluated, "ray_start_seconds": round(ray_start, 2),
              "local_seconds": [round(s, 2) for s in seconds["local"]], "ray_seconds": [round(s, 2) for s in seconds["ray"]],
              "ratio_ray_over_local": round(remote / local, 3), "identical_results": identical, **phase}
    print(f"\nRay start-up (once): {ray_start:.2f} s")
    print(f"median sweep wall time: local {local:.2f} s, ray {remote:.2f} s  ->  ray/local = {remote / local:.3f}")
    for path in ("parallel", "sequential"):
        print(f"evaluation phase, {path}: local {phase[f'{path}_ms_local']:.2f} ms/config, "
              f"ray {phase[f'{path}_ms_ray']:.2f} ms/config  ->  ray/local = {phase[f'{path}_ratio']:.3f}")
    print(f"results.jsonl and summary.json identical across executors and rounds: {identical}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if identical else 1


def evaluation_phase(spec: api.TargetSpec, args: argparse.Namespace) -> dict[str, float]:
    """Milliseconds per evaluation with started workers: parallel (evaluate_many) and one at a time."""
    target = spec.resolve()
    sessions = {name: Session(target, jobs=args.jobs, timeout=120, executor=name) for name in ("local", "ray")}
    times: dict[str, dict[str, list[float]]] = {name: {"parallel": [], "sequential": []} for name in sessions}
    try:
        for session in sessions.values():
            session.start()
        plan = covering_plan(load_strategy(args.strategy, seed=args.seed).space(sessions["local"].flags()),
                             load_strategy(args.strategy, seed=args.seed))
        for _ in range(args.repeat):
            for name, session in sessions.items():
                began = time.perf_counter()
                list(session.evaluate_many(plan))
                times[name]["parallel"].append((time.perf_counter() - began) / len(plan) * 1000)
                began = time.perf_counter()
                for config in plan[:args.sequential]:
                    session.evaluate(config)
                times[name]["sequential"].append((time.perf_counter() - began) / min(len(plan), args.sequential) * 1000)
    finally:
        for session in sessions.values():
            session.close()
    out: dict[str, float] = {}
    for path in ("parallel", "sequential"):
        local, remote = (statistics.median(times[name][path]) for name in ("local", "ray"))
        out.update({f"{path}_ms_local": round(local, 3), f"{path}_ms_ray": round(remote, 3),
                    f"{path}_ratio": round(remote / local, 3)})
    return out


if __name__ == "__main__":
    sys.exit(main())

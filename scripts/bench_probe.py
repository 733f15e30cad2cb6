#!/usr/bin/env python
"""Benchmark: a probe answered by a fresh worker (cold) against one answered by a warm worker.

One run, side by side, medians over ``--count`` probes of the same configuration:

* API   — ``api.probe(...)`` end to end in this process: ``warm=False`` starts and stops a
          worker of its own (imports SGLang every time); ``warm=True`` reuses the warm worker
          (started once before timing, not counted);
* session — ``api.ProbeSession.probe`` on the warm worker (the target resolved once);
* CLI   — ``bisect-spec probe`` as a user types it: ``BISECT_SPEC_WORKER_IDLE=0`` (cold) against
          the default (warm), and warm with ``--no-fix`` (no nearest-working search);
          ``bisect-spec --version`` shows what the CLI's own Python start-up costs, which a warm
          worker cannot remove.

The warm worker of the target is stopped before the cold runs and after the last run, so
the bench leaves nothing behind (it also stops one you had up for that target).

Usage: python scripts/bench_probe.py [--count 5] [--release 0.5.23] [--hardware rtx-pro-6000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bisect_spec import api
from bisect_spec.runtime import environments, profiles, warm

FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"]
CLI = str(Path(sys.executable).with_name("bisect-spec"))


def timed(count: int, action: Callable[[], object]) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def cli(args: list[str], *, cold: bool) -> None:
    env = {**os.environ, warm.IDLE_ENV: "0"} if cold else dict(os.environ)
    done = subprocess.run([CLI, *args], env=env, capture_output=True, check=False)
    if done.returncode not in (0, 3):
        raise SystemExit(f"bisect-spec {' '.join(args)} failed: {done.stderr.decode()[-500:]}")


def stop_warm(spec: api.TargetSpec) -> None:
    target = spec.resolve()
    hardware = target.hardware
    worker_spec = environments.get(target.release).worker_spec(hardware=hardware.record, gpus=hardware.gpus)
    warm.stop(warm.workers_dir() / warm.key(worker_spec))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5)
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--hardware", default="rtx-pro-6000")
    args = parser.parse_args()
    os.environ.setdefault(warm.IDLE_ENV, "120")
    spec = api.TargetSpec(release=args.release, hardware=args.hardware, gpus=profiles.DEFAULT_GPUS)
    target_args = ["--sglang", args.release, "--hardware", args.hardware]
    rows: list[tuple[str, list[float], list[float]]] = []
    stop_warm(spec)
    try:
        cold_api = timed(args.count, lambda: api.probe(FLAGS, spec, warm=False))
        cold_cli = timed(args.count, lambda: cli(["probe", *target_args, "--", *FLAGS], cold=True))
        api.probe(FLAGS, spec, warm=True)  # start the warm worker (not timed)
        warm_api = timed(args.count, lambda: api.probe(FLAGS, spec, warm=True))
        with api.ProbeSession(spec) as session:
            session.probe(FLAGS)  # the target resolved and connected once
            warm_session = timed(args.count, lambda: session.probe(FLAGS))
        warm_cli = timed(args.count, lambda: cli(["probe", *target_args, "--", *FLAGS], cold=False))
        warm_no_fix = timed(args.count, lambda: cli(["probe", "--no-fix", *target_args, "--", *FLAGS], cold=False))
        version = timed(args.count, lambda: cli(["--version"], cold=False))
    finally:
        stop_warm(spec)
    rows = [("api.probe", cold_api, warm_api), ("ProbeSession.probe", cold_api, warm_session),
            ("bisect-spec probe (CLI)", cold_cli, warm_cli)]
    print(f"SGLang {args.release}, {args.hardware}, medians of {args.count} probes: {' '.join(FLAGS)}")
    print(f"{'':26}{'cold s':>10}{'warm s':>10}{'cold/warm':>11}")
    for name, cold, hot in rows:
        c, h = statistics.median(cold), statistics.median(hot)
        print(f"{name:26}{c:10.3f}{h:10.3f}{c / h:10.0f}x")
    print(f"{'... --no-fix (CLI)':26}{'':10}{statistics.median(warm_no_fix):10.3f}   (no nearest-working search)")
    print(f"{'bisect-spec --version':26}{'':10}{statistics.median(version):10.3f}   (the CLI's own start-up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

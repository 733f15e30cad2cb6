#!/usr/bin/env python
"""Benchmark: what a pool pays to start its workers and replace crashed ones, forked from a zygote or not.

By default a pool forks its workers from a zygote that imported SGLang once; with ``BISECT_SPEC_FORK=0`` every
worker, and every replacement of a crashed one, imports SGLang itself. Side by
side in one run, each variant in a process of its own (its CPU seconds are its own and its workers', read with
``getrusage(RUSAGE_CHILDREN)``): a pool of ``--jobs`` workers (its own, not a warm one) on Llama-3.1-8B and one
H100 evaluates ``--crashes`` configurations that crash its worker (the test fault plugin's ``os._exit``), each
followed by a passing one, then ``--jobs`` passing ones at once. Printed: wall and CPU seconds of each, the memory
its pool holds at the end (PSS of its workers and zygote: pages shared between them counted once), twice in turn
(the machine's drift shows between the pairs), and the ratio forked / own.

Usage: python scripts/bench_zygote.py [--release 0.5.23] [--jobs 2] [--crashes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = """
import json, sys
from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.runtime.session import Session
release, jobs, crashes, plugin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
target = TargetSpec(release=release, model="llama-3.1-8b", draft=None, hardware="h100", gpus=1).resolve()
with Session(target, jobs=jobs, timeout=120, warm="own", extra_env=(("BISECT_SPEC_WORKER_PLUGIN", plugin),)) as s:
    statuses = []
    for _ in range(crashes):
        statuses.append(s.evaluate(Config.of({"--served-model-name": "fault:exit"})).status.value)
        statuses.append(s.evaluate(Config()).status.value)
    statuses += [o.status.value for o in s.evaluate_many([Config.of({"--tp-size": "1", "--page-size": str(2 ** n)})
                                                           for n in range(jobs)])]
    import psutil
    pool = [*s.pool.worker_pids(), *([s.pool.zygote_pid] if s.pool.zygote_pid else [])]
    pss = sum(psutil.Process(pid).memory_full_info().pss for pid in pool) / 2**20
    print(json.dumps({"statuses": statuses, "replaced": s.pool.replaced, "pss": pss}))
"""


def run(fork: bool, options: argparse.Namespace) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", SCENARIO, options.release, str(options.jobs), str(options.crashes),
                           str(ROOT / "tests" / "resources" / "fault_plugin.py")],
                          env={**os.environ, "BISECT_SPEC_FORK": "1" if fork else "0"}, capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = ["crashed", "passed"] * options.crashes + ["passed"] * options.jobs
    assert result["statuses"] == expected, result
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "replaced": result["replaced"], "pss": result["pss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--crashes", type=int, default=3)
    options = parser.parse_args()
    print(f"SGLang {options.release}, {options.jobs} workers, {options.crashes} crashes, each variant twice in turn")
    print(f"{'variant':<10} {'wall s':>8} {'CPU s':>8} {'replaced':>9} {'pool PSS MiB':>13}")
    figures: dict[str, list[dict[str, float]]] = {"forked": [], "own": []}
    for _ in range(2):
        for name in ("forked", "own"):
            figure = run(name == "forked", options)
            figures[name].append(figure)
            print(f"{name:<10} {figure['wall']:8.1f} {figure['cpu']:8.1f} {figure['replaced']:9.0f} {figure['pss']:13.0f}")
    for what in ("wall", "cpu", "pss"):
        ratio = sum(f[what] for f in figures["forked"]) / sum(f[what] for f in figures["own"])
        print(f"forked / own, {what}: {ratio:.2f}")


if __name__ == "__main__":
    main()

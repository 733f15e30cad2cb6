#!/usr/bin/env python
"""Benchmark: what a warm worker pays to serve two GPU counts of its box in turn.

One warm worker serves every GPU count of a box kind; a request for another count than the last
switches it (``inside/simulated_gpu.set_count``: SGLang's memoised answers are cleared). Side by side
in one run, on one warm worker (in a ``BISECT_SPEC_HOME`` of its own, stopped at the end): ``--rounds``
rounds of the four configurations below asked for one count only, against the same asked alternately
for ``--gpus`` and ``--other`` GPUs (a switch every four evaluations). Printed: the total seconds of
each and their ratio, twice in turn (the machine's drift shows as a difference between the pairs).

Usage: python scripts/bench_count_switch.py [--release 0.5.23] [--model llama-3.1-8b] [--hardware h100]
                                            [--gpus 8] [--other 4] [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bisect_spec import api
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments, warm
from bisect_spec.runtime.session import Session

CONFIGS = [["--tp", "1"], ["--tp", "2"], ["--speculative-algorithm", "NGRAM"],
           ["--tp", "1", "--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--hardware", default="h100")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--other", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args()
    shared = environments.home()
    home = Path(tempfile.mkdtemp(prefix="bench-count-"))
    (home / "envs").symlink_to(shared / "envs")
    os.environ["BISECT_SPEC_HOME"] = str(home)
    configs = [Config.from_argv(argv) for argv in CONFIGS]

    def session(gpus: int) -> Session:
        spec = api.TargetSpec(release=options.release, model=options.model, hardware=options.hardware, gpus=gpus)
        started = Session(spec.resolve(), warm="start")
        started.start()
        return started

    def seconds(sessions: list[Session]) -> float:
        began = time.perf_counter()
        for _ in range(options.rounds):
            for one in sessions:
                for config in configs:
                    one.evaluate(config)
        return time.perf_counter() - began

    try:
        first, second = session(options.gpus), session(options.other)
        assert first.info["warm_worker"]["pid"] == second.info["warm_worker"]["pid"], "one warm worker serves both"
        seconds([first, second])  # both counts' answers computed once before timing
        for _ in range(2):
            same, alternating = seconds([first, first]), seconds([first, second])
            print(f"one count {same:.2f} s · alternating {alternating:.2f} s · ratio {alternating / same:.3f}")
        first.close()
        second.close()
    finally:
        warm.stop_all()


if __name__ == "__main__":
    main()

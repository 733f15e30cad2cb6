#!/usr/bin/env python
"""Does a verdict depend on what its worker evaluated before? Thousands of random evaluations across four models on
one worker, then fixed controls, compared with a fresh worker (:mod:`bisect_spec.workflows.history`).

Usage: python scripts/history_check.py [--release 0.5.23] [--length 2000] [--seed 0] [--out runs/history.json]
Exit status 1 when any verdict differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bisect_spec.model.flags import Config
from bisect_spec.workflows.history import Case, history_check

EAGLE3 = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "4"}
#: the controls: each model's plain speculative configuration at its deployment width, and SGLang's documented
#: DeepSeek-V3 MTP command (docs/basic_usage/deepseek: --tp 8 with EAGLE, 3 steps, topk 1, 4 draft tokens)
DSV3_MTP = {"--tp-size": "8", "--speculative-algorithm": "EAGLE", "--speculative-num-steps": "3",
            "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"}
CASES = (
    Case("deepseek-v3", "nextn", (Config.of({**DSV3_MTP, "--trust-remote-code": None}),
                                  Config.of({"--tp-size": "8", "--speculative-algorithm": "EAGLE"})),
         Config.of(DSV3_MTP)),
    Case("kimi-k2.6", "eagle3", (Config.of({"--tp-size": "8", **EAGLE3}), Config.of({"--tp-size": "4", **EAGLE3})),
         Config.of({"--tp-size": "8", **EAGLE3})),
    Case("qwen3-32b", "specforge-eagle3-qwen3-32b", (Config.of({"--tp-size": "4", **EAGLE3}),),
         Config.of({"--tp-size": "4", **EAGLE3})),
    Case("llama-3.1-8b", "eagle3", (Config.of({"--tp-size": "1", **EAGLE3}),
                                    Config.of({"--speculative-algorithm": "NGRAM"})), Config.of(EAGLE3)),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--hardware", default="h200")
    parser.add_argument("--length", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--recheck", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/history.json"))
    options = parser.parse_args()
    started = time.perf_counter()
    report = history_check(options.release, CASES, hardware=options.hardware, length=options.length, seed=options.seed,
                           recheck=options.recheck, notify=lambda line: print(line, file=sys.stderr, flush=True))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    print(f"SGLang {report.release} on {report.hardware}: {report.evaluations} evaluations on one worker, "
          f"{report.compared} compared with a fresh worker, {len(report.differences)} differences "
          f"({time.perf_counter() - started:.0f} s); {options.out}")
    for difference in report.differences[:20]:
        print(f"  {difference['model']} {' '.join(difference['config'])}: {difference['field']} "
              f"shared={str(difference['shared'])[:160]} fresh={str(difference['fresh'])[:160]}")
    return 1 if report.differences else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Each shipped model on its usual box: the verdict of a plain EAGLE3 (or MTP) configuration at the box's width,
and the stage it reached. Run it on two versions of bisect-spec (``PYTHONPATH=<a checkout> python
scripts/model_table.py``) to see what a change moved; docs/fidelity.md's table is its output.

Usage: python scripts/model_table.py [--release 0.5.23] [--out runs/model-table.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bisect_spec.api import TargetSpec
from bisect_spec.errors import BisectSpecError
from bisect_spec.model.flags import Config
from bisect_spec.runtime.session import Session

EAGLE3 = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "4"}
MTP = {"--speculative-algorithm": "EAGLE", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
       "--speculative-num-draft-tokens": "4"}
#: model, draft, box, GPUs, tp: the box its model card or SGLang's docs name
ROWS = (("llama-3.1-8b", "eagle3", "h100", 1, 1, EAGLE3), ("qwen3-8b", "eagle3", "h100", 1, 1, EAGLE3),
        ("gpt-oss-20b", "eagle3", "h100", 1, 1, EAGLE3), ("qwen3-32b", "specforge-eagle3-qwen3-32b", "h100", 4, 4, EAGLE3),
        ("llama-3.3-70b", "eagle3", "h100", 4, 4, EAGLE3), ("gpt-oss-120b", "eagle3", "h100", 8, 8, EAGLE3),
        ("qwen3-235b-a22b", "eagle3", "h200", 8, 8, EAGLE3), ("deepseek-v3", "nextn", "h200", 8, 8, MTP),
        ("deepseek-v3.2", "nextn", "h200", 8, 8, MTP), ("kimi-k2", "eagle3", "h200", 8, 8, EAGLE3),
        ("kimi-k2.5", "eagle3", "h200", 8, 8, EAGLE3), ("kimi-k2.6", "eagle3", "rtx-pro-6000", 8, 8, EAGLE3))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--out", type=Path, default=Path("runs/model-table.jsonl"))
    options = parser.parse_args()
    options.out.parent.mkdir(parents=True, exist_ok=True)
    with options.out.open("w") as out:
        for model, draft, box, gpus, tp, flags in ROWS:
            try:
                target = TargetSpec(release=options.release, model=model, draft=draft, hardware=box, gpus=gpus,
                                    inherit_env=False).resolve()
                session = Session(target, jobs=1, timeout=300)
                session.start()
                config = session.with_draft(session.canonical(Config.of({"--tp-size": str(tp), **flags})))
                outcome = session.evaluate(config)
                session.close()
            except BisectSpecError as exc:
                print(f"{model}: {exc}", file=sys.stderr)
                continue
            row = {"model": model, "draft": draft, "box": f"{box}x{gpus}", "flags": config.argv(),
                   "status": outcome.status.value, "verdict": getattr(outcome, "verdict", outcome.status.value.upper()),
                   "stage": outcome.record.get("stage"), "reached": outcome.reached,
                   "stopped": outcome.record.get("needs_gpu") or {}, "headline": outcome.headline}
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"| {model} + {draft} | {box}×{gpus} | {row['verdict']} | {row['stage']} | "
                  f"{'; '.join(f'{k}: {v[:90]}' for k, v in row['stopped'].items()) or row['headline'][:90]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Does a verdict depend on what its worker evaluated before? The same configurations, in two fresh workers, in
opposite orders, on every installed release; any field that differs between the two is a leak of process state
from one evaluation into the next (a fault of ours, or of SGLang's in-process reuse that we must undo).

Why a script and not only tests: a worker evaluates thousands of configurations in a sweep, each after others,
and SGLang writes process-wide state (module globals, its runtime context, class attributes) in every release
family differently; tests pin the leaks found (tests/integration/test_memory_pool.py), this looks for new ones
on every release. Found this way first (by a test order): 0.5.20's ``snapshot_context`` held the draft's
attention-TP override by reference, so every evaluation after a DP-attention EAGLE3 one sized Llama at tp 4.

Each configuration's first evaluation in the forward order is also the first in its worker (nothing before it);
in the reverse order it comes after all the others. Records are written per release as they are measured, so
an interrupted run resumes.

Usage: python scripts/order_check.py [--releases 0.5.18 ...] [--out runs/order-check.jsonl]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stage_reach import per_release  # this folder: the scripts' own loop over releases, resumable

from bisect_spec.api import TargetSpec
from bisect_spec.errors import BisectSpecError
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import Session

EAGLE3 = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "4"}
#: (model, draft, hardware, gpus) -> configurations, each evaluated in both orders on one worker per order
CASES: dict[tuple[str, str, str, int], list[dict[str, str | None]]] = {
    ("llama-3.1-8b", "eagle3", "h200", 8): [
        EAGLE3,
        {"--tp-size": "8", "--dp-size": "2", "--enable-dp-attention": None, **EAGLE3},
        {"--speculative-algorithm": "NGRAM"},
        {"--mem-fraction-static": "0.1", **EAGLE3},
        {"--disable-cuda-graph": None, **EAGLE3},
        {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "16", "--speculative-eagle-topk": "16",
         "--speculative-num-draft-tokens": "256", "--context-length": "131072"},
        {"--enable-deterministic-inference": None, **EAGLE3},
        {"--tp-size": "2", "--attention-backend": "triton", **EAGLE3},
    ],
    ("deepseek-v3", "nextn", "b200", 8): [
        {"--tp-size": "8", "--speculative-algorithm": "EAGLE"},
        {"--tp-size": "8", "--dp-size": "8", "--enable-dp-attention": None, "--speculative-algorithm": "EAGLE"},
        {"--tp-size": "8", "--speculative-algorithm": "EAGLE", "--attention-backend": "trtllm_mla",
         "--prefill-attention-backend": "flashinfer"},  # sglang#9330
    ],
}
#: what a verdict is made of (not its timing or its id)
FIELDS = ("status", "stage", "stages_passed", "exception", "frame", "memory_pool", "cuda_graphs", "attention_backends",
          "needs_gpu", "tool_fault")


def _evaluate_all(target: Any, configs: list[dict[str, str | None]]) -> list[dict[str, Any]]:
    with Session(target, timeout=300, warm="own") as session:  # a fresh worker: nothing evaluated before
        session.start()
        records = []
        for flags in configs:
            outcome = session.evaluate(session.with_draft(Config.of(flags)))
            record = {**outcome.record, "exception": outcome.exception}
            frame = record.get("frame") or {}
            record["frame"] = {k: frame.get(k) for k in ("file", "line", "function")} if frame else None
            records.append({f: record.get(f) for f in FIELDS})
        return records


def measure(release: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (model, draft, hardware, gpus), configs in CASES.items():
        try:
            target = TargetSpec(release=release, model=model, draft=draft, hardware=hardware, gpus=gpus).resolve()
            forward = _evaluate_all(target, configs)
            backward = list(reversed(_evaluate_all(target, list(reversed(configs)))))
        except BisectSpecError as exc:
            rows.append({"release": release, "model": model, "error": str(exc)[:200]})
            continue
        for flags, first, last in zip(configs, forward, backward, strict=True):
            differ = {f: [first[f], last[f]] for f in FIELDS if first[f] != last[f]}
            rows.append({"release": release, "model": model, "flags": flags, "status": first["status"],
                         "stage": first["stage"], "differ": differ})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="*")
    parser.add_argument("--out", type=Path, default=Path("runs/order-check.jsonl"))
    args = parser.parse_args()
    for release, rows in per_release(args.out, args.releases or environments.installed(), measure):
        leaks = [r for r in rows if r.get("differ")]
        print(f"{release}: {len(rows)} configurations, {len(leaks)} depend on the order"
              + "".join(f"\n  {r['model']} {' '.join(r['flags'])}: {', '.join(r['differ'])}" for r in leaks)
              + "".join(f"\n  {r['model']}: {r['error']}" for r in rows if "error" in r), flush=True)

if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Benchmark: raw in-process ServerArgs construction vs bisect-spec's isolated workers.

Same configurations, same release, same simulated hardware, one run, side by side:

* raw      — one process, SGLang imported once, parser reused, no isolation at all
             (environment, logging and caches leak from one config to the next), the same
             full launch path (resolution, ``check_server_args``, auto parsers, target and
             draft model configs, the model runner and its attention-backend choice:
             ``launch.run_after_resolution``);
* isolated — bisect-spec's worker as a sweep uses it (``Session.evaluate_many``, one
             worker process): environment restored,
             caches cleared, platform reset before every evaluation.

Both use one core, so the ratio isolates the cost of isolation. Goal: isolated/raw >= 0.8.
A second raw pass over the same configurations reports each stage's own cost per configuration.

Usage: python scripts/bench_eval.py [--count 2000] [--release 0.5.23] [--model kimi-k2.6]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.runtime.session import DRAFT, Session

RAW_RUNNER = r'''
import json, sys, time, types, os
package = types.ModuleType("bisect_spec"); package.__path__ = [sys.argv[1]]; sys.modules["bisect_spec"] = package
import torch
lib = torch.library.Library("torchvision", "DEF")
lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
lib.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")
from bisect_spec.inside.evaluator import Evaluator
from bisect_spec.inside import launch
import contextlib
from bisect_spec.inside.launch import attention, cuda_graphs, draft_model, draft_worker, memory_pool, model_runner
from bisect_spec.inside.launch import scheduler, target_model, target_worker
spec = json.load(open(sys.argv[2]))
ev = Evaluator(spec["hardware"], spec["gpus"])
argvs = spec["argvs"]
# warm-up pass so lazily imported modules are in place for both contenders
for argv in argvs[:50]:
    ev.evaluate(argv)
devnull = open(os.devnull, "w")
sys.stderr = devnull
started = time.perf_counter()
failed = 0
for argv in argvs:
    try:
        args = ev._construct(launch.split_env(argv)[1])
        launch.run_after_resolution(args, launch.Progress())
    except BaseException:
        failed += 1
elapsed = time.perf_counter() - started
# a second pass, not timed as a whole: each launch-path stage's own time (wrapped, so its callees count)
stages = {name: 0.0 for name in ("_construct", "_tokenizer_manager", "_model_runner", "_memory_pool", "_target_model",
                                 "_attention_backend", "_draft_worker_config", "_draft_worker", "_draft_model",
                                 # run inside _memory_pool's window, once SGLang sized the pools (counted there too)
                                 "_capture_sizes", "_requests_refusal", "_decode_graph_sizes")}
def timed(name, function):
    def wrapper(*args, **kwargs):
        begun = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            stages[name] += time.perf_counter() - begun
    return wrapper
@contextlib.contextmanager
def timed_window(name, function, *args, **kwargs):  # the memory pool: its window, the stages on the sized pool in it
    begun = time.perf_counter()
    try:
        with function(*args, **kwargs) as sized:
            yield sized
    finally:
        stages[name] += time.perf_counter() - begun
#: where each is looked up when its stage runs: the module of its stage
where = {"_tokenizer_manager": scheduler, "_model_runner": model_runner, "_memory_pool": memory_pool,
         "_target_model": target_model, "_attention_backend": attention, "_draft_worker_config": draft_worker,
         "_draft_worker": draft_worker, "_draft_model": draft_model, "_capture_sizes": cuda_graphs,
         "_decode_graph_sizes": cuda_graphs, "_requests_refusal": target_worker}
for name, module in where.items():
    function = getattr(module, name)
    setattr(module, name, (lambda f, n: lambda *a, **k: timed_window(n, f, *a, **k))(function, name)
            if name == "_memory_pool" else timed(name, function))
ev._construct = timed("_construct", ev._construct)
for argv in argvs:
    try:
        args = ev._construct(launch.split_env(argv)[1])
        launch.run_after_resolution(args, launch.Progress())
    except BaseException:
        pass
print(json.dumps({"seconds": elapsed, "failed": failed, "stages": stages}), file=sys.__stdout__)
'''

DOMAINS: dict[str, list[str | None]] = {
    "--speculative-algorithm": ["EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"],
    "--speculative-num-steps": ["0", "1", "3", "-1", "8"],
    "--speculative-eagle-topk": ["1", "2", "8"],
    "--speculative-num-draft-tokens": ["2", "4", "16"],
    "--page-size": ["1", "16", "64"],
    "--attention-backend": ["triton", "flashinfer", "fa3", "flashmla", "trtllm_mla"],
    "--tp-size": ["1", "8"],
    "--enable-dp-attention": [None],
    "--dp-size": ["2", "8"],
    "--disable-overlap-schedule": [None],
    "--disable-cuda-graph": [None],
    "--mem-fraction-static": ["0.85"],
    "--max-running-requests": ["1", "64"],
}


def configs(count: int, seed: int) -> list[Config]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        chosen: dict[str, str | None] = {f: rng.choice(DOMAINS[f]) for f in rng.sample(sorted(DOMAINS), rng.randint(1, 6))}
        if "--speculative-algorithm" in chosen and rng.random() < 0.8:
            chosen["--speculative-draft-model-path"] = DRAFT
        out.append(Config.of(chosen))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--model", default="kimi-k2.6")
    parser.add_argument("--hardware", default="rtx-pro-6000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    target = TargetSpec(release=args.release, model=args.model, draft="eagle3", hardware=args.hardware).resolve()
    plan = configs(args.count, args.seed)
    with Session(target, jobs=1, timeout=120) as session:
        argvs = [session.argv(c) for c in plan]
        # warm-up, as for raw
        for config in plan[:50]:
            session.evaluate(config)
        started = time.perf_counter()
        outcomes = list(session.evaluate_many(plan))
        isolated = time.perf_counter() - started
        spec = session.environment.worker_spec(hardware=target.hardware.record, gpus=target.hardware.gpus)

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"hardware": target.hardware.record, "gpus": target.hardware.gpus, "argvs": argvs}, handle)
    package_dir = str(Path(__file__).resolve().parents[1] / "bisect_spec")
    raw_proc = subprocess.run([spec.python, "-c", RAW_RUNNER, package_dir, handle.name], env=spec.environment(),
                              capture_output=True, text=True, check=True)
    raw = json.loads(raw_proc.stdout.strip().splitlines()[-1])

    raw_rate = args.count / raw["seconds"]
    iso_rate = args.count / isolated
    failed = sum(not o.passed for o in outcomes)
    print(f"SGLang {args.release}, {args.model} + eagle3, {args.hardware}, {args.count} configs, 1 core each")
    print(f"{'mode':<10} {'seconds':>9} {'configs/s':>10} {'ms/config':>10} {'failing':>8}")
    print(f"{'raw':<10} {raw['seconds']:>9.2f} {raw_rate:>10.1f} {1000 / raw_rate:>10.2f} {raw['failed']:>8}")
    print(f"{'isolated':<10} {isolated:>9.2f} {iso_rate:>10.1f} {1000 / iso_rate:>10.2f} {failed:>8}")
    print(f"ratio isolated/raw: {iso_rate / raw_rate:.2f} (goal >= 0.8)")
    names = {"_construct": "parse + resolve", "_tokenizer_manager": "tokenizer manager",
             "_model_runner": "model runner (to its first device step)",
             "_memory_pool": "memory pool: weights on meta, SGLang's sizing (after weights)",
             "_attention_backend": "attention-backend choice (after weights)",
             "_draft_worker_config": "draft worker's model config (after weights)",
             "_draft_worker": "draft worker's construction (after weights)",
             "_target_model": "target model class, aux capture (after weights)",
             "_draft_model": "draft model class, embed/head sharing (after weights)",
             "_capture_sizes": "  of the pool: CUDA-graph sizes, up to 0.5.13",
             "_requests_refusal": "  of the pool: the target worker's requests check",
             "_decode_graph_sizes": "  of the pool: CUDA-graph sizes, 0.5.14+"}
    print(f"per-configuration cost of each stage (raw, second pass over the same {args.count}):")
    for name, seconds in raw["stages"].items():
        print(f"  {names[name]:<45} {1000 * seconds / args.count:>7.2f} ms")
    sys.exit(0)


if __name__ == "__main__":
    main()

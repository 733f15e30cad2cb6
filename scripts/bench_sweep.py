#!/usr/bin/env python
"""Benchmark: which failure signatures each sweep plan finds, against the full grid.

One space small enough to evaluate completely here (SGLang 0.5.23, kimi-k2.6 + eagle3,
simulated rtx-pro-6000 x8 by default), evaluated ONCE as a full grid with
``Session.evaluate_many``. Every other plan is scored from the grid's outcomes (a
dict by configuration key), so no plan is evaluated twice and all see the same verdicts:

* full grid         every configuration of the space;
* 2-way / 3-way     plain covering arrays over all flags (plus the baseline);
* default plan      ``covering_plan`` of a strategy with strength 2 over all flags and
                    core_strength 3 over the core speculative flags, then the Hypothesis
                    ``search`` with ``--budget`` evaluations (what ``bisect-spec sweep`` runs);
* random            uniform samples of the grid, as many as the default plan evaluates
                    (one seed shown, plus the mean/min over ``--random-seeds`` seeds).

For each: evaluations, distinct failure signatures, recall against the grid, and the
grid signatures it missed. Goal the project states: the default plan finds every
signature of the full grid with <= 5% of its evaluations.

Spaces: ``core`` (default; the core flags with page size and attention backend, 30,000
configurations) and ``wide`` (more flags, fewer values each, 17,280 configurations).

Usage: python scripts/bench_sweep.py [--space core|wide] [--out bench_sweep.json] [--release 0.5.23] [--jobs 2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.runtime.session import Session
from bisect_spec.search.covering import covering_array
from bisect_spec.search.plan import Strategy, covering_plan
from bisect_spec.search.random_search import search
from bisect_spec.search.space import CORE, FlagSpace, simplicity_key

#: Benchmark spaces ("" = flag not given), each small enough to evaluate completely here.
SPACES: dict[str, dict[str, tuple[str, ...]]] = {
    # the core flags with page size and attention backend: 5*2*5*5*5*4*6 = 30,000 configurations
    "core": {
        "--speculative-algorithm": ("", "EAGLE3", "EAGLE", "NEXTN", "NGRAM"),
        "--speculative-draft-model-path": ("", "@draft"),
        "--speculative-num-steps": ("", "1", "2", "0", "-1"),
        "--speculative-eagle-topk": ("", "1", "2", "0", "8"),
        "--speculative-num-draft-tokens": ("", "2", "3", "0", "16"),
        "--page-size": ("", "1", "16", "64"),
        "--attention-backend": ("", "triton", "fa3", "flashinfer", "flashmla", "trtllm_mla"),
    },
    # fewer values per flag, more flags (switches whose failures need several other flags): 17,280
    "wide": {
        "--speculative-algorithm": ("", "EAGLE3", "EAGLE", "NEXTN", "NGRAM"),
        "--speculative-draft-model-path": ("", "@draft"),
        "--speculative-num-steps": ("", "1", "0"),
        "--speculative-eagle-topk": ("", "1", "2"),
        "--speculative-num-draft-tokens": ("", "4", "16"),
        "--page-size": ("", "64"),
        "--attention-backend": ("", "triton", "fa3", "trtllm_mla"),
        "--kv-cache-dtype": ("", "fp8_e5m2"),
        "--speculative-use-rejection-sampling": ("", "@on"),
        "--speculative-use-block-verification": ("", "@on"),
    },
}
GOAL_FRACTION = 0.05


def bench_strategy(values: dict[str, tuple[str, ...]], budget: int, seed: int) -> Strategy:
    """The default strategy's shape (t=2 all, t=3 core) restricted to a benchmark space."""
    return Strategy(name="bench", include=tuple(values), strength=2, core=CORE, core_strength=3,
                    random_budget=budget, seed=seed, values={flag: tuple(v or None for v in vs) for flag, vs in values.items()})


def plan_of_rows(space: FlagSpace, rows: Sequence[Sequence[int]]) -> list[Config]:
    """Baseline first, then the rows' configurations, without duplicates (as ``covering_plan`` does)."""
    seen: set[Config] = set()
    plan: list[Config] = []
    for row in [tuple(0 for _ in space.specs), *rows]:
        config = space.config_of(row)
        if config not in seen:
            seen.add(config)
            plan.append(config)
    return plan


def class_of(outcome: Outcome) -> str:
    """What the search steers by, and what plans are scored on: a signature id, or the status."""
    return outcome.signature.id if outcome.signature else outcome.status.value


def score(name: str, configs: Sequence[Config], grid: dict[str, str], grid_sigs: dict[str, dict[str, Any]],
          grid_size: int) -> dict[str, Any]:
    keys = list(dict.fromkeys(c.key() for c in configs))
    found = {grid[k] for k in keys} & set(grid_sigs)
    missed = sorted(set(grid_sigs) - found, key=lambda s: (-grid_sigs[s]["count"], s))
    return {"plan": name, "evaluations": len(keys), "fraction_of_grid": len(keys) / grid_size,
            "signatures": len(found), "recall": len(found) / max(1, len(grid_sigs)),
            "missed": [{"id": s, **grid_sigs[s]} for s in missed]}


def evaluate_grid(session: Session, configs: list[Config]) -> tuple[dict[str, str], dict[str, dict[str, Any]], float]:
    """Every configuration once (in parallel): its class, and what each signature is."""
    session.start()
    classes: dict[str, str] = {}
    sigs: dict[str, dict[str, Any]] = {}
    started = last = time.monotonic()
    for outcome in session.evaluate_many(configs):
        classes[outcome.config.key()] = class_of(outcome)
        if outcome.signature is not None:
            sigs.setdefault(outcome.signature.id, {"title": outcome.signature.title, "message": outcome.signature.message})
        if time.monotonic() - last > 15:
            last = time.monotonic()
            print(f"  grid: {len(classes)}/{len(configs)} · {len(classes) / (last - started):.0f}/s", file=sys.stderr)
    return classes, sigs, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", choices=sorted(SPACES), default="core", help="Which benchmark space to grid.")
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--model", default="kimi-k2.6")
    parser.add_argument("--draft", default="eagle3")
    parser.add_argument("--hardware", default="rtx-pro-6000")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--budget", type=int, default=300, help="Hypothesis search budget of the default plan.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-seeds", type=int, default=20, help="Random-sampling repetitions for mean/min recall.")
    parser.add_argument("--out", type=Path, default=Path("bench_sweep.json"))
    parser.add_argument("--save-grid", type=Path, help="Also write every grid configuration's class here.")
    parser.add_argument("--load-grid", type=Path, help="Score plans against a grid saved by --save-grid (no evaluation).")
    args = parser.parse_args()

    values = SPACES[args.space]
    strategy = bench_strategy(values, args.budget, args.seed)
    target = TargetSpec(release=args.release, model=args.model, draft=args.draft, hardware=args.hardware).resolve()
    session = Session(target, jobs=args.jobs, timeout=120)
    grid: dict[str, str]
    sig_info: dict[str, dict[str, Any]]
    worker: dict[str, Any]
    try:
        space = strategy.space(session.flags())
        if space.flags != list(values):
            sys.exit(f"SGLang {args.release} lacks some benchmark flags: space has {space.flags}")
        grid_configs = [space.config_of(row) for row in itertools.product(*(range(d) for d in space.domains()))]
        if args.load_grid:
            saved = json.loads(args.load_grid.read_text())
            if saved["values"] != {flag: list(vs) for flag, vs in values.items()} or saved["target"] != target.describe():
                sys.exit(f"{args.load_grid} holds another space or target")
            grid, sig_info, grid_seconds, worker = saved["grid"], saved["signatures"], saved["grid_seconds"], saved["worker"]
        else:
            grid, sig_info, grid_seconds = evaluate_grid(session, grid_configs)
            worker = dict(session.info)
    finally:
        session.close()
    if args.save_grid:
        args.save_grid.write_text(json.dumps({"values": {flag: list(vs) for flag, vs in values.items()},
                                              "target": target.describe(), "worker": worker, "grid_seconds": grid_seconds,
                                              "signatures": sig_info, "grid": grid}, sort_keys=True) + "\n")

    grid_sigs: dict[str, dict[str, Any]] = {}
    for config in sorted(grid_configs, key=lambda c: simplicity_key(c, space)):
        sig_id = grid[config.key()]
        if sig_id in sig_info:
            entry = grid_sigs.setdefault(sig_id, {**sig_info[sig_id], "count": 0, "simplest": config.argv()})
            entry["count"] += 1
    size = len(grid_configs)

    def lookup(config: Config) -> str:
        return grid[config.key()]  # the search draws only from the space: always in the grid

    cover = covering_plan(space, strategy)
    searched = search(space, lookup, budget=strategy.random_budget, seed=strategy.seed)
    default = list(dict.fromkeys([*cover, *searched]))
    rows: list[dict[str, Any]] = [
        score("full grid", grid_configs, grid, grid_sigs, size),
        score("2-way covering array", plan_of_rows(space, covering_array(space.domains(), 2, seed=args.seed)),
              grid, grid_sigs, size),
        score("3-way covering array", plan_of_rows(space, covering_array(space.domains(), 3, seed=args.seed)),
              grid, grid_sigs, size),
        score(f"random, seed {args.seed} (= default budget)", random.Random(args.seed).sample(grid_configs, len(default)),
              grid, grid_sigs, size),
        score("default plan: cover only (t=2, core t=3)", cover, grid, grid_sigs, size),
        score(f"default plan (cover + search {args.budget})", default, grid, grid_sigs, size),
    ]
    randoms = [score("random", random.Random(s).sample(grid_configs, len(default)), grid, grid_sigs, size)["recall"]
               for s in range(args.random_seeds)]
    best = rows[-1]
    goal_met = best["recall"] == 1.0 and best["evaluations"] <= GOAL_FRACTION * size

    draft = target.draft.name if target.draft else "no draft"
    print(f"space '{args.space}' ({len(values)} flags) · SGLang {target.release} · {target.model.name} + {draft} · "
          f"{worker.get('hardware', target.hardware.label)} · grid {size} configs evaluated in {grid_seconds:.0f} s "
          f"({size / grid_seconds:.0f}/s, {args.jobs} jobs) · {len(grid_sigs)} grid signatures")
    header = f"{'plan':<44} {'evals':>6} {'% grid':>7} {'sigs':>5} {'recall':>7}  missed"
    print(header)
    print("-" * len(header))
    for row in rows:
        missed = ", ".join(f"{m['id']} ({m['title']}, {m['count']} in grid)" for m in row["missed"]) or "-"
        print(f"{row['plan']:<44} {row['evaluations']:>6} {100 * row['fraction_of_grid']:>6.2f}% "
              f"{row['signatures']:>5} {row['recall']:>7.2f}  {missed}")
    print(f"random sampling over {args.random_seeds} seeds at {len(default)} evaluations: "
          f"recall mean {statistics.mean(randoms):.2f}, min {min(randoms):.2f}")
    print("grid signatures:")
    for sig_id, info in sorted(grid_sigs.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
        print(f"  {sig_id}  {info['count']:>6}  {info['title']}: {info['message'][:90]}")
        print(f"  {'':10}  {'':6}  simplest: {' '.join(info['simplest'])}")
    print(f"goal (default plan: recall 1.00 with <= {100 * GOAL_FRACTION:.0f}% of the grid): "
          f"{'met' if goal_met else 'NOT met'}")

    args.out.write_text(json.dumps({
        "schema": "bisect-spec/bench-sweep/1", "target": target.describe(), "worker": worker,
        "space": args.space, "values": {flag: list(vs) for flag, vs in values.items()}, "grid_size": size,
        "grid_seconds": round(grid_seconds, 1), "jobs": args.jobs, "seed": args.seed, "search_budget": args.budget,
        "grid_signatures": grid_sigs, "plans": rows,
        "random_recall": {"seeds": args.random_seeds, "evaluations": len(default), "mean": statistics.mean(randoms),
                          "min": min(randoms), "all": randoms},
        "goal": {"fraction": GOAL_FRACTION, "met": goal_met},
    }, indent=2, sort_keys=True) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()

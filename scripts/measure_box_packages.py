#!/usr/bin/env python
"""Measure what the simulated box's GPU packages change: the same configurations, the same
release and box, evaluated with the packages of a CUDA install answering as present (the
default) and without them (``"simulate_packages": false``, the simulation before they
existed), side by side in one run. Prints, per release and box, how many outcomes changed
verdict and which resolved fields changed how often, with examples.

Usage: python scripts/measure_box_packages.py [--releases 0.5.9 0.5.12 0.5.23] [--count 150]
       [--model llama-3.1-8b] [--hardware h100 b200] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.runtime.session import Session, Target
from bisect_spec.search.plan import covering_plan, load_strategy


def _session(target: Target, packages: bool) -> Session:
    hardware = target.hardware
    record = {**(hardware.record or {}), "simulate_packages": packages}
    return Session(dataclasses.replace(target, hardware=dataclasses.replace(hardware, record=record)), jobs=1)


def measure(release: str, model: str, hardware: str, count: int, strategy_name: str) -> dict[str, Any]:
    target = TargetSpec(release=release, model=model, draft="eagle", hardware=hardware).resolve()
    with _session(target, True) as boxed, _session(target, False) as bare:
        strategy = load_strategy(strategy_name, seed=0, random_budget=0)
        plan: list[Config] = list(covering_plan(strategy.space(boxed.flags()), strategy))[:count]
        plan = [boxed.with_draft(c) for c in plan]
        with_packages = {o.config.key(): o for o in boxed.evaluate_many(plan)}
        without = {o.config.key(): o for o in bare.evaluate_many(plan)}
    verdicts = 0
    fields: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    refused = collections.Counter[str]()
    for key, boxed_outcome in with_packages.items():
        plain = without[key]
        for package in boxed_outcome.record.get("gpu_code_refused", []):
            refused[package] += 1
        if boxed_outcome.status is not plain.status:
            verdicts += 1
            examples.setdefault("verdict", f"{boxed_outcome.config}: {plain.status} -> {boxed_outcome.status}")
            continue
        for name in sorted(set(boxed_outcome.resolved) | set(plain.resolved)):
            if boxed_outcome.resolved.get(name) != plain.resolved.get(name):
                fields[name] += 1
                examples.setdefault(name, f"{boxed_outcome.config}: {plain.resolved.get(name)!r} -> "
                                          f"{boxed_outcome.resolved.get(name)!r}")
    return {"release": release, "model": model, "hardware": hardware, "evaluated": len(with_packages),
            "verdict_changes": verdicts, "fields": dict(fields), "examples": examples,
            "gpu_code_refused": dict(refused)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="+", default=["0.5.9", "0.5.12", "0.5.23"])
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--hardware", nargs="+", default=["h100", "b200"])
    parser.add_argument("--count", type=int, default=150)
    parser.add_argument("--strategy", default="eagle-core")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    rows = []
    print(f"{'release':8} {'box':6} {'configs':>7} {'verdicts':>8}  resolved fields that changed (count)")
    for release in options.releases:
        for hardware in options.hardware:
            row = measure(release, options.model, hardware, options.count, options.strategy)
            rows.append(row)
            changed = ", ".join(f"{k} ({v})" for k, v in sorted(row["fields"].items(), key=lambda kv: -kv[1])) or "-"
            print(f"{release:8} {hardware:6} {row['evaluated']:>7} {row['verdict_changes']:>8}  {changed}", flush=True)
            for name, example in row["examples"].items():
                print(f"{'':25}e.g. {name}: {example}")
    if options.json:
        options.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

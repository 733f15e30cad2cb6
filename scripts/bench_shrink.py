#!/usr/bin/env python
"""Benchmark: bisect-spec's shrinker against picire's ddmin, counted in evaluations.

Failure cases, all evaluated for real (SGLang's ServerArgs built in worker processes):

* the two seed episodes: kimi-k2.5 + eagle3 on SGLang 0.5.9, and kimi-k2.6 + eagle3 on
  0.5.23 (with and without ``--speculative-num-steps 1``), on a simulated rtx-pro-6000;
* every "failed" signature the default sweep finds on 0.5.23 (kimi-k2.6 + eagle3), each
  shrunk twice: from the sweep's smallest configuration of that signature, and from the
  first outcome of that signature with the most flags (the largest failing configuration).

For each starting configuration both algorithms reduce the same units (one flag with its
value) under the same predicate, "fails with the original signature":

* bisect-spec: ``Shrinker(config, predicate, space=shrink_space(...), hints=failure_hints(...))``;
  reported as ``removal_evaluations`` (flag-removal phase, comparable to ddmin) and
  ``evaluations`` (total: with the re-check of the original and value simplification);
* picire: ``picire.DD`` (ddmin, Zeller split n=2, subsets then complements, ConfigCache);
  reported as the number of distinct configurations it asked for.

One outcome cache per (release, target) is shared, so nothing is evaluated twice, but each
algorithm is charged against its own set of requested configurations only: neither
profits from the other's work. Counts, not seconds, are compared (timings are noisy).

Goal: bisect-spec needs <= 0.5x picire's evaluations for equal or smaller results.

Usage: python scripts/bench_shrink.py [--out bench_shrink.json] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import picire

from bisect_spec.api import TargetSpec, evidence_of, failure_hints, shrink_space, sweep
from bisect_spec.errors import BudgetExhausted
from bisect_spec.flags import Config, Value
from bisect_spec.outcome import Outcome
from bisect_spec.session import Session
from bisect_spec.shrink import Budget, Shrinker, ShrinkResult
from bisect_spec.signature import Signature

HARDWARE = "rtx-pro-6000"
DRAFT_KIND = "eagle3"

EPISODE_1 = ("--tp-size 8 --trust-remote-code --speculative-algorithm EAGLE3 --speculative-draft-model-path @draft "
             "--speculative-eagle-topk 1 --speculative-num-draft-tokens 16 --mem-fraction-static 0.85 "
             "--disable-cuda-graph --max-running-requests 64 --port 30000 --host 0.0.0.0")
EPISODE_2 = ("--tp-size 8 --trust-remote-code --speculative-algorithm EAGLE3 --speculative-draft-model-path @draft "
             "--speculative-num-steps 1 --speculative-num-draft-tokens 3 --mem-fraction-static 0.88 "
             "--max-running-requests 64 --served-model-name kimi --port 8000 --host 0.0.0.0 --log-level info")

#: Evaluation limit per shrink; no time limit, so CPU noise cannot change the counts.
SHRINK_BUDGET = Budget(max_evaluations=2000, max_seconds=None)

Unit = tuple[str, Value]


@dataclass(frozen=True)
class Case:
    """One starting configuration to shrink on one target."""

    name: str
    release: str
    model: str
    start: Config
    expected: str | None = None  # signature id the sweep reported, if the case comes from a sweep
    evidence: frozenset[str] = frozenset()  # flags in every sweep config failing this way (what `sweep` passes)


@dataclass
class SharedOutcomes:
    """Every outcome evaluated on one target, shared by both algorithms (saves time, not counts)."""

    session: Session
    outcomes: dict[Config, Outcome] = field(default_factory=dict)

    def outcome(self, config: Config) -> Outcome:
        if config not in self.outcomes:
            self.outcomes[config] = self.session.evaluate(config)
        return self.outcomes[config]


@dataclass
class Charged:
    """One algorithm's view of the shared outcomes: it pays for each distinct config it asks for."""

    shared: SharedOutcomes
    asked: set[Config] = field(default_factory=set)
    calls: int = 0

    def signature(self, config: Config) -> Signature | None:
        self.calls += 1
        self.asked.add(config)
        return self.shared.outcome(config).signature


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_picire(start: Config, target: Signature, shared: SharedOutcomes) -> tuple[Config, Charged]:
    """ddmin over the flags of ``start`` (one unit = one flag with its value)."""
    charged = Charged(shared)

    def test(units: list[Unit], config_id: tuple[str, ...]) -> Any:
        failing = charged.signature(Config(tuple(units))) == target
        return picire.Outcome.FAIL if failing else picire.Outcome.PASS

    dd = picire.DD(test, split=picire.config_splitters.ZellerSplit(n=2), cache=picire.ConfigCache(),
                   subset_first=True, subset_iterator=picire.config_iterators.forward,
                   complement_iterator=picire.config_iterators.forward)
    units: list[Unit] = list(start.items)
    reduced: list[Unit] = dd(units)
    return Config(tuple(reduced)), charged


class PhaseCountingShrinker(Shrinker):
    """The real :class:`Shrinker`, also counting the evaluations spent inside each phase.

    ``ShrinkResult.removal_evaluations`` is the running total at the end of the *last*
    flag-removal pass of the fixpoint loop, so it also contains the value-simplification
    evaluations of earlier passes; ``flag_removal`` counts only evaluations made while
    removing flags (plus the first evaluation of the original, as picire counts it too).
    """

    flag_removal = 1
    value_simplification = 0

    def remove_flags(self) -> None:
        before = self.evaluations
        try:
            super().remove_flags()
        finally:
            self.flag_removal += self.evaluations - before

    def simplify_values(self) -> None:
        before = self.evaluations
        try:
            super().simplify_values()
        finally:
            self.value_simplification += self.evaluations - before


def run_bisect_spec(start: Config, first: Outcome, shared: SharedOutcomes,
                    evidence: frozenset[str] = frozenset()) -> tuple[ShrinkResult, Charged, PhaseCountingShrinker]:
    charged = Charged(shared)
    shrinker = PhaseCountingShrinker(start, charged.signature, space=shrink_space(shared.session, start),
                                     hints=failure_hints(first), evidence=evidence, budget=SHRINK_BUDGET)
    try:
        result = shrinker.run()
    except BudgetExhausted as exc:
        result = exc.result
    return result, charged, shrinker


def ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 3) if denominator else None


def bench_case(case: Case, shared: SharedOutcomes) -> dict[str, Any]:
    start = shared.session.canonical(case.start)
    first = shared.outcome(start)
    row: dict[str, Any] = {"case": case.name, "release": case.release, "model": case.model,
                           "start_argv": start.argv(), "start_flags": len(start),
                           "start_status": first.status.value,
                           "signature": first.signature.id if first.signature else None,
                           "expected_signature": case.expected}
    if first.signature is None:
        row["skipped"] = "the starting configuration passes: nothing to shrink"
        return row
    if case.expected is not None and first.signature.id != case.expected:
        row["note"] = f"re-evaluated as {first.signature.id}, the sweep reported {case.expected}"
    started = time.monotonic()
    picire_result, picire_charged = run_picire(start, first.signature, shared)
    picire_seconds = time.monotonic() - started
    started = time.monotonic()
    result, bs_charged, phases = run_bisect_spec(start, first, shared, case.evidence)
    bs_seconds = time.monotonic() - started
    picire_evals = len(picire_charged.asked)
    row.update({
        "picire_evals": picire_evals, "picire_test_calls": picire_charged.calls,
        "picire_flags": len(picire_result), "picire_argv": picire_result.argv(),
        "picire_seconds": round(picire_seconds, 2),
        "bs_status": result.status, "bs_removal_evals": result.removal_evaluations, "bs_evals": result.evaluations,
        "bs_flag_removal_evals": phases.flag_removal, "bs_value_evals": phases.value_simplification,
        "bs_distinct_configs": len(bs_charged.asked), "bs_flags": len(result.minimal), "bs_argv": result.minimal.argv(),
        "bs_seconds": round(bs_seconds, 2), "bs_stop_reason": result.stop_reason,
        "ratio_removal": ratio(result.removal_evaluations, picire_evals),
        "ratio_flag_removal": ratio(phases.flag_removal, picire_evals), "ratio_total": ratio(result.evaluations, picire_evals),
        "same_flags": sorted(result.minimal.flags()) == sorted(picire_result.flags()),
        "equal": result.minimal == picire_result,
        "shared_outcomes": len(shared.outcomes),
    })
    return row


def sweep_cases(runs_dir: Path, jobs: int) -> tuple[list[Case], dict[str, Any]]:
    """Cases from every "failed" signature the default sweep finds on 0.5.23."""
    spec = TargetSpec(release="0.5.23", model="kimi-k2.6", draft=DRAFT_KIND, hardware=HARDWARE)
    started = time.monotonic()
    result = sweep(spec, strategy="default", runs_dir=runs_dir, shrink=False, jobs=jobs)
    info = {"run": result.run_id, "evaluated": result.summary["evaluated"], "reused_from_cache": result.reused,
            "seconds": round(time.monotonic() - started, 1),
            "signatures": len(result.summary["signatures"])}
    cases: list[Case] = []
    for entry in result.summary["signatures"]:
        if entry["kind"] != "failed":
            continue
        sig = entry["id"]
        smallest = Config.from_argv(entry["smallest"])
        seen = frozenset(evidence_of(result.outcomes, sig))
        cases.append(Case(f"sweep {sig} smallest", "0.5.23", "kimi-k2.6", smallest, sig, seen))
        members = [o for o in result.outcomes if o.signature is not None and o.signature.id == sig]
        largest = max(members, key=lambda o: len(o.config)).config  # max keeps the first of equals
        if largest != smallest:
            cases.append(Case(f"sweep {sig} largest", "0.5.23", "kimi-k2.6", largest, sig, seen))
    info["failed_signatures"] = sum(1 for e in result.summary["signatures"] if e["kind"] == "failed")
    return cases, info


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def print_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    headers = ["case", "start", "picire", "p.flags", "bs.removal", "bs.total", "bs.flags", "removal/p", "total/p",
               "equal", "bs.flag-only", "flag-only/p"]
    lines: list[list[str]] = []
    for row in rows:
        if "picire_evals" not in row:
            lines.append([row["case"], fmt(row["start_flags"]), "skipped: " + row.get("skipped", ""), "", "", "", "", "",
                          "", "", "", ""])
            continue
        equal = "yes" if row["equal"] else ("same flags" if row["same_flags"] else "no")
        lines.append([row["case"], fmt(row["start_flags"]), fmt(row["picire_evals"]), fmt(row["picire_flags"]),
                      fmt(row["bs_removal_evals"]), fmt(row["bs_evals"]), fmt(row["bs_flags"]),
                      fmt(row["ratio_removal"]), fmt(row["ratio_total"]), equal, fmt(row["bs_flag_removal_evals"]),
                      fmt(row["ratio_flag_removal"])])
    done = [r for r in rows if "picire_evals" in r]
    picire_total = sum(r["picire_evals"] for r in done)
    removal_total = sum(r["bs_removal_evals"] for r in done)
    bs_total = sum(r["bs_evals"] for r in done)
    flag_total = sum(r["bs_flag_removal_evals"] for r in done)
    totals = {"cases": len(done), "picire_evals": picire_total, "bs_removal_evals": removal_total, "bs_evals": bs_total,
              "bs_flag_removal_evals": flag_total, "ratio_flag_removal": ratio(flag_total, picire_total),
              "picire_flags": sum(r["picire_flags"] for r in done), "bs_flags": sum(r["bs_flags"] for r in done),
              "ratio_removal": ratio(removal_total, picire_total), "ratio_total": ratio(bs_total, picire_total),
              "bs_smaller_or_equal_everywhere": all(r["bs_flags"] <= r["picire_flags"] for r in done),
              "picire_smaller": [r["case"] for r in done if r["picire_flags"] < r["bs_flags"]]}
    lines.append(["TOTAL", fmt(sum(r["start_flags"] for r in done)), fmt(picire_total), fmt(totals["picire_flags"]),
                  fmt(removal_total), fmt(bs_total), fmt(totals["bs_flags"]), fmt(totals["ratio_removal"]),
                  fmt(totals["ratio_total"]), "", fmt(flag_total), fmt(totals["ratio_flag_removal"])])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    print()
    met = (totals["ratio_removal"] is not None and totals["ratio_removal"] <= 0.5
           and totals["bs_smaller_or_equal_everywhere"])
    print(f"goal: <= 0.5x picire's evaluations at equal or smaller results -- removal phase "
          f"{fmt(totals['ratio_removal'])}x (flag removal only {fmt(totals['ratio_flag_removal'])}x), "
          f"total {fmt(totals['ratio_total'])}x, results "
          f"{'equal or smaller in every case' if totals['bs_smaller_or_equal_everywhere'] else 'LARGER in some case'}: "
          f"{'met' if met else 'NOT met'}")
    if totals["picire_smaller"]:
        print(f"picire found a smaller result in: {', '.join(totals['picire_smaller'])}")
    totals["goal_met_removal"] = met
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="write the rows and totals as JSON here")
    parser.add_argument("--jobs", type=int, default=2, help="workers for the sweep (default 2)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-shrink-") as tmp:
        log("sweeping 0.5.23 kimi-k2.6 + eagle3 (default strategy) ...")
        found, sweep_info = sweep_cases(Path(tmp), args.jobs)
        log(f"sweep: {sweep_info}")

    cases = [
        Case("episode 1 (0.5.9)", "0.5.9", "kimi-k2.5", Config.from_argv(EPISODE_1.split())),
        Case("episode 2 (0.5.23)", "0.5.23", "kimi-k2.6", Config.from_argv(EPISODE_2.split())),
        Case("episode 2 w/o num-steps", "0.5.23", "kimi-k2.6",
             Config.from_argv(EPISODE_2.split()).without("--speculative-num-steps")),
        *found,
    ]
    rows: list[dict[str, Any]] = []
    for (release, model) in dict.fromkeys((c.release, c.model) for c in cases):
        target = TargetSpec(release=release, model=model, draft=DRAFT_KIND, hardware=HARDWARE).resolve()
        log(f"starting a session for {release} {model} ...")
        with Session(target, jobs=1, timeout=120) as session:
            shared = SharedOutcomes(session)
            for case in (c for c in cases if (c.release, c.model) == (release, model)):
                started = time.monotonic()
                row = bench_case(case, shared)
                log(f"  {case.name}: {row.get('picire_evals', '-')} picire / {row.get('bs_removal_evals', '-')} "
                    f"removal / {row.get('bs_evals', '-')} total  ({time.monotonic() - started:.1f} s)")
                rows.append(row)

    print()
    totals = print_table(rows)
    if args.out:
        args.out.write_text(json.dumps({"schema": "bisect-spec/bench-shrink/1", "sweep": sweep_info, "rows": rows,
                                        "totals": totals}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

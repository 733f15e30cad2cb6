#!/usr/bin/env python
"""Benchmark: bisect-spec's shrinker against picire's ddmin, counted in evaluations.

Failure cases, all evaluated for real (SGLang's ServerArgs built in worker processes):

* the two seed episodes: kimi-k2.5 + eagle3 on SGLang 0.5.9, and kimi-k2.6 + eagle3 on
  0.5.23 (with and without ``--speculative-num-steps 1``), on a simulated rtx-pro-6000;
* every "failed" signature the default sweep finds on 0.5.23 (kimi-k2.6 + eagle3), each
  shrunk twice: from the sweep's smallest configuration of that signature, and from the
  first outcome of that signature with the most flags (the largest failing configuration).

For each starting configuration three algorithms reduce the same units (one flag with its
value) under the same predicate, "fails with the original signature":

* new: ``Shrinker(config, predicate, space=shrink_space(...), hints=failure_hints(...),
  evidence=...)``, the shrinker as the commands run it (hints: flags named by the failing
  statement, its guard and message through the parser's dests; evidence: flags in every sweep
  configuration failing this way; the masking rounds' learnt reproducers, which the default
  command also passes, are left out here);
* old: the shrinker before statement hints and isolation (:class:`OldShrinker`, kept here):
  word hints matched to flag names, guesses retried in every pass, ddmin;
* picire: ``picire.DD`` (ddmin, Zeller split n=2, subsets then complements, ConfigCache);
  reported as the number of distinct configurations it asked for.

bisect-spec's counts are all its evaluations: the original and its re-check, flag removal,
value simplification and the proof of 1-minimality (picire does none of the last three).
One outcome cache per (release, target) is shared, so nothing is evaluated twice, but each
algorithm is charged against its own set of requested configurations only: none profits
from another's work. Counts, not seconds, are compared (timings are noisy).

Goal: the new shrinker needs <= 0.5x picire's evaluations in total, for equal or smaller results.

Usage: python scripts/bench_shrink.py [--out bench_shrink.json] [--jobs 2] [--outcomes outcomes.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import picire

from bisect_spec.api import TargetSpec, evidence_of, failure_hints, shrink_space, sweep
from bisect_spec.errors import BudgetExhausted
from bisect_spec.model.flags import Config, Value
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.signature import Signature
from bisect_spec.reduce.shrink import Budget, Shrinker, ShrinkResult
from bisect_spec.runtime.session import Session

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
    """Every outcome evaluated on one target, shared by all algorithms (saves time, not counts).

    ``kept`` holds outcomes of an earlier run (``--outcomes``): evaluations are deterministic,
    so reusing them changes no count, only the time a rerun takes.
    """

    session: Session
    outcomes: dict[Config, Outcome] = field(default_factory=dict)
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)

    def outcome(self, config: Config) -> Outcome:
        if config not in self.outcomes:
            known = self.kept.get(config.key())
            self.outcomes[config] = Outcome.from_dict(known) if known else self.session.evaluate(config)
            self.kept[config.key()] = self.outcomes[config].to_dict()
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


class PhaseCounting(Shrinker):
    """The real :class:`Shrinker`, also counting the evaluations spent inside each phase.

    ``flag_removal`` counts only evaluations made while removing flags (guesses included),
    plus the first evaluation of the original, as picire counts it too.
    """

    flag_removal = 1
    value_simplification = 0

    def guess(self) -> bool:
        before = self.evaluations
        try:
            return super().guess()
        finally:
            self.flag_removal += self.evaluations - before

    def remove_flags(self, *, isolate: bool = True) -> None:
        before = self.evaluations
        try:
            super().remove_flags(isolate=isolate)
        finally:
            self.flag_removal += self.evaluations - before

    def simplify_values(self) -> None:
        before = self.evaluations
        try:
            super().simplify_values()
        finally:
            self.value_simplification += self.evaluations - before


class OldShrinker(PhaseCounting):
    """The shrinker before statement hints (commit 2d4125b), kept here to measure against.

    Its hints were words of the failing statement, guard and message, matched to flags by
    name; its guesses (evidence, evidence or hinted, hinted) were retried in every pass of
    the fixpoint loop, each followed by ddmin.
    """

    def guess(self) -> bool:
        return False

    def remove_flags(self, *, isolate: bool = True) -> None:
        before = self.evaluations
        try:
            self._old_remove_flags()
        finally:
            self.flag_removal += self.evaluations - before

    def _old_remove_flags(self) -> None:
        flags = self.removable()
        seen = [f for f in flags if f in self.evidence]
        hinted = [f for f in flags if _flag_dest(f) in self.hints]
        guesses = [(seen, "present in every configuration seen failing this way"),
                   (sorted(set(seen) | set(hinted)), "seen failing this way or named in the failing statement"),
                   (hinted, "named in the failing statement")]
        tried: set[tuple[str, ...]] = set()
        for keep, why in guesses:
            current = self.removable()
            keep = [f for f in keep if f in current]
            if not keep or len(keep) == len(current) or tuple(keep) in tried:
                continue
            tried.add(tuple(keep))
            drop = [f for f in current if f not in keep]
            if self.accept(self.best.without(*drop), f"keep only the {len(keep)} flags {why}"):
                break
        self._old_ddmin()
        progress = True
        while progress:
            progress = False
            for flag in sorted(self.removable(), key=lambda f: (_flag_dest(f) in self.hints, f)):
                if self.accept(self.best.without(flag), f"remove {flag}"):
                    progress = True

    def _old_ddmin(self) -> None:
        n = 2
        while True:
            flags = self.removable()
            if len(flags) < 2:
                return
            chunks = _split(flags, min(n, len(flags)))
            reduced = False
            if len(chunks) > 2:
                for chunk in chunks:
                    others = [f for f in flags if f not in chunk]
                    if self.accept(self.best.without(*others), f"keep only {' '.join(chunk)}"):
                        n, reduced = 2, True
                        break
            if not reduced:
                for chunk in chunks:
                    if self.accept(self.best.without(*chunk), f"remove {' '.join(chunk)}"):
                        n, reduced = max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(flags):
                    return
                n = min(2 * n, len(flags))


def _flag_dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _split(items: list[str], n: int) -> list[list[str]]:
    size, extra = divmod(len(items), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        chunks.append(list(items[start:end]))
        start = end
    return [c for c in chunks if c]


def old_failure_hints(outcome: Outcome) -> set[str]:
    """The old shrinker's hints: every word of the statement, guard and message (field names, not flags)."""
    frame = outcome.frame
    message = str(outcome.exception.get("message") or "")
    text = " ".join(str(x) for x in (frame.get("statement"), frame.get("expression"),
                                     (frame.get("guard") or {}).get("text"), message) if x)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    words |= {flag[2:].replace("-", "_") for flag in re.findall(r"--[a-z0-9][a-z0-9-]*", message)}
    if any(w.startswith("speculative_") for w in words):
        words |= {"speculative_algorithm", "speculative_draft_model_path"}
    return words


def run_shrinker(kind: type[PhaseCounting], start: Config, hints: set[str], shared: SharedOutcomes,
                 evidence: frozenset[str]) -> tuple[ShrinkResult, Charged, PhaseCounting]:
    charged = Charged(shared)
    shrinker = kind(start, charged.signature, space=shrink_space(shared.session, start),
                    hints=hints, evidence=evidence, budget=SHRINK_BUDGET)
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
    row["statement"] = first.frame.get("statement")
    row["guard"] = (first.frame.get("guard") or {}).get("text")
    row["message"] = first.exception.get("message")
    picire_result, picire_charged = run_picire(start, first.signature, shared)
    picire_evals = len(picire_charged.asked)
    row.update({"picire_evals": picire_evals, "picire_test_calls": picire_charged.calls,
                "picire_flags": len(picire_result), "picire_argv": picire_result.argv()})
    hints = {"old": old_failure_hints(first), "new": failure_hints(shared.session, first)}
    row["new_hints"] = sorted(hints["new"])
    row["evidence"] = sorted(case.evidence)
    for name, kind in (("old", OldShrinker), ("new", PhaseCounting)):
        result, charged, phases = run_shrinker(kind, start, hints[name], shared, case.evidence)
        row[name] = {"status": result.status, "removal_evals": result.removal_evaluations,
                     "evals": result.evaluations, "flag_removal_evals": phases.flag_removal,
                     "value_evals": phases.value_simplification, "distinct_configs": len(charged.asked),
                     "flags": len(result.minimal), "argv": result.minimal.argv(), "stop_reason": result.stop_reason,
                     "steps": [step for step, _ in result.history],
                     "ratio_total": ratio(result.evaluations, picire_evals),
                     "same_flags": sorted(result.minimal.flags()) == sorted(picire_result.flags()),
                     "equal": result.minimal == picire_result}
    row["shared_outcomes"] = len(shared.outcomes)
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
    headers = ["case", "start", "picire", "p.flags", "old", "old.flags", "old/p", "new", "new.flags", "new/p",
               "new.removal", "new.values"]
    lines: list[list[str]] = []
    for row in rows:
        if "picire_evals" not in row:
            lines.append([row["case"], fmt(row["start_flags"]), "skipped: " + row.get("skipped", ""),
                          *([""] * (len(headers) - 3))])
            continue
        old, new = row["old"], row["new"]
        lines.append([row["case"], fmt(row["start_flags"]), fmt(row["picire_evals"]), fmt(row["picire_flags"]),
                      fmt(old["evals"]), fmt(old["flags"]), fmt(old["ratio_total"]),
                      fmt(new["evals"]), fmt(new["flags"]), fmt(new["ratio_total"]),
                      fmt(new["flag_removal_evals"]), fmt(new["value_evals"])])
    done = [r for r in rows if "picire_evals" in r]
    picire_total = sum(r["picire_evals"] for r in done)
    totals: dict[str, Any] = {"cases": len(done), "picire_evals": picire_total,
                              "picire_flags": sum(r["picire_flags"] for r in done)}
    for name in ("old", "new"):
        evals = sum(r[name]["evals"] for r in done)
        totals[name] = {"evals": evals, "ratio_total": ratio(evals, picire_total),
                        "removal_evals": sum(r[name]["removal_evals"] for r in done),
                        "flag_removal_evals": sum(r[name]["flag_removal_evals"] for r in done),
                        "value_evals": sum(r[name]["value_evals"] for r in done),
                        "flags": sum(r[name]["flags"] for r in done),
                        "smaller_or_equal_everywhere": all(r[name]["flags"] <= r["picire_flags"] for r in done),
                        "picire_smaller": [r["case"] for r in done if r["picire_flags"] < r[name]["flags"]]}
    old, new = totals["old"], totals["new"]
    lines.append(["TOTAL", fmt(sum(r["start_flags"] for r in done)), fmt(picire_total), fmt(totals["picire_flags"]),
                  fmt(old["evals"]), fmt(old["flags"]), fmt(old["ratio_total"]),
                  fmt(new["evals"]), fmt(new["flags"]), fmt(new["ratio_total"]),
                  fmt(new["flag_removal_evals"]), fmt(new["value_evals"])])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    print()
    met = new["ratio_total"] is not None and new["ratio_total"] <= 0.5 and new["smaller_or_equal_everywhere"]
    for name in ("old", "new"):
        t = totals[name]
        print(f"{name}: {fmt(t['evals'])} evaluations in total = {fmt(t['ratio_total'])}x picire's {picire_total} "
              f"(flag removal {t['flag_removal_evals']}, value simplification {t['value_evals']}, the rest the "
              f"re-check and the proof); {t['flags']} flags vs picire's {totals['picire_flags']}, "
              f"{'equal or smaller in every case' if t['smaller_or_equal_everywhere'] else 'LARGER in some case'}")
        if t["picire_smaller"]:
            print(f"  picire found a smaller result in: {', '.join(t['picire_smaller'])}")
    print(f"goal: the new shrinker needs <= 0.5x picire's evaluations in total, at equal or smaller results: "
          f"{'met' if met else 'NOT met'}")
    totals["goal_met"] = met
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="write the rows and totals as JSON here")
    parser.add_argument("--jobs", type=int, default=2, help="workers for the sweep (default 2)")
    parser.add_argument("--outcomes", type=Path,
                        help="reuse and extend the outcomes kept in this JSON file (a rerun evaluates only what is new; "
                             "counts are unchanged)")
    args = parser.parse_args(argv)
    kept: dict[str, dict[str, dict[str, Any]]] = (json.loads(args.outcomes.read_text())
                                                  if args.outcomes and args.outcomes.is_file() else {})

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
            shared = SharedOutcomes(session, kept=kept.setdefault(f"{release} {model}", {}))
            for case in (c for c in cases if (c.release, c.model) == (release, model)):
                started = time.monotonic()
                row = bench_case(case, shared)
                log(f"  {case.name}: {row.get('picire_evals', '-')} picire / {row.get('old', {}).get('evals', '-')} old "
                    f"/ {row.get('new', {}).get('evals', '-')} new  ({time.monotonic() - started:.1f} s)")
                rows.append(row)
            if args.outcomes:
                args.outcomes.write_text(json.dumps(kept))

    print()
    totals = print_table(rows)
    if args.out:
        args.out.write_text(json.dumps({"schema": "bisect-spec/bench-shrink/1", "sweep": sweep_info, "rows": rows,
                                        "totals": totals}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

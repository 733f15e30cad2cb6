#!/usr/bin/env python
"""Benchmark: recall of the default plan's failing statements against an oracle no plan sees.

The oracle works on the default command's own space (``bisect-spec --model kimi-k2.6 --draft
eagle3``: SGLang 0.5.23, the ``default`` strategy's flags over the values that fit the model and
the simulated box, i.e. the space its covering array, rounds and search draw from) and has three
parts, each evaluated with ``Session.evaluate_many`` on ``--jobs`` workers:

* **peel**: the default run's own failing rows; from each, the flags of its failure's shrunk,
  1-minimal reproducer are removed and the row is evaluated again, until it passes or fails in a
  new way (a signature the default run did not shrink; at most ``--peel-depth`` times);
* **sample**: a uniform random sample of ``--sample`` distinct configurations (default 20,000;
  each flag's value drawn uniformly from its domain, "not given" included), seeded;
* **core grid**: every combination of the core speculative flags' values, no other flag given.

A *failing statement* is where SGLang raised: (file, function, first line of the raising
statement) of the innermost SGLang frame, whatever the message (one statement may raise several
signatures). It is *in speculative code* when the file is one of
:data:`bisect_spec.report.summary.SPECULATIVE_FILES` (``srt/speculative/``,
``srt/arg_groups/speculative_hook.py``) or the function's name matches
:data:`SPECULATIVE_FUNCTION` (speculative, spec_, eagle, draft, ngram, dflash, dspark, nextn,
mtp): :func:`is_speculative`, defined here once. Crashes, time-outs and usage errors have no
statement and are not counted.

The default plan is the default command itself (``api.sweep`` with the default strategy,
shrinking on, the outcome cache off so it runs cold), scored on the statements of the rows it
reports (``results.jsonl``); its evaluations count every worker evaluation, shrinking included.
Goals (issue 12, item 6): 100 % of the oracle's statements in speculative code, >= 95 % of all, in
at most twice today's evaluations.

The oracle's outcomes are cached on disk (``--oracle-cache``, SQLite, by the run store's target
key: release, profiles, box, environment and evaluator digest; the space digest and seed decide
which configurations are drawn), so a killed run resumes where it stopped and later runs reuse
it; outcomes already in the shared outcome cache are read from there. ``--oracle-only`` fills the
cache and stops. Run it niced: ``nice -n 10 python scripts/bench_recall.py -j 2``.

Usage: python scripts/bench_recall.py [--sample 20000] [-j 2] [--default-run RUN_DIR] [--out bench_recall.json]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.report.summary import SPECULATIVE_FILES
from bisect_spec.runtime import store
from bisect_spec.runtime.session import target_record
from bisect_spec.search.peel import peel
from bisect_spec.search.space import FlagSpace, simplicity_key

#: Function names of speculative code, wherever the file (``server_args.py::_handle_speculative_decoding``).
SPECULATIVE_FUNCTION = re.compile(r"specul|spec_|_spec\b|eagle|draft|ngram|dflash|dspark|nextn|mtp", re.IGNORECASE)
GOAL_SPECULATIVE = 1.0
GOAL_ALL = 0.95
GOAL_EVALUATIONS = 2.0  # times today's evaluations
PARTS = ("peel", "sample", "core grid")


@dataclass(frozen=True, order=True)
class Statement:
    """Where SGLang raised: file (relative to the sglang package), first line of the statement, function."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.function}"


def statement_of(record: Mapping[str, Any]) -> Statement | None:
    """The failing statement of one outcome record (``Outcome.to_dict`` shape), or None when it did not fail
    with an SGLang frame (passed, crashed, timed out, usage)."""
    if record.get("status") != "failed":
        return None
    frame = record.get("frame") or {}
    if not frame.get("file"):
        return None
    lines = frame.get("statement_lines") or [frame.get("line") or 0]
    return Statement(str(frame["file"]), int(lines[0]), str(frame.get("function") or ""))


def is_speculative(statement: Statement) -> bool:
    """The one definition of "in speculative code" (see the module docstring)."""
    in_file = any(statement.file.startswith(prefix) or f"/{prefix}" in statement.file for prefix in SPECULATIVE_FILES)
    return in_file or bool(SPECULATIVE_FUNCTION.search(statement.function))


@dataclass
class Seen:
    """One oracle statement: how often each part saw it, and the simplest configuration that raised it."""

    statement: Statement
    exception: str
    message: str
    example: Config
    parts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"statement": str(self.statement), "file": self.statement.file, "line": self.statement.line,
                "function": self.statement.function, "speculative": is_speculative(self.statement),
                "exception": self.exception, "message": self.message, "example": self.example.argv(),
                "parts": dict(sorted(self.parts.items()))}


def collect(parts: Mapping[str, Iterable[tuple[Config, Mapping[str, Any]]]],
            space: FlagSpace | None = None) -> dict[Statement, Seen]:
    """The failing statements of (configuration, record) pairs, per oracle part; the simplest example kept."""
    found: dict[Statement, Seen] = {}
    for part, pairs in parts.items():
        for config, record in pairs:
            statement = statement_of(record)
            if statement is None:
                continue
            exception = record.get("exception") or {}
            seen = found.get(statement)
            if seen is None:
                seen = found[statement] = Seen(statement, str(exception.get("type", "")),
                                               str(exception.get("message", "")), config)
            elif simplicity_key(config, space) < simplicity_key(seen.example, space):
                seen.example, seen.exception = config, str(exception.get("type", ""))
                seen.message = str(exception.get("message", ""))
            seen.parts[part] = seen.parts.get(part, 0) + 1
    return found


def score_against(stored: Mapping[str, Any], runs: Sequence[Path]) -> list[dict[str, Any]]:
    """Each run's statements against a stored result's oracle (its ``statements_list``), unchanged: plans
    compared side by side against one oracle, where a full run draws part of its oracle (the peel) from the
    plan it scores."""
    oracle = {Statement(s["file"], s["line"], s["function"]): s for s in stored["oracle"]["statements_list"]}
    speculative = {s for s in oracle if is_speculative(s)}
    out = []
    for run in runs:
        rows, _, cost = read_run(run)
        found = {s for _, r in rows if (s := statement_of(r)) is not None}
        out.append({"run": str(run), "all": len(found & set(oracle)), "speculative": len(found & speculative),
                    "oracle": len(oracle), "oracle_speculative": len(speculative), "evaluations": cost["evaluations"],
                    "seconds": cost["seconds"], "missed": [str(s) for s in sorted(set(oracle) - found)],
                    "found_outside_oracle": len(found - set(oracle))})
    return out


def score(oracle: Mapping[Statement, Seen], found: Iterable[Statement]) -> dict[str, Any]:
    """Recall of ``found`` against the oracle, over all statements and over those in speculative code."""
    hit = set(found)
    every = set(oracle)
    speculative = {s for s in every if is_speculative(s)}

    def recall(pool: set[Statement]) -> dict[str, Any]:
        got = len(pool & hit)
        return {"oracle": len(pool), "found": got, "recall": got / len(pool) if pool else 1.0}

    missed = sorted(every - hit, key=lambda s: (not is_speculative(s), s))
    return {"all": recall(every), "speculative": recall(speculative),
            "missed": [oracle[s].to_dict() for s in missed],
            "found_only_by_plan": sorted(str(s) for s in hit - every)}


def goals(scored: Mapping[str, Any], evaluations: int, baseline: int) -> dict[str, Any]:
    """Whether the issue's goals hold: speculative recall, overall recall, evaluations against today's."""
    met = {"speculative": scored["speculative"]["recall"] >= GOAL_SPECULATIVE,
           "all": scored["all"]["recall"] >= GOAL_ALL,
           "evaluations": evaluations <= GOAL_EVALUATIONS * baseline}
    return {**met, "met": all(met.values()), "baseline_evaluations": baseline}


def uniform_sample(space: FlagSpace, count: int, seed: int) -> list[Config]:
    """``count`` distinct configurations, each flag's value uniform over its domain (deterministic)."""
    rng = random.Random(seed)
    seen: set[Config] = set()
    out: list[Config] = []
    limit = min(count, space.grid_size())
    while len(out) < limit:
        config = space.config_of([rng.randrange(len(spec.values)) for spec in space.specs])
        if config not in seen:
            seen.add(config)
            out.append(config)
    return out


def core_grid(space: FlagSpace) -> list[Config]:
    """Every combination of the core flags' values, no other flag given."""
    specs = [s for s in space.specs if s.flag in space.core]
    out = []
    for values in itertools.product(*(s.values for s in specs)):
        out.append(Config.of({**space.fixed.as_dict(),
                              **{s.flag: v for s, v in zip(specs, values, strict=True) if v is not None}}))
    return out


def peel_oracle(rows: Sequence[tuple[Config, str]], minimal: Mapping[str, Config],
                evaluate: Callable[[list[Config]], Mapping[Config, Mapping[str, Any]]], *,
                depth: int = 8) -> list[tuple[Config, Mapping[str, Any]]]:
    """The peel experiment (:func:`bisect_spec.search.peel.peel`): every (configuration, record) it evaluated, each once."""
    records: dict[Config, Mapping[str, Any]] = {}

    def keys(configs: list[Config]) -> list[str | None]:
        records.update(evaluate(configs))
        return [key_of(records[c]) for c in configs]

    peel(rows, minimal, keys, depth=depth)
    return list(records.items())


def key_of(record: Mapping[str, Any]) -> str | None:
    """A record's outcome key as peeling reads it: None passed, a signature id, or ``status:`` otherwise."""
    if record.get("status") == "passed":
        return None
    signature = (record.get("signature") or {}).get("id")
    return str(signature) if record.get("status") == "failed" and signature else f"{record.get('status')}:"


# -- evaluation with the on-disk oracle cache ----------------------------------------------------------

def slim(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the oracle keeps of an outcome record: status, the raising frame, exception and signature."""
    frame = record.get("frame") or {}
    exception = record.get("exception") or {}
    signature = record.get("signature") or {}
    return {"status": record.get("status"),
            "frame": {k: frame.get(k) for k in ("file", "line", "function", "statement_lines", "statement")},
            "exception": {"type": exception.get("type"), "message": str(exception.get("message") or "")[:300]},
            "signature": {"id": signature.get("id")} if signature else None}


class Evaluator:
    """Records of configurations: the oracle cache, then the shared outcome cache, then the workers."""

    def __init__(self, session: Any, oracle_cache: Any, shared_cache: Any, target_key: str) -> None:
        self.session, self.oracle, self.shared, self.key = session, oracle_cache, shared_cache, target_key
        self.evaluated = 0
        self.seconds = 0.0

    def __call__(self, configs: list[Config], label: str = "") -> dict[Config, dict[str, Any]]:
        keys = {c.key(): c for c in configs}
        found = {keys[k]: r for k, r in self.oracle.get_many(self.key, list(keys)).items()}
        todo = [c for c in configs if c not in found]
        if todo and self.shared is not None:
            for k, record in self.shared.get_many(self.key, [c.key() for c in todo]).items():
                found[keys[k]] = slim(record)
                self.oracle.put(self.key, k, found[keys[k]])
            todo = [c for c in configs if c not in found]
        if todo:
            print(f"  {label}: {len(configs) - len(todo)} cached, evaluating {len(todo)}", file=sys.stderr)
            self.session.start()
            started = last = time.monotonic()
            for done, outcome in enumerate(self.session.evaluate_many(todo), 1):
                record = slim(outcome.to_dict())
                found[outcome.config] = record
                if outcome.status.value in ("passed", "failed", "usage"):
                    self.oracle.put(self.key, outcome.config.key(), record)
                if time.monotonic() - last > 30:
                    last = time.monotonic()
                    print(f"  {label}: {done}/{len(todo)} · {done / (last - started):.1f}/s", file=sys.stderr)
            self.evaluated += len(todo)
            self.seconds += time.monotonic() - started
            self.oracle.close_batch()
        return found


# -- the default plan ------------------------------------------------------------------------------------

def run_default(spec: Any, *, strategy: str, jobs: int, runs_dir: Path) -> tuple[Path, int, float]:
    """The default command, cold (no outcome cache), counting every worker evaluation."""
    from bisect_spec import api
    from bisect_spec.runtime.session import Session

    count = [0]
    original_one, original_many = Session.evaluate, Session.evaluate_many

    def evaluate(self: Session, config: Config) -> Any:
        count[0] += 1
        return original_one(self, config)

    def evaluate_many(self: Session, configs: Iterable[Config]) -> Any:
        for outcome in original_many(self, configs):
            count[0] += 1
            yield outcome

    Session.evaluate, Session.evaluate_many = evaluate, evaluate_many  # type: ignore[method-assign]
    started = time.monotonic()
    try:
        result = api.sweep(spec, strategy=strategy, jobs=jobs, runs_dir=runs_dir, use_cache=False, shrink=True)
    finally:
        Session.evaluate, Session.evaluate_many = original_one, original_many  # type: ignore[method-assign]
    seconds = time.monotonic() - started
    (result.run_path / "bench_recall_cost.json").write_text(json.dumps({"evaluations": count[0], "seconds": seconds}))
    return result.run_path, count[0], seconds


def read_run(run: Path) -> tuple[list[tuple[Config, dict[str, Any]]], dict[str, Config], dict[str, Any]]:
    """A default run's rows, the minimal reproducer of each signature it shrank, and its cost."""
    rows = [(Config.from_argv(r["config"]), r) for r in store.read_results(run, "run it again") or []]
    summary = json.loads((run / "summary.json").read_text())
    minimal = {s["id"]: Config.from_argv(s["shrink"]["minimal_argv"]) for s in summary["signatures"]
               if (s.get("shrink") or {}).get("same_signature") and s["shrink"].get("minimal_argv")}
    cost_file = run / "bench_recall_cost.json"
    cost = json.loads(cost_file.read_text()) if cost_file.is_file() else {"evaluations": None, "seconds": None}
    return rows, minimal, cost


def space_digest(space: FlagSpace) -> str:
    return hashlib.sha1(json.dumps(space.describe(), sort_keys=True).encode()).hexdigest()[:12]


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    plan = result["default_plan"]
    table = Table(title=f"Recall of the default plan · {result['command']}")
    for column in ("", "oracle", "found", "recall", "goal"):
        table.add_column(column, justify="right" if column else "left")
    for name, goal in (("speculative", GOAL_SPECULATIVE), ("all", GOAL_ALL)):
        row = plan["score"][name]
        table.add_row(f"failing statements: {name}", str(row["oracle"]), str(row["found"]),
                      f"{100 * row['recall']:.1f} %", f">= {100 * goal:.0f} %")
    for name in ("speculative", "all"):
        row = plan["score_without_peel"][name]
        table.add_row(f"  of sample + core grid only: {name}", str(row["oracle"]), str(row["found"]),
                      f"{100 * row['recall']:.1f} %", "")
    evaluations = plan["evaluations"]
    table.add_row("evaluations (with shrinking)", "", str(evaluations), "",
                  f"<= {GOAL_EVALUATIONS:.0f} x {plan['goals']['baseline_evaluations']}")
    seconds = plan["seconds"]
    table.add_row("wall time", "", f"{seconds:.0f} s" if seconds is not None else "?", "", "")
    console.print(table)
    oracle = Table(title=f"Oracle · space {result['space_digest']} ({result['space_flags']} flags)")
    for column in ("part", "configurations", "statements", "speculative"):
        oracle.add_column(column, justify="left" if column == "part" else "right")
    for part, info in result["oracle"]["parts"].items():
        oracle.add_row(part, str(info["configurations"]), str(info["statements"]), str(info["speculative"]))
    console.print(oracle)
    if plan["score"]["missed"]:
        missed = Table(title="Missed statements")
        for column in ("statement", "spec", "exception", "parts", "example oracle configuration"):
            missed.add_column(column, overflow="fold")
        for entry in plan["score"]["missed"]:
            missed.add_row(entry["statement"], "yes" if entry["speculative"] else "",
                           f"{entry['exception']}: {entry['message'][:80]}",
                           " ".join(f"{k}:{v}" for k, v in entry["parts"].items()), " ".join(entry["example"]))
        console.print(missed)
    console.print(f"goals met: {plan['goals']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", default="0.5.23")
    parser.add_argument("--model", default="kimi-k2.6")
    parser.add_argument("--draft", default="eagle3")
    parser.add_argument("--hardware", default="auto", help="As the default command: auto simulates rtx-pro-6000 x8 here.")
    parser.add_argument("--strategy", default="default", help="The plan scored (and whose space the oracle draws from).")
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument("--sample", type=int, default=20000, help="Uniform random configurations in the oracle.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the oracle's sample.")
    parser.add_argument("--peel-depth", type=int, default=8)
    parser.add_argument("--baseline-evaluations", type=int, default=None,
                        help="Today's evaluations of the default command (default: this run's own).")
    parser.add_argument("--default-run", type=Path, help="Score this run of the default command instead of running it.")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--oracle-cache", type=Path, help="Oracle outcomes (default: <bisect-spec home>/cache/oracle.sqlite).")
    parser.add_argument("--oracle-only", action="store_true", help="Fill the oracle cache (sample and core grid) and stop.")
    parser.add_argument("--default-only", action="store_true",
                        help="Run the default command (counting its evaluations), print its run directory and stop.")
    parser.add_argument("--out", type=Path, default=Path("bench_recall.json"))
    parser.add_argument("--score-against", type=Path, metavar="RESULT",
                        help="Score the runs given with --run against this earlier result's oracle, and stop.")
    parser.add_argument("--run", type=Path, action="append", default=[], help="A default-command run (with --score-against).")
    args = parser.parse_args()
    if args.score_against:
        missing = [str(path) for path in [args.score_against] if not path.is_file()] + [
            str(run / store.RESULTS) for run in args.run  # or an older run's results.jsonl
            if not (run / store.RESULTS).is_file() and not (run / store.PLAIN_RESULTS).is_file()]
        if missing or not args.run:
            parser.error(f"--score-against needs an earlier result and at least one --run RUN holding results; "
                         f"not found: {', '.join(missing) or 'no --run given'}")
        for line in score_against(json.loads(args.score_against.read_text()), args.run):
            print(f"{line['run']}: {line['all']}/{line['oracle']} statements, {line['speculative']}/"
                  f"{line['oracle_speculative']} in speculative code, {line['evaluations']} evaluations; "
                  f"{line['found_outside_oracle']} more outside the oracle; missed: {', '.join(line['missed'])}")
        return

    from bisect_spec import api
    from bisect_spec.runtime import environments, store
    from bisect_spec.runtime.session import Session
    from bisect_spec.search.plan import fitted_plan, load_strategy

    spec = api.TargetSpec(release=args.release, model=args.model, draft=args.draft, hardware=args.hardware)
    if args.default_only:
        run, evaluations, seconds = run_default(spec, strategy=args.strategy, jobs=args.jobs, runs_dir=args.runs_dir)
        print(f"{run}: {evaluations} evaluations in {seconds:.0f} s")
        return
    target = spec.resolve()
    strategy = load_strategy(args.strategy)
    session = Session(target, jobs=args.jobs, timeout=120)
    oracle_path = args.oracle_cache or environments.home() / "cache" / "oracle.sqlite"
    oracle_cache = OracleCache(oracle_path)
    shared_path = environments.home() / "cache" / "outcomes.sqlite"
    shared = store.OutcomeCache(shared_path) if shared_path.is_file() else None
    target_key = store.OutcomeCache.target_key(target_record(target))
    evaluate = Evaluator(session, oracle_cache, shared, target_key)
    try:
        space = strategy.space(session.flags())
        _, fitted, _ = fitted_plan(space, strategy, model_config=target.model.config, hardware=target.hardware.record)
        digest = space_digest(fitted)
        print(f"space {digest}: {len(fitted.specs)} flags; oracle cache {oracle_path}", file=sys.stderr)
        sample = uniform_sample(fitted, args.sample, args.seed)
        grid = core_grid(fitted)
        # the grid first (small, and reused when the space changes), then the sample in chunks (resumable)
        grid_records = evaluate(grid, "core grid")
        sample_records: dict[Config, dict[str, Any]] = {}
        for start in range(0, len(sample), 1000):
            sample_records.update(evaluate(sample[start:start + 1000], f"sample {start}-{start + 1000}"))
        if args.oracle_only:
            print(f"oracle filled: {len(grid)} grid + {len(sample)} sample configurations "
                  f"({evaluate.evaluated} evaluated now, {evaluate.seconds:.0f} s)", file=sys.stderr)
            return
        if args.default_run:
            run = args.default_run
            rows, minimal, cost = read_run(run)
            evaluations, seconds = cost["evaluations"], cost["seconds"]
        else:
            session.close()
            run, evaluations, seconds = run_default(spec, strategy=args.strategy, jobs=args.jobs, runs_dir=args.runs_dir)
            rows, minimal, _ = read_run(run)
        failing = [(c, str(r["signature"]["id"])) for c, r in rows if r.get("status") == "failed" and r.get("signature")]
        peeled = peel_oracle(failing, minimal, lambda cs: evaluate(cs, "peel"), depth=args.peel_depth)
    finally:
        session.close()
        oracle_cache.close()
        if shared is not None:
            shared.close()

    oracle = collect({"peel": peeled, "sample": list(sample_records.items()), "core grid": list(grid_records.items())},
                     fitted)
    plan_statements = {s for _, r in rows if (s := statement_of(r)) is not None}
    scored = score(oracle, plan_statements)
    # the peel starts from the plan's own rows; the sample and the grid owe nothing to the plan
    independent = score({s: seen for s, seen in oracle.items() if set(seen.parts) - {"peel"}}, plan_statements)
    baseline = args.baseline_evaluations or evaluations or 0
    parts = {}
    for part, configs in (("peel", [c for c, _ in peeled]), ("sample", sample), ("core grid", grid)):
        statements = {s for s, seen in oracle.items() if part in seen.parts}
        parts[part] = {"configurations": len(configs), "statements": len(statements),
                       "speculative": sum(is_speculative(s) for s in statements)}
    result = {
        "schema": "bisect-spec/bench-recall/1",
        "command": f"bisect-spec --sglang {target.release} --model {args.model} --draft {args.draft}"
                   + (f" --strategy {args.strategy}" if args.strategy != "default" else ""),
        "target": target.describe(), "space_digest": digest, "space_flags": len(fitted.specs), "seed": args.seed,
        "oracle": {"parts": parts, "statements": len(oracle), "speculative": sum(is_speculative(s) for s in oracle),
                   "evaluated_now": evaluate.evaluated,
                   "statements_list": [seen.to_dict() for _, seen in sorted(oracle.items())]},
        "default_plan": {"run": str(run), "evaluations": evaluations, "seconds": seconds, "rows": len(rows),
                         "statements": len(plan_statements), "score": scored,
                         "score_without_peel": {k: independent[k] for k in ("all", "speculative")},
                         "goals": goals(scored, evaluations or 0, baseline)},
    }
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print_table(result)
    print(f"written {args.out}")


class OracleCache:
    """The oracle's outcomes on disk: the run store's :class:`~bisect_spec.runtime.store.OutcomeCache` in its own file,
    committed after every batch so that a killed run loses at most one batch."""

    def __init__(self, path: Path) -> None:
        from bisect_spec.runtime.store import OutcomeCache

        self.cache = OutcomeCache(path)

    def get_many(self, target: str, configs: list[str]) -> dict[str, dict[str, Any]]:
        return self.cache.get_many(target, configs)

    def put(self, target: str, config: str, record: dict[str, Any]) -> None:
        self.cache.put(target, config, record)

    def close_batch(self) -> None:
        self.cache._db.commit()

    def close(self) -> None:
        self.cache.close()


if __name__ == "__main__":
    main()

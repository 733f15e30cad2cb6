#!/usr/bin/env python
"""Fidelity benchmark: bisect-spec's in-process verdict against SGLang's real ``launch_server``.

The oracle is code nobody here wrote: SGLang's own ``python -m sglang.launch_server``,
run on this CPU machine under the same simulated box as the in-process verdict, stopped
when it fails or when it reaches the first step that needs a GPU kernel, weights or the
network (``bisect_spec/inside/launch_oracle.py`` says exactly where, per process).

* A PASSED configuration agrees when the launch reaches that point in every process
  (launcher, schedulers, detokenizer).
* A FAILED configuration agrees when the launch fails with the same exception type and
  the same failing statement (normalised as in signatures; the statement is read from the
  traceback by the same code as in-process, ``statements.failure_from_block``).
* Anything else is a disagreement and is listed: flags, in-process verdict, launch verdict,
  where the launch stopped or failed (process, file, function, statement), and its log.

Method: for each release (default 0.5.9, 0.5.12, 0.5.23) and model (kimi-k2.6 and
llama-3.1-8b, EAGLE3 draft, default hardware rtx-pro-6000 x8) sweeps (``api.sweep``,
strategies ``default`` and ``eagle-core``, outcome cache off so every verdict comes
from this checkout's evaluator) give the in-process verdicts. ``--per-release N``
passing and N failing configurations are sampled per release, split between the models;
passing ones round-robin over the sweeps (the wide ``default`` sweep passes rarely),
failing ones over the failure signatures so every signature is represented. Each is
launched.

What differs from a plain ``python -m sglang.launch_server`` (details and reasons in the
``bisect_spec/inside/launch_oracle.py`` docstring), and why the verdict does not change:

1. One *zygote* per (release, model) prepares the process as ``launch_main.py`` does for
   ``bisect-spec launch`` (torchvision shim, SGLang imported honestly on the CPU, the box
   simulated, later imports simulated-first), imports the launch path once, then forks
   one child per configuration. The child runs ``sglang.launch_server`` as ``__main__``
   (``runpy``, what ``python -m`` does); only the import cost is shared. Every child
   forks from the same untouched zygote, so no launch sees another's state.
2. SGLang's subprocesses (schedulers, detokenizer, DP controller) are forked instead of
   spawned, so they run under the same simulated box (a spawned child would import
   SGLang again without it) and start in milliseconds. They run the same target with the
   same arguments; signal handlers are reset as spawn would; SGLang re-publishes its
   runtime context in each scheduler, so inherited launcher state is replaced.
3. The model directory is a launch-only copy of the profile (same name) with a tiny
   tokenizer built by the release's ``tokenizers`` library, and for a multimodal config
   a stand-in processor, both written at bench time: the profiles ship none, and the
   launcher loads them before its first GPU step. Resolution reads only ``config.json``.
4. A launch-path module that failed to import in the zygote (a CUDA-only dependency
   missing here) fails again at once with the same error instead of after seconds.

Usage::

    python scripts/bench_fidelity.py --per-release 70 --out fidelity-out    # 420 launches
    python scripts/bench_fidelity.py --per-release 5 --out /tmp/fid          # a quick look

Writes ``OUT/fidelity.json`` (schema ``bisect-spec/fidelity/1``), ``OUT/fidelity.md``,
the sweeps under ``OUT/runs/`` and every launch's logs under ``OUT/launches/``. Exit 0
when every configuration agrees, 3 when some disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from bisect_spec.api import TargetSpec, sweep
from bisect_spec.inside import launch_oracle
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.model.signature import normalise_statement, signature_of
from bisect_spec.runtime import environments, processes
from bisect_spec.runtime.session import Session, Target

SCHEMA = "bisect-spec/fidelity/1"
ORACLE_SCRIPT = Path(launch_oracle.__file__)


class Zygote:
    """One ``launch_oracle.py`` process for one release environment and box."""

    def __init__(self, target: Target, *, log_path: Path, preimport: bool = True) -> None:
        self.target = target
        self.environment = environments.get(target.release)
        self.log_path = log_path
        self.preimport = preimport
        self.process: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}
        self._log: IO[str] | None = None

    def start(self, timeout: float = 300.0) -> dict[str, Any]:
        spec = self.environment.worker_spec(hardware=self.target.hardware.record, gpus=self.target.hardware.gpus)
        config = {"torchvision_shim": self.environment.torchvision_shim, "hardware": self.target.hardware.record,
                  "gpus": self.target.hardware.gpus, "preimport": self.preimport}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "a")  # noqa: SIM115 - lives as long as the zygote
        self.process = subprocess.Popen([self.environment.python, "-u", str(ORACLE_SCRIPT), json.dumps(config)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                        env=spec.environment(), start_new_session=True)
        hello = self._reply(timeout)
        if not hello.get("ok"):
            self.close()
            raise RuntimeError(f"the launch zygote for {self.target.release} did not start: {hello.get('error')} "
                               f"(see {self.log_path})")
        self.info = hello["info"]
        return self.info

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(payload) + "\n")
        self.process.stdin.flush()
        return self._reply(timeout)

    def _reply(self, timeout: float) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            code = self.process.poll()
            self.close()
            raise RuntimeError(f"the launch zygote gave no answer ({processes.describe_exit(code)}); see {self.log_path}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                try:
                    assert self.process.stdin is not None
                    self.process.stdin.write('{"op": "exit"}\n')
                    self.process.stdin.flush()
                    self.process.wait(timeout=10)
                except (OSError, subprocess.TimeoutExpired):
                    processes.kill_tree(self.process.pid)
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    pipe.close()
            self.process.wait()
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None


def sample(pools: Sequence[Sequence[Outcome]], count_passing: int, count_failing: int,
           seed: int) -> tuple[list[Outcome], list[Outcome]]:
    """Passing and failing outcomes of one or more sweeps, drawn with ``seed``.

    Passing ones round-robin over the sweeps (a wide sweep passes rarely, a narrow one
    often), failing ones over the failure signatures of all of them, so every signature
    is represented before any is repeated. A configuration is drawn at most once.
    """
    rng = random.Random(seed)
    seen: set[str] = set()

    def round_robin(groups: dict[str, list[Outcome]], count: int) -> list[Outcome]:
        for members in groups.values():
            members.sort(key=lambda o: o.config.key())
            rng.shuffle(members)
        chosen: list[Outcome] = []
        while len(chosen) < count and any(groups.values()):
            for key in sorted(groups):
                while groups[key] and len(chosen) < count:
                    candidate = groups[key].pop()
                    if candidate.config.key() not in seen:
                        seen.add(candidate.config.key())
                        chosen.append(candidate)
                        break
        return chosen

    passing = {str(index): [o for o in pool if o.status is Status.PASSED] for index, pool in enumerate(pools)}
    by_signature: dict[str, list[Outcome]] = {}
    for pool in pools:
        for outcome in pool:
            if outcome.status is Status.FAILED and outcome.signature is not None:
                by_signature.setdefault(outcome.signature.id, []).append(outcome)
    return round_robin(passing, count_passing), round_robin(by_signature, count_failing)


def launch_argv(outcome: Outcome, target: Target, launch_model: Path) -> list[str]:
    """The in-process argv, with the launch-only copy of the model profile in place of the profile.

    Nothing else changes: not even ``--port`` (0.5.12 derives ``SGLANG_GRPC_PORT`` from
    it and rejects a port above 35535). Launches run one at a time and never reach the
    point where the server binds its port.
    """
    return [str(launch_model) if token == str(target.model.path) else token for token in outcome.record["argv"]]


def device_notes(processes: dict[str, Any], gpus: int) -> list[str]:
    """Stops that name a device the simulated box does not have (a real box fails right there)."""
    notes = []
    for proc in processes.values():
        for detail in proc.get("details", []):
            match = re.fullmatch(r"(set_device|init_torch_distributed|load_model)\((\d+),?\)", detail)
            if match and int(match[2]) >= gpus:
                notes.append(f"{match[1]} on GPU {match[2]} of a box of {gpus} GPUs")
    return sorted(set(notes))


def headline(outcome: Outcome) -> str:
    if outcome.status is Status.PASSED:
        return "PASSED"
    frame = outcome.frame or {}
    exception = outcome.exception or {}
    return (f"FAILED {exception.get('type', '?')} ({frame.get('file', '?')}:{frame.get('line', '?')} in "
            f"{frame.get('function', '?')}): {frame.get('statement', '')}")


def launch_headline(result: dict[str, Any]) -> str:
    if result["verdict"] == "reached":
        return f"reached {result['stop']}"
    frame = result.get("frame") or {}
    where = f" ({frame.get('file', '?')}:{frame.get('line', '?')} in {frame.get('function', '?')})" if frame else ""
    statement = f": {frame.get('statement')}" if frame.get("statement") else ""
    return f"{result['verdict']} in {result.get('process') or '?'}{where} {result.get('error', '')}{statement}".strip()


def sweep_cell(spec: TargetSpec, *, count_passing: int, count_failing: int, out: Path, seed: int,
               strategies: Sequence[str], random_budget: int | None) -> dict[str, Any]:
    """Sweep one (release, model) with each strategy and sample from the outcomes."""
    started = time.perf_counter()
    sweeps = [sweep(spec, strategy=strategy, jobs=1, runs_dir=out / "runs", seed=seed, random_budget=random_budget,
                    use_cache=False) for strategy in strategies]
    statuses: dict[str, dict[str, int]] = {}
    for strategy, swept in zip(strategies, sweeps, strict=True):
        for outcome in swept.outcomes:
            counts = statuses.setdefault(strategy, {})
            counts[outcome.status.value] = counts.get(outcome.status.value, 0) + 1
    passing, failing = sample([swept.outcomes for swept in sweeps], count_passing, count_failing, seed)
    return {"target": sweeps[0].target, "passing": passing, "failing": failing, "statuses": statuses,
            "runs": [swept.run_id for swept in sweeps], "sweep_seconds": round(time.perf_counter() - started, 1),
            "strategy_of": {o.config.key(): strategy for strategy, swept in zip(strategies, sweeps, strict=True)
                            for o in swept.outcomes}}


def launch_cell(cell: dict[str, Any], zygote: Zygote, *, out: Path, deadline: float, progress: bool) -> list[dict[str, Any]]:
    """Launch every sampled configuration of a cell through the release's zygote; one row each."""
    target: Target = cell["target"]
    cell_dir = out / "launches" / target.release / target.model.name
    launch_model = environments.home() / "profiles" / "launch" / target.release / "models" / target.model.name
    zygote.request({"op": "tokenizer", "dir": str(launch_model), "config": target.model.config}, 120)
    rows = []
    chosen: list[Outcome] = [*cell["passing"], *cell["failing"]]
    for number, outcome in enumerate(chosen, 1):
        directory = cell_dir / f"{number:03d}"
        argv = launch_argv(outcome, target, launch_model)
        try:
            ended = zygote.request({"op": "launch", "argv": argv, "dir": str(directory), "deadline": deadline},
                                   deadline + 60)
        except RuntimeError as exc:  # the zygote died: a row of its own, and a fresh zygote
            ended = {"ended": "zygote-died", "returncode": None, "seconds": 0.0, "error": str(exc)}
            zygote.start()
        result = launch_oracle.verdict(launch_oracle.read_logs(directory), ended=ended["ended"],
                                       returncode=ended.get("returncode"))
        in_process = outcome.to_dict()
        compared = agreement(in_process, result)
        launched_signature = signature_of({"status": "failed", "exception": result["exception"], "frame": result["frame"]}) \
            if result["verdict"] == "failed" else None
        rows.append({
            "release": target.release, "model": target.model.name, "config": outcome.config.argv(),
            "strategy": cell["strategy_of"].get(outcome.config.key()),
            "launch_argv": argv, **compared,
            "in_process_outcome": in_process,
            "in_process": {"status": outcome.status.value, "headline": headline(outcome),
                           "signature": outcome.signature.to_dict() if outcome.signature else None,
                           "exception": in_process.get("exception"),
                           "frame": {k: outcome.frame.get(k) for k in ("file", "line", "function", "statement")}},
            "launch": {"verdict": result["verdict"], "headline": launch_headline(result), "stop": result["stop"],
                       "process": result["process"], "exception": result["exception"],
                       "frame": {k: result["frame"].get(k) for k in ("file", "line", "function", "statement")},
                       "same_signature": bool(launched_signature and outcome.signature
                                              and launched_signature.id == outcome.signature.id),
                       "seconds": ended.get("seconds"), "ended": ended["ended"], "returncode": ended.get("returncode"),
                       "processes": result["processes"], "log_dir": str(directory),
                       "notes": device_notes(result["processes"], target.hardware.gpus)},
        })
        if progress:
            mark = "ok " if compared["agree"] else "DIS"
            print(f"  [{target.release} {target.model.name} {number}/{len(chosen)}] {mark} "
                  f"{ended.get('seconds', 0):5.1f}s {headline(outcome)[:60]} -> {launch_headline(result)[:70]}",
                  file=sys.stderr)
    return rows


def replayed_cell(spec: TargetSpec, rows: Sequence[dict[str, Any]], count: int) -> dict[str, Any]:
    """A cell made of an earlier bench's rows (``--replay``): the same configurations, evaluated in-process
    again by this checkout's evaluator (its verdict may have changed since), the first ``count`` passing and
    ``count`` failing ones by the earlier verdict."""
    earlier = [Outcome.from_dict(row["in_process_outcome"]) for row in rows]
    earlier = ([o for o in earlier if o.status is Status.PASSED][:count]
               + [o for o in earlier if o.status is not Status.PASSED][:count])
    target = spec.resolve()
    with Session(target, jobs=1, timeout=120) as session:
        fresh = {o.config.key(): o for o in session.evaluate_many([o.config for o in earlier])}
    outcomes = [fresh.get(o.config.key(), o) for o in earlier]
    # a verdict is PASSED or FAILED; a crash (a tool fault, a worker that died) is no verdict to launch against
    neither = [o for o in outcomes if o.status not in (Status.PASSED, Status.FAILED)]
    for outcome in neither:
        print(f"  not compared ({outcome.status}: {outcome.record.get('crash', '')[:120]}): {outcome.config}",
              file=sys.stderr)
    return {"target": target, "passing": [o for o in outcomes if o.status is Status.PASSED][:count],
            "failing": [o for o in outcomes if o.status is Status.FAILED][:count], "statuses": {}, "runs": [],
            "sweep_seconds": 0.0,
            "strategy_of": {o.config.key(): row.get("strategy") for o, row in zip(outcomes, rows, strict=True)}}


def run_release(release: str, args: argparse.Namespace) -> dict[str, Any]:
    """Sweep and sample every model of one release, then launch them all through one zygote."""
    cells = []
    counts = split(args.per_release, len(args.models))
    replay = json.loads(args.replay.read_text())["rows"] if args.replay else None
    for model, count in zip(args.models, counts, strict=True):
        spec = TargetSpec(release=release, model=model, draft=args.draft, hardware=args.hardware, gpus=args.gpus)
        if replay is not None:
            rows = [r for r in replay if r["release"] == release and r["model"] == model]
            print(f"{release} {model}: replaying {len(rows)} configurations from {args.replay}", file=sys.stderr)
            cells.append(replayed_cell(spec, rows, count))
            continue
        print(f"{release} {model}: sweeping ({', '.join(args.strategies)})", file=sys.stderr)
        cells.append(sweep_cell(spec, count_passing=count, count_failing=count, out=args.out, seed=args.seed,
                                strategies=args.strategies, random_budget=args.random_budget))
    zygote = Zygote(cells[0]["target"], log_path=args.out / "launches" / release / "zygote.log",
                    preimport=not args.no_preimport)
    started = time.perf_counter()
    info = zygote.start()
    zygote_seconds = time.perf_counter() - started
    summaries = []
    try:
        for cell in cells:
            target = cell["target"]
            print(f"{release} {target.model.name}: launching {len(cell['passing'])} passing and "
                  f"{len(cell['failing'])} failing", file=sys.stderr)
            started = time.perf_counter()
            cell["rows"] = launch_cell(cell, zygote, out=args.out, deadline=args.deadline, progress=not args.quiet)
            summaries.append({"release": release, "model": target.model.name,
                              "draft": target.draft.name if target.draft else None, "hardware": target.hardware.label,
                              "runs": cell["runs"], "statuses": cell["statuses"],
                              "sampled": {"passed": len(cell["passing"]), "failed": len(cell["failing"])},
                              "seconds": {"sweeps": cell["sweep_seconds"],
                                          "launches": round(time.perf_counter() - started, 1)}})
    finally:
        zygote.close()
    return {"release": release, "zygote": info, "zygote_start_seconds": round(zygote_seconds, 1), "cells": summaries,
            "rows": [row for cell in cells for row in cell.get("rows", [])]}


def agreement(in_process: Mapping[str, Any], oracle: Mapping[str, Any]) -> dict[str, Any]:
    """Does an in-process outcome (``Outcome.to_dict()``) agree with the oracle's verdict?

    PASSED agrees with ``reached``. FAILED agrees with ``failed`` when the exception type
    and the normalised failing statement are the same (the location may differ: the
    launch may raise it from another frame of the same statement). Anything else, a
    timed-out launch included, is a disagreement.
    """
    status = in_process.get("status")
    launched = oracle.get("verdict")
    if status == "passed":
        agree = launched == "reached"
        kind = "agree" if agree else f"passed-but-launch-{launched}"
        return {"agree": agree, "kind": kind}
    if launched != "failed":
        return {"agree": False, "kind": f"failed-but-launch-{launched}"}
    mine = (str((in_process.get("exception") or {}).get("type", "")),
            normalise_statement(str((in_process.get("frame") or {}).get("statement", ""))))
    theirs = (str((oracle.get("exception") or {}).get("type", "")),
              normalise_statement(str((oracle.get("frame") or {}).get("statement", ""))))
    if mine == theirs:
        return {"agree": True, "kind": "agree"}
    return {"agree": False, "kind": "different-failure" if mine[0] == theirs[0] else "different-exception"}


def split(count: int, parts: int) -> list[int]:
    return [count // parts + (1 if index < count % parts else 0) for index in range(parts)]


def tables(result: dict[str, Any]) -> str:
    """The per-release agreement table and every disagreement, as Markdown."""
    lines = ["| release | PASSED agree | FAILED agree | all agree |", "|---|---|---|---|"]
    for release, figures in result["per_release"].items():
        lines.append(f"| {release} | {figures['passed_agree']}/{figures['passed']} | {figures['failed_agree']}/"
                     f"{figures['failed']} | {figures['agree']}/{figures['total']} ({figures['percent']:.1f} %) |")
    total = result["total"]
    lines.append(f"| all | {total['passed_agree']}/{total['passed']} | {total['failed_agree']}/{total['failed']} | "
                 f"{total['agree']}/{total['total']} ({total['percent']:.1f} %) |")
    disagreements = result["disagreements"]
    lines += ["", f"{len(disagreements)} disagreement(s)"]
    for row in disagreements:
        lines += ["", f"* {row['release']} {row['model']} `{' '.join(row['config'])}`",
                  f"  - in-process: {row['in_process']['headline']}",
                  f"  - launch:     {row['launch']['headline']}",
                  f"  - kind: {row['kind']}; log: {row['launch']['log_dir']}"]
    return "\n".join(lines) + "\n"


def figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    passed = [r for r in rows if r["in_process"]["status"] == "passed"]
    failed = [r for r in rows if r["in_process"]["status"] == "failed"]
    agree = sum(r["agree"] for r in rows)
    return {"passed": len(passed), "passed_agree": sum(r["agree"] for r in passed), "failed": len(failed),
            "failed_agree": sum(r["agree"] for r in failed), "total": len(rows), "agree": agree,
            "percent": 100.0 * agree / len(rows) if rows else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="+", default=["0.5.9", "0.5.12", "0.5.23"])
    parser.add_argument("--models", nargs="+", default=["kimi-k2.6", "llama-3.1-8b"])
    parser.add_argument("--draft", default="eagle3")
    parser.add_argument("--hardware", default="rtx-pro-6000")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-release", type=int, default=70,
                        help="passing and failing configurations launched per release (each; split between the models); "
                             "with --replay, at most that many of the earlier run's")
    parser.add_argument("--strategies", nargs="+", default=["default", "eagle-core"],
                        help="sweep strategies whose outcomes are sampled (a wide one fails mostly, eagle-core passes often)")
    parser.add_argument("--random-budget", type=int, default=None, help="the sweeps' search budget (default: the strategy's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=90.0, help="seconds before a launch counts as timed out")
    parser.add_argument("--no-preimport", action="store_true",
                        help="each launch imports the launch path itself (slower; checks that preimporting changes nothing)")
    parser.add_argument("--replay", type=Path, default=None,
                        help="launch the configurations of an earlier fidelity.json again (no sweeps; its in-process verdicts)")
    parser.add_argument("--out", type=Path, required=True, help="directory for fidelity.json, fidelity.md, runs and logs")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    releases = [run_release(release, args) for release in args.releases]
    rows = [row for release in releases for row in release["rows"]]
    result = {"schema": SCHEMA, "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
              "seconds": round(time.perf_counter() - started, 1),
              "per_release": {release: figures([r for r in rows if r["release"] == release]) for release in args.releases},
              "total": figures(rows), "disagreements": [r for r in rows if not r["agree"]],
              "releases": [{k: v for k, v in release.items() if k != "rows"} for release in releases], "rows": rows}
    (args.out / "fidelity.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    markdown = tables(result)
    (args.out / "fidelity.md").write_text(markdown)
    print(markdown)
    print(f"{len(rows)} launches in {result['seconds']:.0f} s; {args.out / 'fidelity.json'}", file=sys.stderr)
    return 0 if not result["disagreements"] else 3


if __name__ == "__main__":
    sys.exit(main())

"""``bisect-spec diff OLD NEW``: what a change to SGLang does to the configurations people run.

Design notes:

- **One plan on both sides.** Each side is swept with the strategy (a stored, resumable run per side:
  covering array and whatever later phases the strategy has), with the user's ``-- FLAGS`` fixed in
  every row. Then every configuration either side evaluated is evaluated on the other, so the
  comparison holds the same configurations on both sides, the failures of each included. Outcomes
  come from the cross-run cache where they are known, so a diff stopped half-way, run again, repeats
  nothing already evaluated.
- **Compared by** :mod:`bisect_spec.reduce.verdict_changes` (pure): failures matched by cross-release
  key, so a statement that moved is *moved*, not fixed-plus-new.
- **Reproducers.** Each new, wider and fixed failure is shrunk (1-minimal, same signature) on the side
  that raises it, and the minimal configuration is evaluated again on the other side: the report says
  what that side does with exactly those flags.
- **The gate.** New failures, wider ones and changed defaults fail the diff (``gating``; the CLI exits
  3), unless ``allow`` names them (a signature id, a cross-release key, or a resolved field).

``diff.json`` (``bisect-spec/diff/1``) and ``diff.md`` (fit for a pull-request comment) are written to
``<runs_dir>/diff-<id>/``; the two sweeps are ordinary runs under ``<runs_dir>``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.errors import ArchitectureUnknown, BisectSpecError, Interrupted, ReleaseError, StoreError
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.syntax import parse_module
from bisect_spec.model.verdict_kinds import GATED
from bisect_spec.reduce.verdict_changes import Changes, Group, compare, report_order
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import Session
from bisect_spec.runtime.target_spec import TargetSpec

SCHEMA = "bisect-spec/diff/1"
#: diffs shrink at most this many groups (the gated ones first); the rest keep their simplest configuration
SHRINK_LIMIT = 12
ProgressFn = Callable[[str], None]
SweepProgressFn = Callable[[str], Callable[[int, int, int, str], None] | None]


@dataclass
class DiffReport:
    """A finished diff: both sides, the changes, what the gate says, where it is stored."""

    old: str
    new: str
    target: dict[str, Any]
    strategy: str
    flags: list[str]
    changes: Changes
    allow: list[str]
    runs: dict[str, str]
    evaluated: dict[str, int]
    path: Path | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def gating(self) -> list[Group]:
        return self.changes.gating(self.allow)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "old": self.old, "new": self.new, "target": self.target, "strategy": self.strategy,
                "flags": self.flags, "allow": self.allow, "runs": self.runs, "evaluated": self.evaluated,
                "compared": self.changes.compared, "not_compared": self.changes.not_compared,
                "counts": self.changes.counts(), "gating": [g.key for g in self.gating],
                "groups": [g.to_dict() for g in self.changes.groups], "notes": self.notes,
                "seconds": round(self.seconds, 1), **({"path": str(self.path)} if self.path else {})}


def with_fixed_flags(strategy: Any, flags: Config) -> Any:
    """The strategy with ``flags`` in every row, as given (not swept)."""
    return dataclasses.replace(strategy, fixed=tuple(flags.argv())) if len(flags) else strategy


def _side_spec(spec: TargetSpec, release: str) -> TargetSpec:
    return dataclasses.replace(spec, release=release)


def diff(old: str, new: str, spec: TargetSpec | None = None, *, strategy: str = "quick", flags: Sequence[str] = (),
         jobs: int | None = None, runs_dir: Path = Path("runs"), timeout: float = 60.0, use_cache: bool = True,
         allow: Iterable[str] = (), shrink_evaluations: int = 300, shrink_seconds: float = 60.0,
         progress: ProgressFn | None = None, sweep_progress: SweepProgressFn | None = None) -> DiffReport:
    """Evaluate one plan on ``old`` and ``new`` and report every change of verdict, signature, place,
    message or resolved value (module notes).

    :param old: / :param new: releases (``0.5.11``), ``git:CLONE@REV`` or ``path:DIR``.
    :param flags: SGLang flags every configuration has (``--tp 8``); the configuration they make alone
        is compared too.
    :param allow: signature ids, cross-release keys or resolved fields whose change the gate accepts.
    :raises UsageError: bad strategy or flags. :raises ReleaseError: a side not installed.
    :raises ArchitectureUnknown: the model is unknown to a side.
    """
    from bisect_spec.model.flags import parse_command
    from bisect_spec.reduce.shrink import Budget
    from bisect_spec.runtime import store
    from bisect_spec.runtime.session import target_record
    from bisect_spec.runtime.store import DURABLE
    from bisect_spec.search.plan import load_strategy
    from bisect_spec.workflows.shrink import shrink_in_session
    from bisect_spec.workflows.sweep import sweep

    started = time.time()
    spec = spec or TargetSpec()
    say = progress or (lambda _text: None)
    base = parse_command(list(flags)).config if flags else Config()
    chosen = with_fixed_flags(load_strategy(strategy), base)
    sides = {"old": _side_spec(spec, old), "new": _side_spec(spec, new)}
    outcomes: dict[str, dict[str, Outcome]] = {}
    runs: dict[str, str] = {}
    targets = {}
    shapes: dict[str, Config] = {}  # each side's deployment shape: what its rows have where they set none of it
    shown = base  # the rows hold the flags as typed (their keys match); the report names them canonically
    if len(base):  # the flags typed after -- must be flags of both sides (one line naming the one that is not)
        for side_spec in sides.values():
            with Session(side_spec.resolve(), jobs=1, timeout=timeout) as session:
                shown = session.canonical(base)
    for side, side_spec in sides.items():
        say(f"sweeping the {side} side ({side_spec.release}) with strategy {strategy}")
        try:
            result = sweep(side_spec, strategy=chosen, jobs=jobs, runs_dir=runs_dir, timeout=timeout,
                           use_cache=use_cache, progress=sweep_progress(side) if sweep_progress else None,
                           algorithms="all")
        except ArchitectureUnknown as exc:  # its fix names --sglang, which diff takes as OLD and NEW
            raise ReleaseError(str(exc).replace("pick a newer --sglang or another --model", f"make {side.upper()} a "
                                                "release that knows it, or pick another --model")) from None
        except Interrupted as exc:  # the sweep's own words name its --resume; a diff goes on by running again
            kept = str(exc).split(";", 1)[0]
            raise Interrupted(f"{kept}; run the same diff again: what was evaluated is reused"
                              + ("" if use_cache else " (without --no-cache)")) from None
        outcomes[side] = {o.config.key(): o for o in result.outcomes}
        shapes[side] = Config.from_argv(list((result.summary.get("shape") or {}).get("argv") or []))
        runs[side] = str(result.run_path)
        targets[side] = result.target
    every = {key: o.config for side in outcomes.values() for key, o in side.items()}
    if len(base):
        every.setdefault(base.key(), base)
    cache = store.OutcomeCache(environments.home() / "cache" / "outcomes.sqlite") if use_cache else None
    sessions: dict[str, Session] = {}
    notes: list[str] = []
    try:
        for side, target in targets.items():
            session = Session(target, jobs=jobs, timeout=timeout)
            sessions[side] = session
            todo = [c for k, c in every.items() if k not in outcomes[side]]
            target_key = store.OutcomeCache.target_key(target_record(target))
            if cache is not None and todo:
                for key, data in cache.get_many(target_key, [c.key() for c in todo]).items():
                    outcomes[side][key] = Outcome.from_dict(data)
                todo = [c for c in todo if c.key() not in outcomes[side]]
            if todo:
                say(f"evaluating {len(todo)} configuration{'s' if len(todo) != 1 else ''} of the other side on the "
                    f"{side} side ({target.release})")
                session.start()
                for outcome in session.evaluate_many(todo):
                    outcomes[side][outcome.config.key()] = outcome
                    if cache is not None and outcome.status.value in DURABLE:
                        cache.put(target_key, outcome.config.key(), outcome.to_dict())
        changes = compare(outcomes["old"], outcomes["new"])
        if not changes.compared:  # a gate that compared nothing must not pass
            reasons = "; ".join(f"{n}: {why}" for why, n in sorted(changes.not_compared.items(), key=lambda i: -i[1])[:3])
            raise BisectSpecError(f"no configuration could be compared on both sides ({reasons}): check the flags "
                                  "after -- and the strategy")
        allowed = list(allow)
        wanted = [g for g in changes.groups if g.kind in ("new", "wider", "fixed")]  # failures: a reproducer each
        wanted.sort(key=lambda g: (g.kind not in GATED, bool(g.names & set(allowed))))
        for number, group in enumerate(wanted):
            if number >= SHRINK_LIMIT:
                group.reproducer = {"note": f"not shrunk: a diff shrinks its first {SHRINK_LIMIT} groups"}
                continue
            here, there = ("old", "new") if group.kind == "fixed" else ("new", "old")
            failing = group.failing
            assert failing is not None
            say(f"shrinking {group.kind} failure {failing.signature.id if failing.signature else '?'} on the {here} side")
            sessions[here].start()
            report = shrink_in_session(sessions[here], group.example, budget=Budget(shrink_evaluations, shrink_seconds),
                                       fix=False, first=failing, memo=dict(outcomes[here]))
            minimal = report.result.minimal if report.result.status == "minimal" else group.example
            sessions[there].start()
            # at the other side's deployment shape, as its rows were: a reproducer that dropped the width (its
            # failure is found before the weights) must not run out of memory there instead
            other = sessions[there].evaluate(minimal.with_defaults(shapes.get(there, Config())))
            group.reproducer = {"argv": minimal.argv(), "status": report.result.status,
                                "evaluations": report.result.evaluations,
                                "here": here, "there": there, "there_status": other.status.value,
                                "there_headline": other.headline, "there_reached": other.reached}
            group.detail["there_code"] = code_elsewhere(sessions[there], failing)
            if (other.signature is not None and failing.signature is not None and group.kind in ("new", "fixed")
                    and other.signature.cross_release_key == failing.signature.cross_release_key):
                # the minimal reproducer fails the same way on the other side: the failure is there too, masked
                # in the configurations compared by another one: neither new nor fixed
                group.kind = "replaced"
                group.detail["unmasked"] = (f"its minimal reproducer fails the same way on the {there} side: the "
                                            "failure is on both sides, masked there by another failure in the "
                                            "configurations compared")
        changes.groups.sort(key=report_order)  # a group unmasked above is replaced now
    finally:
        for session in sessions.values():
            session.close()
        if cache is not None:
            cache.close()
    report_target = {**targets["new"].describe(), "release": None}
    diff_report = DiffReport(old=targets["old"].release, new=targets["new"].release, target=report_target,
                             strategy=strategy, flags=shown.argv(), changes=changes, allow=allowed, runs=runs,
                             evaluated={side: len(o) for side, o in outcomes.items()}, notes=notes)
    diff_report.seconds = time.time() - started
    diff_report.path = _store(diff_report, runs_dir)
    return diff_report


def code_elsewhere(session: Session, failing: Outcome) -> dict[str, Any]:
    """The failing statement in the other side's source: the same function, and where in it the statement is
    (with the lines around it), or that the function or the statement is not there."""
    frame = failing.frame
    file, function, statement = frame.get("file"), frame.get("function"), str(frame.get("statement") or "")
    if not file or not function:
        return {"found": "nothing to look for"}
    found = session.source_of(str(file), str(function))
    if not found.get("source"):
        return {"file": file, "function": function, "found": "no such function"}
    import ast
    import textwrap

    lines = str(found["source"]).splitlines()
    wanted = " ".join(statement.split())
    try:
        tree = parse_module(textwrap.dedent(str(found["source"])))
    except SyntaxError:
        tree = None
    for node in ast.walk(tree) if tree is not None and wanted else ():
        if not isinstance(node, ast.stmt):
            continue
        forms = [ast.unparse(node)]  # the evaluator writes a statement as ast.unparse does; a header as its line
        if isinstance(node, (ast.If, ast.While)):
            forms += [f"{word} {ast.unparse(node.test)}:" for word in ("if", "elif", "while")]
        if any(" ".join(form.split()) == wanted for form in forms):
            index = node.lineno - 1
            last = (node.end_lineno or node.lineno) - 1 if not isinstance(node, (ast.If, ast.While)) else index
            first_line = int(found["line"])
            context = [[first_line + k, lines[k]] for k in range(max(0, index - 3), min(len(lines), last + 4))]
            return {"file": file, "function": function, "found": "statement", "line": first_line + index,
                    "context": context}
    return {"file": file, "function": function, "found": "function without the statement", "line": found["line"]}


def _store(report: DiffReport, runs_dir: Path) -> Path:
    """``diff.json`` and ``diff.md`` in a new ``<runs_dir>/diff-<old>-<new>-<salt>/``."""
    from bisect_spec.report.diff_text import diff_markdown
    from bisect_spec.runtime.files import atomic_write

    salt = hashlib.sha1(f"{time.time_ns()}{os.getpid()}".encode()).hexdigest()[:4]
    slug = re.sub(r"[^\w.-]+", "_", f"diff-{report.old}-{report.new}")[:80]
    path = runs_dir / f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{salt}"
    try:
        path.mkdir(parents=True, exist_ok=False)
        report.path = path
        atomic_write(path / "diff.json", json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
        atomic_write(path / "diff.md", diff_markdown(report.to_dict()))
    except OSError as exc:
        raise StoreError(f"cannot write the diff under {path}: {exc.strerror or exc}") from exc
    return path


"""In-process verdicts against real launches, per configuration: :func:`crosscheck`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.errors import StoreError as BisectSpecStoreError
from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config, parse_command
from bisect_spec.runtime.session import Target
from bisect_spec.runtime.target_spec import TargetSpec
from bisect_spec.workflows.real_launch import LaunchPlan, launch_config, launch_dir, launch_plan, launch_session


@dataclass
class CrosscheckReport:
    """In-process verdict vs real launch, per configuration; disagreements are findings of their own."""

    target: Target
    plan: LaunchPlan
    rows: list[dict[str, Any]]
    path: Path
    notes: list[str] = field(default_factory=list)

    @property
    def disagreements(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["agree"]]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "bisect-spec/crosscheck/1", "target": {**self.target.describe(), "hardware": self.plan.mode},
                "notes": self.notes, "path": str(self.path), "checked": len(self.rows),
                "disagreements": len(self.disagreements), "rows": self.rows}


def crosscheck(configs: Sequence[tuple[str, Config]], spec: TargetSpec | None = None, *, timeout: float = 600.0,
               runs_dir: Path = Path("runs"), allow_without_gpu: bool = False,
               server_command: Sequence[str] | None = None) -> CrosscheckReport:
    """For each ``(label, config)``: the in-process verdict and a real launch's, compared.

    In-process runs on the hardware the launch runs on (real GPUs, the CPU, or the same
    simulated profile). Stored as ``crosscheck.json`` with every launch log beside it.
    """
    from bisect_spec.launch import server as launch

    spec = spec or TargetSpec()
    plan = launch_plan(spec, allow_without_gpu=allow_without_gpu)
    leftovers = launch.leftover_notes(raw.argv() for _, raw in configs)
    session = launch_session(spec, plan)
    path = launch_dir(runs_dir, "crosscheck")
    rows: list[dict[str, Any]] = []
    try:
        session.start()
        for number, (label, raw) in enumerate(configs, 1):
            config = session.with_draft(session.canonical(raw))
            verdict = session.evaluate(config)
            launched = launch_config(session, plan, config, path / f"config-{number}.log", timeout=timeout,
                                     server_command=server_command)
            compared = launch.compare(verdict.to_dict(), launched)
            rows.append({"label": label, "config": config.argv(), **compared,
                         "in_process": verdict.signature.id if verdict.signature else verdict.status.value,
                         "in_process_headline": verdict.headline, "launch": launched.classification,
                         "launch_headline": launched.headline, "launch_outcome": launched.to_dict()})
    finally:
        session.close()
    report = CrosscheckReport(session.target, plan, rows, path, [*plan.notes, *leftovers])
    from bisect_spec.runtime.files import atomic_write

    atomic_write(path / "crosscheck.json", json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    return report


def configs_to_crosscheck(source: str, runs_dir: Path = Path("runs"), *, passing: int = 3) -> list[tuple[str, Config]]:
    """Configurations from a file (one per line: flags or a pasted command; ``#`` comments) or a stored run
    (each signature's smallest configuration and the ``passing`` smallest passing ones).

    :raises UsageError: neither a readable file nor a run.
    """
    from bisect_spec.runtime import store

    path = Path(source)
    if path.is_file():
        import shlex

        found = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    found.append((f"line {number}", parse_command(shlex.split(line)).config))
                except ValueError as exc:
                    raise UsageError(f"{source}:{number}: cannot split the line ({exc})") from exc
        if not found:
            raise UsageError(f"{source} holds no configuration (one per line: SGLang flags)")
        return found
    try:
        _, entries, summary = store.read_run(runs_dir, source)
    except BisectSpecStoreError as exc:
        raise UsageError(f"{source} is neither a file nor a stored run ({exc})") from exc
    if summary is None:
        raise UsageError(f"run {source} did not finish; resume it first: bisect-spec --resume {source}")
    return selected_from_summary(summary, [e["outcome"] for e in entries], passing=passing)


def selected_from_summary(summary: dict[str, Any], outcomes: Sequence[dict[str, Any]], *,
                          passing: int = 3) -> list[tuple[str, Config]]:
    """Each failure signature's smallest configuration plus the ``passing`` smallest passing ones."""
    chosen = [(f"signature {s['id']}", Config.from_argv(s["smallest"])) for s in summary["signatures"] if s.get("smallest")]
    passed = sorted({tuple(o["config"]) for o in outcomes if o.get("status") == "passed"}, key=lambda a: (len(a), a))
    chosen += [("passing", Config.from_argv(list(a))) for a in passed[:passing]]
    return chosen

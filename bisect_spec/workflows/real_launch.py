"""Real launches of SGLang's server on request: where they run (:func:`launch_plan`) and one configuration
launched ``repeat`` times (:func:`launch`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import CONFIG_ENV, Config
from bisect_spec.runtime import environments, profiles
from bisect_spec.runtime.pasted_command import understand_flags
from bisect_spec.runtime.session import Session, Target
from bisect_spec.runtime.target_spec import TargetSpec


@dataclass(frozen=True)
class LaunchPlan:
    """Where and how real launches run: hardware mode, environment, output directory."""

    hardware: dict[str, Any] | None  # a profile simulated during resolution, or None (the machine as it is)
    mode: str  # "real" (GPUs), "cpu" (no GPU: fails at device detection) or "simulated:<profile>"
    in_process_hardware: str  # the --hardware the matching in-process verdict uses
    notes: tuple[str, ...] = ()


def launch_plan(spec: TargetSpec, *, allow_without_gpu: bool = False) -> LaunchPlan:
    """Decide the launch's hardware: real GPUs; the honest CPU only when asked; a simulated profile when named.

    :raises UsageError: no GPU here and neither ``allow_without_gpu`` nor a hardware profile.
    """
    from bisect_spec.launch import server as launch

    if spec.hardware in ("auto", "real"):
        if launch.gpus_present():
            return LaunchPlan(None, "real", "real")
        if not allow_without_gpu:
            raise UsageError("no GPU found on this machine: a real launch would fail at device detection; pass "
                             "--launch-without-gpu to launch anyway, or --hardware PROFILE to simulate one during resolution")
        return LaunchPlan(None, "cpu", "none", ("no GPU here: launching on the CPU, so SGLang stops at device detection",))
    if spec.hardware == "none":
        return LaunchPlan(None, "cpu", "none")
    profile = profiles.load_hardware(spec.hardware, spec.gpus)
    return LaunchPlan(profile.record, f"simulated:{profile.label}", spec.hardware,
                      (f"simulating {profile.label} during argument resolution: only resolution is meaningful, "
                       "the launch fails afterwards (no CUDA)",))


@dataclass
class LaunchReport:
    """One configuration launched ``repeat`` times; ``to_dict`` is schema ``bisect-spec/launch/1``."""

    target: Target
    config: Config
    plan: LaunchPlan
    attempts: list[Any]  # launch.LaunchOutcome
    path: Path
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from bisect_spec.launch.server import SCHEMA, flakiness

        first = self.attempts[0].to_dict() if self.attempts else {}
        return {"schema": SCHEMA, "target": {**self.target.describe(), "hardware": self.plan.mode},
                # the first launch's verdict, at the top for scripts (scripts/gpu_check.sh reads these)
                "status": first.get("status"), "classification": first.get("classification"),
                "signature": first.get("signature"), "seconds_to_ready": first.get("seconds_to_ready"),
                "config": self.config.argv(), "notes": self.notes, "path": str(self.path),
                **flakiness(self.attempts), "outcome": self.attempts[0].to_dict() if self.attempts else None,
                "attempts": [a.to_dict() for a in self.attempts]}


def launch_session(spec: TargetSpec, plan: LaunchPlan) -> Session:
    target = TargetSpec(**{**spec.__dict__, "hardware": plan.in_process_hardware}).resolve()
    return Session(target, jobs=1, timeout=120.0, log_dir=environments.home() / "logs")


def launch_config(session: Session, plan: LaunchPlan, config: Config, log_path: Path, *, timeout: float,
                  server_command: Sequence[str] | None = None) -> Any:
    """Launch one configuration of a session's target for real (see :func:`bisect_spec.launch.server.launch_server`)."""
    from bisect_spec.launch import server as launch

    environment = session.environment
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME") and not CONFIG_ENV.match(k)}
    if session.target.release != environments.CURRENT and environment.path is not None:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1")  # config-only profiles
    env.update(session.env(config))  # the configuration's environment, as in-process
    return launch.launch_server(session.server_argv(config), python=environment.python, pythonpath=environment.pythonpath,
                                env=env, deadline=timeout, log_path=log_path, server_command=server_command,
                                torchvision_shim=environment.torchvision_shim, hardware=plan.hardware,
                                gpus=session.target.hardware.gpus)


def launch_dir(runs_dir: Path, what: str) -> Path:
    import secrets

    path = runs_dir / f"{what}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def launch(tokens: Sequence[str], spec: TargetSpec | None = None, *, repeat: int = 1, timeout: float = 600.0,
           runs_dir: Path = Path("runs"), allow_without_gpu: bool = False,
           server_command: Sequence[str] | None = None) -> LaunchReport:
    """Launch SGLang's server for real with these flags (``repeat`` times) and classify each end.

    Logs go to ``runs/launch-<time>/attempt-N.log``; the report to ``launch.json`` beside them.
    :raises UsageError: bad flags, ``repeat < 1``, or no GPU without ``allow_without_gpu``.
    """
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: launch at least once")
    spec = spec or TargetSpec()
    plan = launch_plan(spec, allow_without_gpu=allow_without_gpu)
    config, spec, notes = understand_flags(tokens, spec)
    from bisect_spec.launch.server import leftover_notes

    notes = [*plan.notes, *notes, *leftover_notes([config.argv()])]
    session = launch_session(spec, plan)
    try:
        config = session.with_draft(session.canonical(config))
        path = launch_dir(runs_dir, "launch")
        attempts = [launch_config(session, plan, config, path / f"attempt-{n}.log", timeout=timeout,
                                  server_command=server_command) for n in range(1, repeat + 1)]
    finally:
        session.close()
    report = LaunchReport(session.target, config, plan, attempts, path, notes)
    from bisect_spec.runtime.files import atomic_write

    atomic_write(path / "launch.json", json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    return report

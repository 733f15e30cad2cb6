"""Public Python API: what the CLI calls, usable from your own code and tests.

Example::

    from bisect_spec import api
    result = api.probe(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"],
                       release="0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    print(result.outcome.headline)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import environments, profiles
from .errors import UsageError
from .flags import Config, parse_command
from .outcome import Outcome, Status
from .session import DRAFT, Session, Target

log = logging.getLogger(__name__)

DEFAULT_MODEL = "kimi-k2.6"
DEFAULT_DRAFT = "eagle3"


@dataclass(frozen=True)
class TargetSpec:
    """What the user asked to evaluate against, before anything is loaded."""

    release: str | None = None
    model: str = DEFAULT_MODEL
    draft: str | None = DEFAULT_DRAFT
    hardware: str = "auto"
    gpus: int = profiles.DEFAULT_GPUS
    model_path: str | None = None
    draft_path: str | None = None

    def resolve(self) -> Target:
        """Load profiles and pick the release (newest installed when unset).

        :raises ProfileError: unknown model/draft/hardware. :raises ReleaseError: release not installed.
        """
        model = profiles.load_model(self.model, path=self.model_path)
        draft = profiles.load_draft(self.draft, model, path=self.draft_path)
        hardware = profiles.load_hardware(self.hardware, self.gpus)
        release = self.release or environments.newest_installed()
        environments.get(release)
        return Target(release, model, draft, hardware)


@dataclass
class ProbeResult:
    """One configuration's verdict, with what the tool changed in the user's input."""

    target: Target
    config: Config
    outcome: Outcome
    worker: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "bisect-spec/probe/1", "target": self.target.describe(), "worker": self.worker,
                "notes": self.notes, "outcome": self.outcome.to_dict()}


def understand_flags(tokens: Sequence[str], spec: TargetSpec) -> tuple[Config, TargetSpec, list[str]]:
    """Parse flags or a pasted launch command; swap missing local paths for profiles.

    :return: the configuration, the target spec (with local model/draft dirs when they exist), notes.
    """
    pasted = parse_command(tokens)
    notes: list[str] = []
    config = pasted.config
    if pasted.model_path is not None:
        if (Path(pasted.model_path).expanduser() / "config.json").is_file() and spec.model_path is None:
            spec = TargetSpec(**{**spec.__dict__, "model_path": pasted.model_path})
            notes.append(f"using the local model config at {pasted.model_path}")
        else:
            notes.append(f"model path {pasted.model_path} is not on this machine: using the '{spec.model}' profile")
    if pasted.draft_path is not None:
        if (Path(pasted.draft_path).expanduser() / "config.json").is_file() and spec.draft_path is None:
            spec = TargetSpec(**{**spec.__dict__, "draft_path": pasted.draft_path})
            notes.append(f"using the local draft config at {pasted.draft_path}")
        else:
            notes.append(f"draft path {pasted.draft_path} is not on this machine: using the '{spec.draft}' draft profile")
        config = config.with_("--speculative-draft-model-path", DRAFT)
    return config, spec, notes


def check_usage(session: Session, outcome: Outcome) -> None:
    """Turn SGLang's own argparse rejection (bad value type, bad choice) into a usage error."""
    if outcome.status is Status.USAGE:
        message = outcome.exception.get("message") or "argument error"
        raise UsageError(f"SGLang {session.target.release} rejects the flags: {message}")


def probe(tokens: Sequence[str], spec: TargetSpec | None = None, *,
          on_start: Callable[[Session], None] | None = None, timeout: float = 120.0) -> ProbeResult:
    """Evaluate one configuration (flags or a pasted launch command) on one target.

    :param tokens: SGLang flags, or a pasted ``python -m sglang.launch_server ...`` command.
    :param on_start: called once the worker is up (the CLI announces simulated hardware there).
    :raises UsageError: unknown flag for this release, bad value, not an SGLang command.
    """
    spec = spec or TargetSpec()
    config, spec, notes = understand_flags(tokens, spec)
    target = spec.resolve()
    session = Session(target, jobs=1, timeout=timeout, log_dir=environments.home() / "logs")
    try:
        config = session.canonical(config)
        session.start()
        if on_start:
            on_start(session)
        full = session.with_draft(config)
        if full != config:
            notes.append(f"added --speculative-draft-model-path for the '{target.draft.name if target.draft else ''}' draft")
        outcome = session.evaluate(full)
        check_usage(session, outcome)
        return ProbeResult(session.target, full, outcome, session.info, notes)
    finally:
        session.close()

"""Exceptions of bisect-spec's public API.

Every error a user can cause or meet is a :class:`BisectSpecError` carrying one line that
names the fix; the CLI turns it into ``click.ClickException`` in one place (``cli.py``).
``exit_code`` follows click: 2 for bad usage, 1 for a runtime failure.
"""

from __future__ import annotations

from typing import Any


class BisectSpecError(Exception):
    """Base class: a one-line message that names the fix."""

    exit_code = 1


class UsageError(BisectSpecError):
    """The user asked for something that does not exist or cannot be parsed."""

    exit_code = 2


class Interrupted(BisectSpecError):
    """The user interrupted the work (Ctrl-C, SIGTERM); the message says what was kept and how to go on."""

    exit_code = 130


class ProfileError(UsageError):
    """Unknown or unreadable model, draft or hardware profile."""


class ReleaseError(BisectSpecError):
    """A release's evaluation environment is missing, unbuildable or not importable."""


class ReleaseUnavailable(ReleaseError):
    """A release's environment cannot be built or imported here (recorded; skipped like ``git bisect skip``).

    :param release: the release.
    :param reason: one line saying why.
    """

    def __init__(self, release: str, reason: str) -> None:
        super().__init__(f"SGLang {release} is unavailable here: {reason} "
                         f"(retry with: bisect-spec env install --retry {release})")
        self.release = release
        self.reason = reason


class SourceError(UsageError):
    """A git clone, revision or source tree named as a target (``--repo``, ``git:PATH@REV``, ``path:DIR``)
    cannot be used as given."""


class ArchitectureUnknown(ReleaseError):
    """The release has no model class for the model's architecture (e.g. Kimi K2.5/K2.6 before 0.5.9).

    A :class:`ReleaseError`: the release cannot evaluate this model at all, so a search
    across releases treats it like an unavailable one.
    """

    def __init__(self, release: str, architecture: str, model: str, first_known: str | None) -> None:
        since = f" (first known in {first_known})" if first_known else ""
        super().__init__(f"SGLang {release} does not know the architecture {architecture} of {model}{since}; "
                         "pick a newer --sglang or another --model")
        self.release = release
        self.architecture = architecture
        self.model = model
        self.first_known = first_known


class WorkerError(BisectSpecError):
    """An evaluation worker could not be started or answered nonsense."""


class WarmWorkerError(WorkerError):
    """A warm worker cannot be used: its folder or socket is not private, or it stopped mid-way."""


class NoWarmWorker(WarmWorkerError):
    """A pool told to reuse a warm worker, never to start one, found none running (it may have just stopped)."""


class StoreError(BisectSpecError):
    """A run directory is missing, not a run, locked or corrupt."""


class BudgetExhausted(BisectSpecError):
    """A search stopped on its budget; ``result`` holds the best result so far."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class ExecutorError(BisectSpecError):
    """The chosen executor cannot run: Ray missing, no Ray cluster at the address, actors lost."""

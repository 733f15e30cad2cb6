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


class ProfileError(UsageError):
    """Unknown or unreadable model, draft or hardware profile."""


class ReleaseError(BisectSpecError):
    """A release's evaluation environment is missing, unbuildable or not importable."""


class WorkerError(BisectSpecError):
    """An evaluation worker could not be started or answered nonsense."""


class StoreError(BisectSpecError):
    """A run directory is missing, not a run, locked or corrupt."""


class BudgetExhausted(BisectSpecError):
    """A search stopped on its budget; ``result`` holds the best result so far."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class ExecutorError(BisectSpecError):
    """The chosen executor cannot run: Ray missing, no Ray cluster at the address, actors lost."""

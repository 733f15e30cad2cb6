"""The CLI's error mapping: library errors become one line and an exit code in exactly one place,
:meth:`MappedGroup.invoke`; ``--debug`` shows the traceback instead. Exit codes: 0 ok, 1 runtime error,
2 bad usage, 3 the probed configuration fails in SGLang (a verdict, not an error), 130 Ctrl-C.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click

from bisect_spec.errors import BisectSpecError

EXIT_VERDICT_FAILS = 3


class UsageFailure(click.ClickException):
    """A one-line usage error (exit code 2), without click's usage banner."""

    exit_code = 2


class InterruptedExit(click.ClickException):
    """Ctrl-C: one line saying what was kept, exit status 130 (128 + SIGINT), as shells expect."""

    exit_code = 130

    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


def failure_for(message: str, exit_code: int) -> click.ClickException:
    """A one-line error with the exit code the library error asked for."""
    if exit_code == 130:
        return InterruptedExit(message)
    failure = UsageFailure(message) if exit_code == 2 else click.ClickException(message)
    setattr(failure, "exit_code", exit_code)  # noqa: B010 - an instance's own code (ClassVar in click's stubs)
    return failure


class MappedGroup(click.Group):
    """The one place where library errors turn into CLI errors."""

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(os.environ.get("BISECT_SPEC_DEBUG")) or "--debug" in sys.argv[1:2]
        try:
            return super().invoke(ctx)
        except BisectSpecError as exc:
            if debug:
                traceback.print_exc()
            raise failure_for(str(exc), exc.exit_code) from exc
        except KeyboardInterrupt as exc:
            raise InterruptedExit("interrupted") from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if debug:
                traceback.print_exc()
            raise failure_for(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1) from exc

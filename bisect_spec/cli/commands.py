"""Command line: parse input, call :mod:`bisect_spec.api`, render the result, map errors to one line.

Every command module registers its commands on the group here. Library errors
(:class:`~bisect_spec.errors.BisectSpecError`) become ``click.ClickException`` in exactly one
place, :meth:`bisect_spec.cli.errors.MappedGroup.invoke`; ``--debug`` shows the traceback
instead. Exit codes: 0 ok, 1 runtime error, 2 bad usage, 3 the probed configuration fails in
SGLang (a verdict, not an error). Only ``env``, ``runs`` and ``workers`` reach past the API into
the runtime (``tests/quality/test_quality.py``, ``CLI_ALLOWANCES``).
"""


from __future__ import annotations

import click

from bisect_spec.cli import diff, env, evaluate, launches, releases, results, runs, workers
from bisect_spec.cli.errors import EXIT_VERDICT_FAILS
from bisect_spec.cli.group import main, sweep
from bisect_spec.cli.launches import confirm_by_launch, shrink_launches, sweep_launches
from bisect_spec.cli.options import executor_options
from bisect_spec.cli.releases import bisect_ends

__all__ = ["EXIT_VERDICT_FAILS", "bisect_ends", "main", "run"]

executor_options(main)
executor_options(sweep)
executor_options(results.nightly)
confirm_by_launch(evaluate.shrink, shrink_launches)
confirm_by_launch(sweep, sweep_launches)
assert launches.launch_command.name in main.commands and releases.bisect.name in main.commands
assert diff.diff.name in main.commands
assert {env.env.name, runs.runs.name, workers.workers.name} <= set(main.commands)


def keep_examples_verbatim(command: click.Command) -> None:
    """Every paragraph after a help text's ``Example:`` line is shown as written (click's ``\\b``): click
    would re-wrap it, join a continued line with the next and drop its backslash, and a pasted example
    would break. Applied to every command and group, once they are all registered."""
    if command.help and "Example:" in command.help:
        import inspect

        head, _, examples = inspect.cleandoc(command.help).partition("Example:")
        paragraphs = [p for p in examples.split("\n\n") if p.strip()]
        command.help = head + "Example:\n\n" + "\n\n".join(
            p if p.lstrip("\n").startswith("\b") else "\b\n" + p.strip("\n") for p in paragraphs)
    for child in getattr(command, "commands", {}).values():
        keep_examples_verbatim(child)


keep_examples_verbatim(main)


def run() -> None:
    """Console-script entry point."""
    main(prog_name="bisect-spec")

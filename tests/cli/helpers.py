"""What every CLI test does: run the command in-process, and find its one error line."""

from __future__ import annotations

from click.testing import CliRunner

from bisect_spec.cli.commands import main


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


def error_line(output: str) -> str:
    """The single ``Error:`` line of ``output``; fails if there are more, none, or a traceback."""
    found = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(found) == 1, output
    assert "Traceback" not in output
    return found[0]

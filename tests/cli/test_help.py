"""Every command has help with an example (sqlite-utils habit)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from bisect_spec.cli import main


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += all_commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("path", all_commands(main), ids=lambda p: " ".join(p) or "main")
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output

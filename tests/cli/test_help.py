"""Every command has help with an example (sqlite-utils habit)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from bisect_spec.cli.commands import main


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


def examples(help_text: str) -> list[list[str]]:
    """The example command lines after ``Example:`` (continuation lines joined), as argv lists."""
    import shlex

    text = help_text.split("Example:", 1)[1].replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith(("bisect-spec", "$(bisect-spec"))]


def parse_only(argv: list[str]) -> click.Context:
    """Parse ``argv`` (after ``bisect-spec``) down to its command, as click would, without running it."""
    ctx = main.make_context("bisect-spec", list(argv), resilient_parsing=False)
    while isinstance(ctx.command, click.Group) and [*getattr(ctx, "_protected_args", []), *ctx.args]:
        name, command, rest = ctx.command.resolve_command(ctx, [*getattr(ctx, "_protected_args", []), *ctx.args])
        assert command is not None, argv
        ctx = command.make_context(name, rest, parent=ctx)
    return ctx


def command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", all_commands(main), ids=lambda p: " ".join(p) or "main")
def test_every_example_parses_with_the_cli(path: tuple[str, ...]) -> None:
    command = command_at(path)
    found = examples(command.help or "")
    assert found, f"{' '.join(path) or 'main'} has no example command line"
    for argv in found:
        if argv[0] == "$(bisect-spec":  # $(bisect-spec env python 0.5.12) repro.py: the part inside
            end = next(i for i, a in enumerate(argv) if a.endswith(")"))
            argv = [*argv[:end], argv[end].removesuffix(")")]
        ctx: click.Context | None = parse_only(argv[1:])
        chain = []
        while ctx is not None:
            chain.append(ctx.command)
            ctx = ctx.parent
        assert command in chain, argv  # the example runs this command (or, for a group, one of its commands)


@pytest.mark.parametrize("path", all_commands(main), ids=lambda p: " ".join(p) or "main")
def test_every_example_in_help_pastes_as_written_at_any_width(path: tuple[str, ...]) -> None:
    """The examples --help prints are the docstring's lines, whole (not re-wrapped, backslashes kept)."""
    import inspect

    command = command_at(path)
    written = [line.strip() for line in inspect.cleandoc(command.help or "").split("Example:", 1)[1].splitlines()
               if line.strip() and line.strip() != "\b"]
    for width in (60, 200):
        shown = CliRunner().invoke(main, [*path, "--help"], terminal_width=width).output
        printed = [line.strip() for line in shown.split("Example:", 1)[1].split("\nOptions:", 1)[0].splitlines()
                   if line.strip()]
        assert printed == written, (width, printed)


def test_bare_bisect_spec_says_which_command_answers_which_question_and_starts_nothing(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from bisect_spec.cli import group

    def no_sweep(**_kwargs: object) -> None:
        raise AssertionError("a bare bisect-spec started the sweep")

    monkeypatch.setattr(group, "run_sweep", no_sweep)
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 0, result.output
    assert "Which command answers which question:" in result.output
    assert "  bisect-spec --model kimi-k2.6 --draft eagle3\n" in result.output
    for command in ("probe", "shrink", "bisect", "diff", "nightly", "launch"):
        assert f"bisect-spec {command} " in result.output

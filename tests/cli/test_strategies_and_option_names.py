"""``strategies list``, and one option name per meaning (``--runs-dir`` wherever runs are stored)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import click
import pytest

from bisect_spec.cli.commands import main
from tests.cli.helpers import error_line, run
from tests.cli.test_help import all_commands
from tests.schemas import assert_valid

SHIPPED = Path(__file__).parent.parent.parent / "bisect_spec" / "data" / "strategies"


def test_strategies_list_describes_every_shipped_strategy() -> None:
    code, output = run("strategies", "list", "--json")
    assert code == 0, output
    assert_valid(json.loads(output), "strategies")
    listed = {s["name"]: s["description"] for s in json.loads(output)["strategies"]}
    shipped = {p.stem: tomllib.loads(p.read_text())["description"] for p in SHIPPED.glob("*.toml")}
    assert listed == shipped and all(listed.values())
    code, text = run("strategies", "list")
    assert code == 0
    rows = {line.split()[0]: line for line in text.splitlines()[2:]}
    assert set(rows) == set(shipped) and all(shipped[name] in row for name, row in rows.items())


def commands_with(option: str) -> list[str]:
    found = []
    for path in all_commands(main):
        command: click.Command = main
        for name in path:
            assert isinstance(command, click.Group)
            command = command.commands[name]
        if any(option in p.opts for p in command.params if not getattr(p, "hidden", False)):
            found.append(" ".join(path) or "bisect-spec")
    return found


def test_every_command_that_stores_results_takes_runs_dir_and_none_shows_out() -> None:
    # in any order: commands register as their modules load; --help lists them sorted
    assert sorted(commands_with("--runs-dir")) == sorted(["bisect-spec", "sweep", "runs list", "runs show", "shrink",
                                                          "nightly", "report", "launch", "crosscheck", "diff"])
    assert commands_with("--out") == []


@pytest.mark.parametrize("command", [["shrink"], ["nightly", "--matrix", "m.toml"]])
def test_out_and_runs_dir_together_are_refused(command: list[str], tmp_path: Path) -> None:
    flags = ["--", "--tp", "8"] if command == ["shrink"] else []
    code, output = run(*command, "--out", str(tmp_path / "a"), "--runs-dir", str(tmp_path / "b"), *flags)
    assert code == 2
    assert error_line(output) == "Error: --out is the old name of --runs-dir: give only --runs-dir"


def test_out_still_works_and_says_it_is_deprecated(tmp_path: Path) -> None:
    code, output = run("nightly", "--matrix", str(tmp_path / "none.toml"), "--out", str(tmp_path))
    assert code == 2, output
    assert output.splitlines()[0] == "warning: --out is deprecated: use --runs-dir"
    assert error_line(output) == f"Error: matrix file {tmp_path / 'none.toml'} does not exist; see examples/nightly-matrix.toml"


def test_shrink_takes_fix_like_sweep() -> None:
    for name in ("shrink", "sweep"):
        command = main.commands[name]
        assert any(p.opts == ["--fix"] and p.secondary_opts == ["--no-fix"] for p in command.params
                   if isinstance(p, click.Option)), name


def test_timeout_is_an_evaluations_limit_and_launch_timeout_a_launchs() -> None:
    assert sorted(commands_with("--timeout")) == ["bisect", "diff", "probe"]
    assert commands_with("--launch-timeout") == ["sweep", "shrink", "launch", "crosscheck"]


def test_launch_timeout_and_its_old_name_together_are_refused() -> None:
    code, output = run("crosscheck", "--timeout", "5", "--launch-timeout", "3", "configs.txt")
    assert code == 2
    assert error_line(output) == "Error: --timeout is the old name of --launch-timeout: give only --launch-timeout"

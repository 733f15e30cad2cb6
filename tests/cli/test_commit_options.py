"""``bisect --repo/--old/--new`` and ``--sglang git:/path:``: the one-line errors, before anything is evaluated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import error_line, run

FLAGS = ["--", "--speculative-algorithm", "EAGLE3"]


@pytest.mark.parametrize(("args", "expected"), [
    (["--old", "v0.5.1"],
     "Error: --old v0.5.1 is not a known SGLang release (closest: 0.5.1"),
    (["--max-evaluations", "5"],
     "Error: --max-evaluations bisects the commits between two revisions: add --repo PATH --old REV --new REV"),
    (["--repo", ".", "--old", "v0.5.1"],
     "Error: name both ends of the commits to bisect as revisions: --old REV --new REV (release numbers such as "
     "0.5.9 bisect releases first)"),
    (["--repo", ".", "--old", "v0.5.1", "--new", "0.5.9"],
     "Error: name both ends of the commits to bisect as revisions: --old REV --new REV (release numbers such as "
     "0.5.9 bisect releases first)"),
    (["--repo", ".", "--old", "a", "--new", "b", "--scan"],
     "Error: --old/--new revisions bisect commits only: drop --good, --bad, --scan and --releases"),
    (["--repo", "/nonexistent/sglang", "--old", "a", "--new", "b"],
     "Error: /nonexistent/sglang does not exist: pass the directory of your SGLang clone "
     "(git clone https://github.com/sgl-project/sglang)"),
])
def test_bisect_commit_options_are_checked_first(args: list[str], expected: str) -> None:
    code, output = run("bisect", *args, *FLAGS)
    assert code == 2 and error_line(output).startswith(expected)


def test_a_directory_that_is_not_a_clone(tmp_path: Path) -> None:
    code, output = run("bisect", "--repo", str(tmp_path), "--old", "a", "--new", "b", *FLAGS)
    assert code == 2 and error_line(output).startswith(f"Error: {tmp_path} is not a git clone (fatal: not a git repository")


@pytest.mark.parametrize(("target", "expected"), [
    ("git:/nonexistent/sglang@v0.5.2", "Error: /nonexistent/sglang does not exist: pass the directory of your SGLang clone"),
    ("path:/nonexistent/sglang", "Error: /nonexistent/sglang is not a directory: write path:DIR with DIR your SGLang checkout"),
    ("banana", "Error: 'banana' is not an SGLang release: use a version such as 0.5.23, 'current', git:PATH@REV"),
])
def test_source_targets_name_the_fix(target: str, expected: str) -> None:
    code, output = run("probe", "--sglang", target, *FLAGS)
    assert code == 2 and error_line(output).startswith(expected)

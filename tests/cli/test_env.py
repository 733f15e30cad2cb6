"""``bisect-spec env``: ranges, --all, and unavailable releases shown with their reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisect_spec.cli.commands import main
from bisect_spec.runtime import environments
from tests.cli.helpers import error_line
from tests.schemas import assert_valid


def run(*args: str, home: Path | None = None) -> tuple[int, str]:
    env = {"BISECT_SPEC_HOME": str(home)} if home else None
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


@pytest.mark.parametrize(("args", "expected"), [
    (["env", "install"], "Error: name releases (0.5.23, 0.4.6..0.5.3) or use --all"),
    (["env", "install", "0.5.23..0.4.6"], "Error: range 0.5.23..0.4.6 runs backwards: write 0.4.6..0.5.23"),
    (["env", "install", "0.6..0.7"], "Error: no release with recorded pins lies in 0.6..0.7 (known: 0.4.6 ... 0.5.23)"),
])
def test_bad_install_arguments_are_one_line_usage_errors(args: list[str], expected: str) -> None:
    code, output = run(*args)
    assert code == 2
    assert [line for line in output.splitlines() if line.startswith("Error:")] == [expected]


def test_an_unavailable_release_is_listed_with_its_reason_and_reported_by_install(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))
    environments._mark_unavailable("0.4.8", "does not import: ImportError: cannot import name 'x'")
    code, output = run("env", "list", "--json", home=tmp_path)
    assert code == 0
    assert_valid(json.loads(output), "envs")
    rows = {row["release"]: row for row in json.loads(output)["releases"]}
    assert rows["0.4.8"]["unavailable"] == "does not import: ImportError: cannot import name 'x'"
    assert rows["0.4.9"]["unavailable"] is None
    code, output = run("env", "install", "0.4.8", home=tmp_path)
    assert code == 1
    assert "0.4.8    unavailable: does not import: ImportError: cannot import name 'x'" in output


def test_a_release_that_does_not_exist_is_refused_before_any_install(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """Inside the pinned table's span from the table (no pip call); newer ones from the package index."""
    asked: list[str] = []

    def index() -> list[str]:
        asked.append("index")
        return ["0.5.22", "0.5.23", "0.5.24"]

    monkeypatch.setattr(environments, "index_versions", index)
    for args in (["env", "install", "0.5.10.post9"], ["probe", "--sglang", "0.5.10.post9", "--", "--tp", "2"]):
        code, output = run(*args, home=tmp_path)
        assert code == 2
        assert error_line(output) == ("Error: SGLang 0.5.10.post9 is not a release (releases near it: 0.5.10, "
                                      "0.5.10.post1, 0.5.11, 0.5.12); pick one of them with --sglang")
    code, output = run("probe", "--sglang", "0.5.0.post1", "--", "--tp", "2", home=tmp_path)  # neighbours by version
    assert error_line(output) == ("Error: SGLang 0.5.0.post1 is not a release (releases near it: 0.4.10.post1, "
                                  "0.4.10.post2, 0.5.1, 0.5.1.post1); pick one of them with --sglang")
    code, output = run("probe", "--sglang", "0.5.23.0", "--", "--tp", "2", home=tmp_path)  # the newest's equal
    assert (code, error_line(output)) == (
        2, "Error: SGLang 0.5.23.0 is not a release (releases near it: 0.5.22, 0.5.23); pick one of them with --sglang")
    assert asked == []
    # a pre-release inside the span: the table leaves them out, the index decides (this one it lacks)
    code, output = run("probe", "--sglang", "0.5.1rc7", "--", "--tp", "2", home=tmp_path)
    assert (code, error_line(output)) == (
        2, "Error: SGLang 0.5.1rc7 is not on the package index (newest there: 0.5.24); pick another --sglang")
    assert asked == ["index"]
    code, output = run("env", "install", "0.5.99", home=tmp_path)
    assert code == 2
    assert error_line(output) == "Error: SGLang 0.5.99 is not on the package index (newest there: 0.5.24); pick another --sglang"
    assert not (tmp_path / "envs").exists() or not any((tmp_path / "envs").glob("sglang-0.5.99*"))
    code, output = run("probe", "--sglang", "0.5.24", "--", "--tp", "2", home=tmp_path)  # exists: install it, as for any release
    assert code == 1
    assert error_line(output).startswith("Error: SGLang 0.5.24 is not installed")
    monkeypatch.setattr(environments, "index_versions", lambda: ["0.5.0rc0", "0.5.23"])
    code, output = run("probe", "--sglang", "0.5.0rc0", "--", "--tp", "2", home=tmp_path)  # SGLang's own pre-release
    assert code == 1
    assert error_line(output).startswith("Error: SGLang 0.5.0rc0 is not installed")

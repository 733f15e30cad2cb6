"""Naming runs: ``latest``, a unique beginning of an id or of its salt; ambiguous and unknown names in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.helpers import error_line, run

STORED = Path(__file__).parent.parent / "resources" / "runs" / "20261130-183524-kimi-k2.6-0.5.23-5ae9"
IDS = ["20261130-183524-kimi-k2.6-0.5.23-5ae9", "20261201-090000-kimi-k2.6-0.5.23-3fa2",
       "20261201-100000-kimi-k2.6-0.5.23-3fb7"]


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    for run_id in IDS:
        shutil.copytree(STORED, tmp_path / run_id)
    return tmp_path


@pytest.mark.parametrize(("name", "expected"), [
    ("latest", IDS[2]), ("3fa2", IDS[1]), ("5a", IDS[0]), ("20261201-09", IDS[1]), (IDS[2], IDS[2]),
])
def test_runs_show_takes_latest_and_unique_prefixes(runs_dir: Path, name: str, expected: str) -> None:
    code, output = run("runs", "show", name, "--runs-dir", str(runs_dir), "--json")
    assert code == 0, output
    assert json.loads(output)["run"] == expected


def test_runs_show_text_names_the_run_directory(runs_dir: Path) -> None:
    code, output = run("runs", "show", "3fa2", "--runs-dir", str(runs_dir))
    assert code == 0 and str(runs_dir / IDS[1]) in output


@pytest.mark.parametrize(("name", "expected"), [
    ("3f", "Error: run '3f' is ambiguous in {d}: it could be {b}, {c}; type more of the id"),
    ("20261201", "Error: run '20261201' is ambiguous in {d}: it could be {b}, {c}; type more of the id"),
    ("beef", "Error: no run 'beef' in {d}; recent runs: {a}, {b}, {c}"),
])
def test_ambiguous_and_unknown_run_names_are_refused_in_one_line(runs_dir: Path, name: str, expected: str) -> None:
    code, output = run("runs", "show", name, "--runs-dir", str(runs_dir))
    assert code == 2
    assert error_line(output) == expected.format(d=runs_dir, a=IDS[0], b=IDS[1], c=IDS[2])


def test_latest_in_an_empty_runs_dir(tmp_path: Path) -> None:
    code, output = run("runs", "show", "latest", "--runs-dir", str(tmp_path))
    assert code == 2
    assert error_line(output) == f"Error: no runs in {tmp_path}: 'latest' names the newest run there (see --runs-dir)"


def test_report_takes_a_run_prefix_too(runs_dir: Path) -> None:
    code, output = run("report", "5ae9", "--runs-dir", str(runs_dir), "--format", "json")
    assert code == 0, output
    assert json.loads(output)["id"] == IDS[0]


def test_resume_takes_run_names_too_and_refuses_an_ambiguous_one(runs_dir: Path) -> None:
    code, output = run("sweep", "--resume", "3f", "--runs-dir", str(runs_dir))
    assert code == 2
    assert error_line(output) == (f"Error: run '3f' is ambiguous in {runs_dir}: it could be {IDS[1]}, {IDS[2]}; "
                                  "type more of the id")
    code, output = run("sweep", "--resume", "nope", "--runs-dir", str(runs_dir))  # no match: the message as before
    assert code == 1
    assert error_line(output) == f"Error: no run 'nope' in {runs_dir}; recent runs: {', '.join(IDS)}"

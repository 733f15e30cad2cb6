"""``bisect-spec report``: every format on a stored run and a nightly; bad targets give one line, exit 1 or 2."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bisect_spec import api
from tests.cli.helpers import error_line, run
from tests.conftest import RESOURCES
from tests.schemas import assert_valid

RUN_ID = "20261130-183524-kimi-k2.6-0.5.23-5ae9"
RUNS = RESOURCES / "runs"
NIGHTLY = RESOURCES / "nightly-3x2.json"


@pytest.mark.parametrize("fmt", ["md", "json", "junit", "html"])
def test_report_prints_what_the_api_returns(fmt: str) -> None:
    code, output = run("report", RUN_ID, "--runs-dir", str(RUNS), "--format", fmt)
    assert code == 0, output
    assert output == api.report(RUN_ID, fmt, runs_dir=RUNS)
    if fmt == "json":
        assert_valid(json.loads(output), "report")


def test_a_nightly_report_json_follows_its_schema() -> None:
    code, output = run("report", str(NIGHTLY), "--format", "json")
    assert code == 0, output
    assert_valid(json.loads(output), "report")


def test_report_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "junit.xml"
    code, output = run("report", str(NIGHTLY), "--format", "junit", "-o", str(out))
    assert (code, output) == (0, f"junit report written to {out}\n")
    assert ET.fromstring(out.read_text()).get("failures") == "1"


def test_default_format_is_markdown() -> None:
    code, output = run("report", str(NIGHTLY))
    assert code == 0
    assert output.startswith("# bisect-spec nightly 20261130-0215-ab12")


def test_unknown_run_id(tmp_path: Path) -> None:
    code, output = run("report", "20261130-000000-nope", "--runs-dir", str(tmp_path))
    assert code == 2
    assert error_line(output) == f"Error: no run '20261130-000000-nope' in {tmp_path}; {tmp_path} has no runs"


def test_unknown_run_id_names_recent_runs() -> None:
    code, output = run("report", "nope", "--runs-dir", str(RUNS))
    assert code == 2
    assert error_line(output) == f"Error: no run 'nope' in {RUNS}; recent runs: {RUN_ID}"


def test_directory_that_is_neither_a_run_nor_a_nightly(tmp_path: Path) -> None:
    code, output = run("report", str(tmp_path))
    assert code == 2
    assert error_line(output) == f"Error: {tmp_path} is neither a bisect-spec run (no run.json) nor a nightly (no nightly.json)"


def test_file_that_is_neither_a_run_nor_a_nightly(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    code, output = run("report", str(path))
    assert code == 2
    assert error_line(output) == (f"Error: {path} is neither a bisect-spec run (a directory with run.json) nor a nightly "
                                  "(nightly.json)")


def test_corrupt_nightly(tmp_path: Path) -> None:
    path = tmp_path / "nightly.json"
    path.write_text('{"schema": "bisect-spec/nightly/1",\n "cells": [')
    for target in (tmp_path, path):
        code, output = run("report", str(target), "--format", "html")
        assert code == 1
        assert error_line(output) == f"Error: {path} is corrupt (line 2: Expecting value): rerun bisect-spec nightly"


def test_nightly_of_another_schema(tmp_path: Path) -> None:
    path = tmp_path / "nightly.json"
    path.write_text(json.dumps({"schema": "bisect-spec/nightly/9", "cells": []}))
    code, output = run("report", str(path))
    assert code == 1
    assert error_line(output) == (f"Error: {path} is not a bisect-spec nightly (schema 'bisect-spec/nightly/9', "
                                  "expected 'bisect-spec/nightly/1')")


def test_unfinished_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "20261130-120000-kimi-k2.6-0.5.23-beef"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{}")
    code, output = run("report", run_dir.name, "--runs-dir", str(tmp_path))
    assert code == 1
    assert error_line(output) == (f"Error: run {run_dir.name} did not finish (no summary.json): continue it with "
                                  f"bisect-spec --resume {run_dir.name}, then report")


def test_corrupt_results_line(tmp_path: Path) -> None:
    run_dir = tmp_path / RUN_ID
    run_dir.mkdir()
    for name in ("run.json", "summary.json"):
        (run_dir / name).write_text((RUNS / RUN_ID / name).read_text())
    (run_dir / "results.jsonl").write_text('{"status": "passed", "config": []}\n{"status": \n')
    code, output = run("report", str(run_dir), "--format", "html")
    assert code == 1
    assert error_line(output) == (f"Error: {run_dir / 'results.jsonl'} line 2 is corrupt: the run cannot be reported; "
                                  "run the sweep again")


def test_unknown_format() -> None:
    code, output = run("report", str(NIGHTLY), "--format", "pdf")
    assert code == 2
    assert error_line(output) == "Error: Invalid value for '--format': 'pdf' is not one of 'md', 'json', 'junit', 'html'."


def test_api_unknown_format_is_a_usage_error() -> None:
    from bisect_spec.errors import UsageError

    with pytest.raises(UsageError, match=r"^unknown report format 'pdf': choose one of md, json, junit, html$"):
        api.report(NIGHTLY, "pdf")


def test_unwritable_output(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "report.md"
    code, output = run("report", str(NIGHTLY), "-o", str(out))
    assert code == 1
    assert error_line(output) == f"Error: cannot write {out}: No such file or directory"

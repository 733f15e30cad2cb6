"""scripts/compare_runs.py: two runs of one command agree apart from times, ids and what a worker's history leaves in
a reproducer (SGLang's once-per-process log lines, the order of its CPU-only imports); a verdict that differs shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import load_script


def script() -> Any:
    return load_script("compare_runs")


def run(parent: Path, name: str, *, status: str, stderr: str, imports: list[str], seconds: float) -> Path:
    path = parent / name
    (path / "reproducers" / "abc").mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"run": name, "status": status}))
    record = {"status": status, "stderr_tail": stderr, "seconds": seconds}
    (path / "reproducers" / "abc" / "shrink.json").write_text(json.dumps({"first": record}, indent=2))
    (path / "reproducers" / "abc" / "repro.py").write_text(f"CPU_IMPORTS = {json.dumps(imports)}\nprint('x')\n")
    return path


def test_a_workers_history_and_times_are_no_difference(tmp_path: Path) -> None:
    one = run(tmp_path, "20261208-010101-a", status="failed", stderr='[2026-12-08 01:01:01] once "per" process\\n',
              imports=["b", "a"], seconds=0.1)
    two = run(tmp_path, "20261208-020202-b", status="failed", stderr="", imports=["a", "b"], seconds=0.2)
    assert script().compare(one, two) == []


def test_a_verdict_or_an_import_that_differs_shows(tmp_path: Path) -> None:
    one = run(tmp_path, "20261208-010101-a", status="failed", stderr="", imports=["a"], seconds=0.1)
    two = run(tmp_path, "20261208-020202-b", status="passed", stderr="", imports=["a", "c"], seconds=0.1)
    assert script().compare(one, two) == ["reproducers/abc/repro.py: differs", "reproducers/abc/shrink.json: differs",
                                          "summary.json: differs"]

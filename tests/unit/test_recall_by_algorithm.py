"""scripts/recall_by_algorithm.py: the focused plan's failing statements against the full plan's, per algorithm."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_script


def script() -> Any:
    return load_script("recall_by_algorithm")


def run(directory: Path, rows: list[tuple[list[str], str | None]]) -> Path:
    directory.mkdir(parents=True)
    lines = [json.dumps({"config": config, "status": "failed" if where else "passed",
                         **({"signature": {"kind": "failed", "location": where}} if where else {})})
             for config, where in rows]
    (directory / "results.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return directory


def test_a_statement_the_full_plan_finds_for_a_swept_algorithm_and_the_focused_one_misses_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    eagle3 = ["--speculative-algorithm", "EAGLE3"]
    focused = run(tmp_path / "focused", [(eagle3, "a.py::f"), ([], None), (["--x"], "b.py::g")])
    full = run(tmp_path / "full", [(eagle3, "a.py::f"), ([*eagle3, "--y"], "c.py::h"), (["--x"], "b.py::g"),
                                    (["--speculative-algorithm", "NGRAM"], "d.py::k")])
    module = script()
    assert module.main([str(focused), str(full), "--json"]) == 1
    table = {row["algorithm"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(table) == {"EAGLE3", "none"}  # NGRAM was not swept by the focused plan: not scored
    assert (table["EAGLE3"]["full"], table["EAGLE3"]["found"], table["EAGLE3"]["missed"]) == (2, 1, ["c.py::h"])
    assert (table["none"]["full"], table["none"]["found"]) == (1, 1)
    assert module.main([str(full), str(full), "--json"]) == 0


def test_a_folder_that_is_no_run_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"holds no results\.jsonl\.gz: pass a run directory"):
        script().main([str(tmp_path), str(tmp_path)])

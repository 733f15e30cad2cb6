"""``shrink --runs-dir``: the option every storing command takes (it was taken for an SGLang flag)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import run
from tests.conftest import require_release

pytestmark = pytest.mark.sglang


def test_shrink_stores_its_reproducers_under_runs_dir(tmp_path: Path) -> None:
    require_release("0.5.23")
    code, output = run("shrink", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--no-fix", "--json",
                       "--runs-dir", str(tmp_path), "--", "--speculative-algorithm", "EAGLE3",
                       "--speculative-num-draft-tokens", "3")
    assert code == 0, output
    data = json.loads(output[output.index("{"):])
    signature = data["signature"]["id"]
    stored = tmp_path / f"shrink-{signature}" / signature
    assert {"launch.sh", "repro.py", "test_regression.py", "bug_report.md"} <= {p.name for p in stored.iterdir()}

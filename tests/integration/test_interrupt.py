"""Ctrl-C during a sweep: exit status 130, one line saying what was kept and how to resume."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_release
from tests.processes import wait_for

pytestmark = pytest.mark.sglang


def test_ctrl_c_during_a_sweep_says_how_to_resume_and_exits_130(tmp_path: Path) -> None:
    require_release("0.5.23")
    runs = tmp_path / "runs"
    tool = subprocess.Popen([sys.executable, "-m", "bisect_spec", "sweep", "--sglang", "0.5.23", "--model", "llama-3.1-8b",
                             "--hardware", "h100", "--strategy", "quick", "--jobs", "1", "--no-shrink", "--no-cache",
                             "--runs-dir", str(runs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def recorded() -> int:
            journals = list(runs.glob("*/journal.jsonl"))
            return len(journals[0].read_text().splitlines()) if journals else 0

        wait_for("three results journaled", lambda: recorded() >= 3 or tool.poll() is not None)
        assert tool.poll() is None, tool.communicate()
        tool.send_signal(signal.SIGINT)
        _, err = tool.communicate(timeout=120)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    assert tool.returncode == 130, err
    run_id = next(runs.iterdir()).name
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted: ") and f"recorded in run {run_id}; resume with bisect-spec sweep --resume {run_id}" \
        in last, err
    kept = int(last.removeprefix("interrupted: ").split("/", 1)[0])
    assert kept == recorded() >= 3
    assert "Traceback" not in err and "Aborted!" not in err

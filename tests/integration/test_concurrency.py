"""Two sweeps at once: on different runs they do not interfere; on the same run the second is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require_release

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

BISECT_SPEC = Path(sys.executable).with_name("bisect-spec")
#: the run store's locking and two processes' independence, whatever the model: llama-3.1-8b + eagle3 on one H100
#: (0.14 s an evaluation on meta, where Kimi-K2.6 at its deployment shape takes 0.6-1 s), still a few hundred rows
SWEEP = [str(BISECT_SPEC), "sweep", "--sglang", "0.5.23", "--model", "llama-3.1-8b", "--draft", "eagle3",
         "--hardware", "h100", "--gpus", "1", "--strategy", "quick", "--budget", "20", "--no-cache", "--no-shrink",
         "--jobs", "1"]


def test_two_sweeps_on_different_runs_give_identical_results(tmp_path: Path) -> None:
    require_release("0.5.23")
    procs = [subprocess.Popen([*SWEEP, "--runs-dir", str(tmp_path / name)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for name in ("a", "b")]
    for proc in procs:
        _, err = proc.communicate(timeout=1800)  # a safety net on a busy machine, not a speed check
        assert proc.returncode == 0, err.decode()[-2000:]
    runs = [next((tmp_path / name).iterdir()) for name in ("a", "b")]
    for name in ("results.jsonl.gz", "summary.json"):
        assert (runs[0] / name).read_bytes() == (runs[1] / name).read_bytes()
    # the comparison means something: many rows, several failures
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["evaluated"] > 100 and len(summary["signatures"]) >= 3


def test_a_second_process_on_the_same_run_is_refused(tmp_path: Path) -> None:
    require_release("0.5.23")
    first = subprocess.Popen([*SWEEP, "--runs-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not any(tmp_path.glob("*/lock")):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        run_id = next(tmp_path.iterdir()).name
        second = subprocess.run([*SWEEP, "--runs-dir", str(tmp_path), "--resume", run_id], capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 1
        assert second.stderr.strip() == (f"Error: run {run_id} is in use by another bisect-spec process "
                                         f"(pid {first.pid}); wait for it to finish or start a new run")
    finally:
        first.communicate(timeout=1800)
    assert first.returncode == 0
    assert (tmp_path / run_id / "summary.json").is_file()  # the refused process did not disturb the first

"""The local worker pool's bookkeeping, without starting a worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from bisect_spec.errors import WorkerError
from bisect_spec.runtime.worker import ForkedProcess, WorkerPool, WorkerProcess, WorkerSpec


def test_an_evaluation_after_the_pool_closed_starts_no_worker() -> None:
    """A sweep's shrinks run on threads; one still evaluating when the sweep stops (an interrupt) must not start
    a worker after the pool closed (it would outlive the run): it gets a WorkerError and ends."""
    pool = WorkerPool(WorkerSpec(python="/nonexistent/python"), jobs=1)
    pool._idle.put(WorkerProcess(pool.spec))  # a worker that is not running: an open pool would start a fresh one
    pool.close()
    with pytest.raises(WorkerError, match="stopped"):
        pool.evaluate(["--tp-size", "1"])
    assert pool.worker_pids() == []
    assert pool._idle.qsize() == 1  # the slot is kept for a later start


class SlowReportingZygote:
    """Stands for a zygote that has reaped a worker but not yet sent its exit (the moment between the two)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.asked: list[float] = []

    def returncode(self, pid: int, timeout: float) -> int | None:
        self.asked.append(timeout)
        return self.code if timeout > 0 else None  # on its way: there for whoever waits for it


def test_a_forked_worker_that_ended_is_not_taken_for_a_running_one_while_its_exit_is_on_its_way() -> None:
    """CI (2026-12-07): a worker killed from outside was reaped by its zygote; the pool asked before the zygote's
    report came, took the worker for a running one, and evaluated on it instead of replacing it."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # its pid is gone, as a reaped worker's is
    zygote = SlowReportingZygote(-signal.SIGKILL)
    with open(os.devnull, "wb") as stdin, open(os.devnull, "rb") as stdout:
        process = ForkedProcess(ended.pid, stdin, stdout, zygote)  # type: ignore[arg-type]
        assert process.poll() == -signal.SIGKILL
    assert zygote.asked[0] == 0.0 and zygote.asked[-1] > 0  # asked at once, then waited for the report


def test_a_running_forked_worker_polls_as_running() -> None:
    zygote = SlowReportingZygote(0)
    with open(os.devnull, "wb") as stdin, open(os.devnull, "rb") as stdout:
        process = ForkedProcess(os.getpid(), stdin, stdout, zygote)  # type: ignore[arg-type]
        assert process.poll() is None
    assert zygote.asked == [0.0]


def test_kill_tree_of_a_process_that_ends_between_its_lookups_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI (2026-12-07): a forked worker's zygote reaped it between ``psutil.Process(pid)`` and ``children()``, and
    the NoSuchProcess ended the pool's close half-way (its zygote left running)."""
    import psutil

    from bisect_spec.runtime import processes

    def vanished(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
        raise psutil.NoSuchProcess(self.pid)

    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        monkeypatch.setattr(psutil.Process, "children", vanished)
        processes.kill_tree(target.pid)  # returns, as for a process that is gone
    finally:
        target.kill()
        target.wait()

"""The local worker pool's bookkeeping, without starting a worker."""

from __future__ import annotations

import pytest

from bisect_spec.errors import WorkerError
from bisect_spec.runtime.worker import WorkerPool, WorkerProcess, WorkerSpec


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

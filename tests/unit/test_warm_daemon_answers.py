"""The warm worker daemon's answers when its pool fails or it stops: the client reads why, not a closed connection."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from bisect_spec.errors import WorkerError
from bisect_spec.runtime.warm_daemon import Daemon

CONFIG = {"spec": {"python": "/nonexistent/python"}, "idle": 60, "label": "test", "timeout": 5}


class FailingPool:
    """Stands for a worker pool whose replacement worker does not start (nothing here runs SGLang)."""

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.asked: list[list[str]] = []

    def evaluate(self, argv: list[str], timeout: float | None = None) -> dict[str, Any]:
        self.asked.append(argv)
        raise WorkerError("worker did not start: ImportError: no module named sglang")

    def worker_pids(self) -> list[int]:
        return []

    def close(self) -> None:
        pass


def test_an_evaluation_the_pool_cannot_run_is_answered_with_its_reason(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, CONFIG)
    daemon.pool = FailingPool()  # type: ignore[assignment]
    daemon.ready.set()
    ours, theirs = socket.socketpair()
    client = daemon.admit(theirs)
    with ours, ours.makefile("rb") as reader:
        ours.sendall(json.dumps({"op": "eval", "argv": ["--tp-size", "2"]}).encode() + b"\n")
        reply = json.loads(reader.readline())
        assert reply == {"ok": False, "error": "WorkerError: worker did not start: ImportError: no module named sglang"}
        ours.sendall(json.dumps({"op": "status"}).encode() + b"\n")  # the connection still serves
        assert json.loads(reader.readline())["state"] == "ready"
    client.join()


def test_a_connection_keeps_the_daemon_up_from_its_accept_not_from_its_first_request(tmp_path: Path) -> None:
    # CI saw "warm worker: ValueError: write to closed file": a client accepted just as the idle limit
    # passed was counted only at its first request, so the daemon closed its pool under it.
    daemon = Daemon(tmp_path, {**CONFIG, "idle": 1})
    daemon.pool = FailingPool()  # type: ignore[assignment]
    daemon.ready.set()
    daemon.last_activity = time.monotonic() - 100  # idle well past its limit
    ours, theirs = socket.socketpair()
    client = daemon.admit(theirs)
    assert daemon.idle_for() == 0.0  # nothing sent yet, and the daemon already stays for it
    with ours, ours.makefile("rb") as reader:
        ours.sendall(json.dumps({"op": "status"}).encode() + b"\n")
        assert json.loads(reader.readline())["state"] == "ready"
    client.join()
    assert daemon.idle_for() >= 100  # a status-only connection does not reset the idle clock


def test_a_stopping_daemon_says_so_and_hands_nothing_to_its_closed_pool(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, CONFIG)
    pool = FailingPool()
    daemon.pool = pool  # type: ignore[assignment]
    daemon.ready.set()
    daemon.stopping.set()
    ours, theirs = socket.socketpair()
    client = daemon.admit(theirs)
    with ours, ours.makefile("rb") as reader:
        for op in ("hello", "eval"):
            ours.sendall(json.dumps({"op": op, "argv": ["--tp-size", "2"]}).encode() + b"\n")
            assert json.loads(reader.readline()) == {"ok": False, "error": "the warm worker is stopping", "stopping": True}
    client.join()
    assert pool.asked == []

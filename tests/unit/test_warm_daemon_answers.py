"""The warm worker daemon's answers when its pool fails or it stops: the client reads why, not a closed connection."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from bisect_spec.errors import WorkerError
from bisect_spec.runtime import warm_daemon
from bisect_spec.runtime.warm_daemon import Daemon

CONFIG = {"spec": {"python": "/nonexistent/python"}, "idle": 60, "label": "test", "timeout": 5}


class FailingPool:
    """Stands for a worker pool whose replacement worker does not start (nothing here runs SGLang)."""

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.asked: list[list[str]] = []

    def evaluate(self, argv: list[str], timeout: float | None = None, gpus: int | None = None) -> dict[str, Any]:
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


def idle_daemon(tmp_path: Path) -> tuple[Daemon, FailingPool]:
    daemon = Daemon(tmp_path, {**CONFIG, "idle": 1})
    pool = FailingPool()
    daemon.pool = pool  # type: ignore[assignment]
    daemon.ready.set()
    daemon.last_activity = time.monotonic() - 100  # idle well past its limit
    return daemon, pool


def test_a_client_that_comes_as_the_idle_limit_passes_is_told_to_start_afresh(tmp_path: Path) -> None:
    # CI saw "warm worker: ValueError: write to closed file": a client accepted just as the idle limit passed
    # reached the workers the daemon was closing. The decision and a client's engaging take one lock.
    daemon, pool = idle_daemon(tmp_path)
    ours, theirs = socket.socketpair()
    client = daemon.admit(theirs)  # accepted; its hello not read yet
    assert daemon.stop_if_idle()
    with ours, ours.makefile("rb") as reader:
        ours.sendall(json.dumps({"op": "hello"}).encode() + b"\n")
        assert json.loads(reader.readline()) == {"ok": False, "error": "the warm worker is stopping", "stopping": True}
    client.join()
    assert pool.asked == []


def test_an_engaged_client_keeps_the_daemon_up_and_a_status_only_one_does_not(tmp_path: Path) -> None:
    daemon, _ = idle_daemon(tmp_path)
    ours, theirs = socket.socketpair()
    client = daemon.admit(theirs)
    with ours, ours.makefile("rb") as reader:
        ours.sendall(json.dumps({"op": "status"}).encode() + b"\n")
        status = json.loads(reader.readline())
        assert status["idle_seconds"] >= 100 and status["clients"] == 0  # what `workers list` shows
        assert daemon.idle_for() >= 100  # a status-only connection keeps nothing up
        ours.sendall(json.dumps({"op": "eval", "argv": []}).encode() + b"\n")
        assert json.loads(reader.readline())["ok"] is False  # answered (the pool fails), and engaged
        assert not daemon.stop_if_idle() and not daemon.stopping.is_set()
    client.join()
    assert daemon.idle_for() < 100  # its last request reset the idle clock
    assert not daemon.stop_if_idle()


def test_a_stopping_daemon_says_so_and_hands_nothing_to_its_closed_pool(tmp_path: Path) -> None:
    daemon, pool = idle_daemon(tmp_path)
    daemon.stopping.set()  # stopping for any reason (here, set by hand)
    ours, theirs = socket.socketpair()
    client = daemon.admit(theirs)
    with ours, ours.makefile("rb") as reader:
        for op in ("hello", "eval"):
            ours.sendall(json.dumps({"op": op, "argv": ["--tp-size", "2"]}).encode() + b"\n")
            assert json.loads(reader.readline()) == {"ok": False, "error": "the warm worker is stopping", "stopping": True}
    client.join()
    assert pool.asked == []


def test_an_idle_daemon_keeps_its_long_limit_while_memory_lasts_and_yields_once_short(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long idle limit keeps a warm worker for the next command; a machine short of memory takes it back after
    :data:`IDLE_WHEN_SHORT` seconds (the test run keeps 47 warm workers' worth of releases and boxes)."""
    daemon = Daemon(tmp_path, {**CONFIG, "idle": 600})
    daemon.pool = FailingPool()  # type: ignore[assignment]
    daemon.ready.set()
    total = 24 << 30
    available = {"bytes": total // 2}
    monkeypatch.setattr(psutil, "virtual_memory",
                        lambda: SimpleNamespace(total=total, available=available["bytes"]))
    daemon.last_activity = time.monotonic() - (warm_daemon.IDLE_WHEN_SHORT + 5)
    assert not daemon.stop_if_idle()  # half the memory free: its own limit holds
    available["bytes"] = int(total * warm_daemon.SHORT_OF_MEMORY) - 1
    daemon.last_activity = time.monotonic() - (warm_daemon.IDLE_WHEN_SHORT - 5)
    assert not daemon.stop_if_idle()  # short of memory, but used moments ago
    daemon.last_activity = time.monotonic() - (warm_daemon.IDLE_WHEN_SHORT + 5)
    assert daemon.stop_if_idle() and daemon.stopping.is_set()  # short of memory and idle: it yields

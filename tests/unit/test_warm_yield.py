"""Warm-worker daemons: short of memory, idle ones stop one at a time, the one idle the longest first (no worker is
started: the daemons' bookkeeping only, with real ``flock``s for "running"); a Ctrl-C while one is launched."""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

import pytest

from bisect_spec.runtime import warm, warm_daemon

CONFIG = {"idle": 600.0, "label": "SGLang 0.5.23 on h100",
          "spec": {"python": "/nonexistent/python", "pythonpath": [], "hardware": None, "gpus": 1}}


def daemon(workers: Path, key: str) -> warm_daemon.Daemon:
    directory = workers / key
    directory.mkdir(parents=True)
    return warm_daemon.Daemon(directory, CONFIG)


def test_the_daemon_idle_the_longest_yields_first_and_only_running_idle_ones_count(tmp_path: Path) -> None:
    mine, other = daemon(tmp_path, "b"), daemon(tmp_path, "c")
    mine._touch()  # idle from now
    assert mine._first_to_yield()  # nobody else has said anything
    other._mark("idle", time.time() - 100)  # idle for longer, but not running (its lock is free)
    assert mine._first_to_yield()
    with open(other.directory / "daemon.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # it runs
        assert not mine._first_to_yield()  # it stops first
        assert other._first_to_yield()
        other._mark("engaged")  # a client came: it no longer counts as idle
        assert mine._first_to_yield()
        other._mark("idle", time.time() + 100)  # idle since later than mine
        assert mine._first_to_yield()
    mine._mark("engaged")
    mine.connections = 1
    mine._touch()  # a connection ended while another is still open: still not idle
    assert (mine.directory / warm_daemon.IDLE_FILE).read_text() == "engaged"
    mine.connections = 0
    mine._touch()
    assert (mine.directory / warm_daemon.IDLE_FILE).read_text().startswith("idle ")


def test_a_ctrl_c_while_a_daemon_is_launched_is_raised_once_the_launch_returned() -> None:
    """``connect_or_start`` launches its daemon with interrupts deferred: a Ctrl-C inside ``Popen`` would otherwise
    lose the handle of the daemon it started (then left serving until its idle stop)."""
    launched = []
    with pytest.raises(KeyboardInterrupt), warm._interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        launched.append("the daemon")  # not cut short
    assert launched == ["the daemon"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

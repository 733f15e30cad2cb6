"""Processes the tests start, waited for by events and killed at teardown even when a test fails."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bisect_spec import worker

FAKE_SERVER = Path(__file__).parent / "resources" / "fake_server.py"


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 120.0) -> None:
    """Wait until ``condition()`` holds (an event: a file has N lines, a port answers, pids are gone).

    The bound is generous on purpose: it is only reached when the event never comes, so a
    busy machine makes a test slower, never red.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout:g} s for {what}")
        time.sleep(0.05)


class Janitor:
    """What a test started, killed at teardown whether the test passed or not.

    ``tool(popen)``: a process the test started (killed, with every descendant seen by
    :meth:`snapshot`). ``pidfile(path)``: a fake server's pid file; its pids are killed if
    they are still the processes the test started (started after the test began, running
    the fake server or one of its sleepers), so a reused pid is never touched.
    """

    def __init__(self) -> None:
        self.started = time.time()
        self.tools: list[subprocess.Popen[bytes]] = []
        self.pidfiles: list[Path] = []
        self.seen: dict[int, psutil.Process] = {}

    def tool(self, process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.tools.append(process)
        return process

    def pidfile(self, path: Path) -> Path:
        self.pidfiles.append(path)
        return path

    def snapshot(self, *others: psutil.Process) -> list[psutil.Process]:
        """The tools and ``others`` (a detached supervisor, say) with every live descendant, remembered for teardown."""
        found = []
        for root in [*(psutil.Process(t.pid) for t in self.tools if t.poll() is None), *others]:
            with contextlib.suppress(psutil.Error):
                found += [root, *root.children(recursive=True)]
        self.seen.update((p.pid, p) for p in found)
        return found

    def _ours(self, pid: int) -> psutil.Process | None:
        try:
            proc = psutil.Process(pid)
            command = " ".join(proc.cmdline())
            if proc.create_time() >= self.started - 1 and ("fake_server.py" in command or "time.sleep(3600)" in command):
                return proc
        except psutil.Error:
            pass
        return None

    def cleanup(self) -> None:
        for process in self.tools:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        procs = list(self.seen.values())
        for path in self.pidfiles:
            pids = path.read_text().split() if path.is_file() else []
            procs += [p for p in (self._ours(int(pid)) for pid in pids) if p is not None]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if proc.is_running():
                    proc.kill()
        psutil.wait_procs(procs, timeout=10)


def launched_pids(pidfile: Path) -> list[int]:
    return [int(line) for line in pidfile.read_text().split()] if pidfile.is_file() else []


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


#: processes the fake server starts in a mode, itself included (its pid file then has this many lines)
PROCESSES = {"spawn-children": 7, "ignore-sigterm": 2, "ready": 1}


def tree_is_up(pidfile: Path, mode: str) -> list[int]:
    """Wait until the fake server has started all its processes and its port answers; its pids."""
    wait_for(f"{PROCESSES[mode]} pids in {pidfile}", lambda: len(launched_pids(pidfile)) >= PROCESSES[mode])
    started = launched_pids(pidfile)
    argv = psutil.Process(started[0]).cmdline()
    port = int(argv[argv.index("--port") + 1])
    wait_for(f"the fake server to answer on port {port}",
             lambda: worker.http_get(f"http://127.0.0.1:{port}/health", timeout=5.0) is not None)
    return started


def gone(pids: list[int], procs: list[psutil.Process]) -> bool:
    """No pid of the fake's pid file runs, nor any process seen (psutil: a reused pid is not the same process)."""
    return not any(running(pid) for pid in pids) and not any(p.is_running() and running(p.pid) for p in procs)

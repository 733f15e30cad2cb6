"""Processes the tests start, waited for by events and killed at teardown even when a test fails."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bisect_spec.launch import supervision
from bisect_spec.runtime import worker

FAKE_SERVER = Path(__file__).parent / "resources" / "fake_server.py"
BISECT_SPEC = Path(sys.executable).with_name("bisect-spec")


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
             lambda: supervision.http_get(f"http://127.0.0.1:{port}/health", timeout=5.0) is not None)
    return started


def gone(pids: list[int], procs: list[psutil.Process]) -> bool:
    """No pid of the fake's pid file runs, nor any process seen (psutil: a reused pid is not the same process)."""
    return not any(running(pid) for pid in pids) and not any(p.is_running() and running(p.pid) for p in procs)


def _as_from_a_shell(terminal: bool) -> None:
    """In the tool, before it runs: the signals a test sends do what they do in a user's shell.

    SIGINT, SIGTERM and SIGHUP get their default action back: a test run under ``nohup``
    (SIGHUP ignored) or started with ``&`` from a script (SIGINT ignored) would otherwise
    pass the ignoring on, and the tool would never see Ctrl-C or the hang-up.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if terminal:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Tool:
    """``bisect-spec`` started by a test; ``terminal``: with a pseudo-terminal as its controlling terminal.

    What the tool writes to the terminal is read and dropped (a full terminal would stop
    it), until :meth:`close_terminal`.
    """

    def __init__(self, argv: list[str], janitor: Janitor, *, terminal: bool = False, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.terminal: int | None = None
        self._reading = threading.Event()
        self._reader: threading.Thread | None = None
        if terminal:
            self.terminal, follower = pty.openpty()
            self.process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, start_new_session=True,
                                            preexec_fn=lambda: _as_from_a_shell(True), env=env, cwd=cwd)
            os.close(follower)
            self._reading.set()
            self._reader = threading.Thread(target=self._drain, args=(self.terminal,), daemon=True)
            self._reader.start()
        else:
            self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd,
                                            preexec_fn=lambda: _as_from_a_shell(False))
        janitor.tool(self.process)

    def _drain(self, terminal: int) -> None:
        while self._reading.is_set():  # never blocked in read: close_terminal must really close it
            if select.select([terminal], [], [], 0.05)[0]:
                try:
                    os.read(terminal, 1 << 16)
                except OSError:
                    return

    def close_terminal(self) -> None:
        """Hang up: the kernel sends SIGHUP to the tool, as when a terminal window is closed."""
        assert self.terminal is not None and self._reader is not None
        self._reading.clear()
        self._reader.join()
        os.close(self.terminal)
        self.terminal = None


def evaluation_workers(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The evaluation workers (``worker_main.py``) among ``procs``: not the zygotes they are forked from."""
    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if str(worker.WORKER_SCRIPT) in proc.cmdline() and not _is_zygote(proc):
                found.append(proc)
    return found


def _is_zygote(proc: psutil.Process) -> bool:
    try:
        return Path(f"/proc/{proc.pid}/comm").read_text().strip() == "bisect-zygote"
    except OSError:
        return False

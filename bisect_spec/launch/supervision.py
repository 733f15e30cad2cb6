"""Supervision of real SGLang servers: a launch's process tree, its port, and leftovers.

A real ``launch_server`` starts a tree: the HTTP process, a scheduler per rank, a
detokenizer, sometimes grandchildren that outlive their parents. It runs under a
supervisor (``supervisor_main.py``, whose docstring says how and what it does not
cover) that ends the whole tree when this process stops or dies, however it dies.
Here every process seen is remembered too, the server gets a session of its own and
an environment marker, and on the way out all of it is stopped and the port checked
free. A marked process whose bisect-spec is gone is a leftover: named, never killed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bisect_spec.errors import WorkerError
from bisect_spec.runtime.processes import terminate_then_kill

log = logging.getLogger(__name__)

SUPERVISOR_SCRIPT = Path(__file__).with_name("supervisor_main.py")

LAUNCH_MARKER = "BISECT_SPEC_LAUNCH_ID"


def new_marker() -> str:
    """A launch marker naming this process: ``PID-STARTMS-N`` (its pid, start time in ms, a counter).

    With it a marked process can be told apart: its launcher still running (a launch in
    progress, maybe another terminal's) or gone (a leftover).
    """
    me = psutil.Process()
    return f"{me.pid}-{int(me.create_time() * 1000)}-{time.monotonic_ns()}"


def launcher_alive(marker: str) -> bool:
    """Whether the process that wrote ``marker`` still runs (the same process: its start time matches)."""
    parts = marker.split("-")
    try:
        pid = int(parts[0])
        started = int(parts[1]) if len(parts) > 2 else None  # older markers: PID-N
        proc = psutil.Process(pid)
        return started is None or int(proc.create_time() * 1000) == started
    except (ValueError, IndexError, psutil.Error):
        return False


@dataclass(frozen=True)
class Leftover:
    """A running process that may be in a launch's way; named, never killed."""

    pid: int | None  # None: another user's process, which cannot be seen
    command: str
    reason: str
    processes: int = 1

    def line(self) -> str:
        if self.pid is None:
            return f"{self.reason} by another user's process; bisect-spec leaves it alone"
        more = f" (and {self.processes - 1} more of its processes)" if self.processes > 1 else ""
        command = self.command if len(self.command) <= 200 else self.command[:197] + "..."
        return f"{self.reason}: pid {self.pid}{more}: {command}; bisect-spec leaves it alone"


def _command(proc: psutil.Process) -> str:
    import shlex

    try:
        return shlex.join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return "?"


def _listeners(ports: set[int]) -> dict[int | None, list[int]]:
    """pid -> the ``ports`` it listens on (TCP); key None: a listener whose pid cannot be seen (another user's)."""
    if not ports:
        return {}
    try:
        connections = psutil.net_connections("tcp")
    except (psutil.Error, OSError):
        return {}
    found: dict[int | None, list[int]] = {}
    for conn in connections:
        port = getattr(conn.laddr, "port", None)
        if conn.status == psutil.CONN_LISTEN and port in ports and port not in found.get(conn.pid, []):
            found.setdefault(conn.pid, []).append(port)
    return found


def leftover_servers(ports: Iterable[int] = ()) -> list[Leftover]:
    """Processes in a launch's way: trees of earlier launches whose bisect-spec is gone, holders of ``ports``.

    A leftover launch is a set of processes carrying the launch marker of a bisect-spec
    process that no longer runs (a crash before supervisors existed, or a supervisor killed
    by SIGKILL): one entry per launch, naming its oldest process, and the ``ports`` any of
    them holds. A process of no leftover listening on one of ``ports`` gets an entry of its
    own (started by bisect-spec or not). Only this user's processes can be seen.
    """
    listeners = _listeners(set(ports))
    groups: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            marker = proc.environ().get(LAUNCH_MARKER)
            if marker and proc.status() != psutil.STATUS_ZOMBIE:
                groups.setdefault(marker, []).append(proc)
    found: list[Leftover] = []
    running_launches: set[int] = set()
    for marker, procs in groups.items():
        if launcher_alive(marker):
            running_launches.update(p.pid for p in procs)
            continue
        held = sorted(port for p in procs for port in listeners.pop(p.pid, []))
        holding = f", holding port {', '.join(map(str, held))}" if held else ""
        with contextlib.suppress(psutil.Error):
            oldest = min(procs, key=lambda p: p.create_time())
            found.append(Leftover(oldest.pid, _command(oldest), f"left over from an earlier bisect-spec launch{holding}",
                                  len(procs)))
    for pid, held in sorted(listeners.items(), key=lambda item: item[0] or 0):
        reason = f"port {', '.join(map(str, held))} is held"
        if pid is None:
            found.append(Leftover(None, "", reason))
            continue
        whose = "by a launch of a running bisect-spec" if pid in running_launches else "not started by bisect-spec"
        with contextlib.suppress(psutil.Error):
            found.append(Leftover(pid, _command(psutil.Process(pid)), f"{reason} ({whose})"))
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be bound on ``host`` (nothing listens there any more)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes] | None:
    """``(status, body)`` of a GET on a loopback URL; None when nothing answers."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://127.0.0.1:", "http://[::1]:", "http://localhost:")):
        raise ValueError(f"health polling is loopback-only, not {url}")
    handler = urllib.request.ProxyHandler({})  # never through a proxy: the server is local
    opener = urllib.request.build_opener(handler)
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status), response.read(1 << 16)
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """While active, SIGTERM and SIGHUP raise KeyboardInterrupt (as SIGINT does).

    So a ``finally`` that stops a server tree runs whichever way the tool is told to
    stop. Only in the main thread (signal handlers cannot be set elsewhere, e.g. in a
    Ray task's thread); there the caller's own handling applies.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, raise_interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """While active, SIGINT/SIGTERM/SIGHUP wait: cleanup is not cut short by a second Ctrl-C.

    A signal that arrived is raised as KeyboardInterrupt when the block ends (unless the
    block is already unwinding from one). Main thread only, as :func:`interrupt_on_sigterm`.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def remember(signum: int, _frame: object) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, remember) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    unwinding = sys.exc_info()[0] is not None
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if pending and not unwinding:
        raise KeyboardInterrupt(f"received {signal.Signals(pending[0]).name} while stopping the server")


@dataclass
class ServerRun:
    """What supervising one server process tree saw; facts, classified by ``launch.py``.

    ``ended``: ``ready`` (health answered 200), ``exited`` (the root process ended
    first), ``deadline`` (neither before the deadline).
    """

    ended: str
    returncode: int | None
    seconds: float
    ready_seconds: float | None
    pids: list[int]
    leftover_pids: list[int]
    port: int
    port_freed: bool
    health: dict[str, Any]


def _ended(proc: psutil.Process, timeout: float) -> bool:
    """Wait up to ``timeout`` until ``proc`` has ended; a zombie has (it is not our child: init reaps it, in its time)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


class ServerTree:
    """A server process tree, started under a supervisor (``supervisor_main.py``) that outlives nothing.

    The supervisor ends the whole tree when the pipe from this process closes: on
    :meth:`stop`, and equally when this process dies without running any code (SIGKILL,
    the OOM killer). It detaches itself (it is not this process's child), so whoever kills
    this process's direct children does not kill it before it has done its work. Here the
    tree is also tracked by psutil while alive (every process seen is remembered: the
    ``pids`` of a launch), and whatever the supervisor failed to end is stopped from here too.
    """

    def __init__(self, command: Sequence[str], *, env: dict[str, str], log_path: Path, cwd: str | None = None,
                 grace: float = 3.0) -> None:
        self.command = list(command)
        self.marker = new_marker()
        self.env = {**env, LAUNCH_MARKER: self.marker}
        self.log_path = log_path
        self.cwd = cwd
        self.grace = grace
        self._pipes: subprocess.Popen[bytes] | None = None  # the supervisor's pipes; the process itself is gone
        self.supervisor: psutil.Process | None = None
        self.seen: dict[int, psutil.Process] = {}
        self._exit: int | None = None
        self._events = b""
        self.stopped: dict[str, Any] = {}

    def start(self, timeout: float = 120.0) -> None:
        """Start the supervisor, hand it the launch, wait until it says the server runs.

        :raises WorkerError: the supervisor or the server command cannot be started.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec = {"command": self.command, "env": self.env, "cwd": self.cwd, "log": str(self.log_path), "grace": self.grace}
        with open(self.log_path, "ab") as log_file:
            try:
                self._pipes = subprocess.Popen([sys.executable, str(SUPERVISOR_SCRIPT)], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=log_file, start_new_session=True)
            except OSError as exc:
                raise WorkerError(f"cannot start the launch supervisor {sys.executable}: {exc.strerror}") from exc
        assert self._pipes.stdin is not None
        try:
            self._pipes.stdin.write(json.dumps(spec).encode() + b"\n")
            self._pipes.stdin.flush()
        except OSError:
            pass  # it died at once: said below
        hello = self._event(timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._pipes.wait(timeout=timeout)  # the first process only forks the supervisor and exits
        if hello is not None and "supervisor" in hello:
            with contextlib.suppress(psutil.Error):
                self.supervisor = psutil.Process(int(hello["supervisor"]))
        if hello is None or "root" not in hello:
            self.stop()
            if hello is not None and "error" in hello:
                raise WorkerError(f"cannot start the server command {self.command[0]}: {hello['error']}")
            raise WorkerError(f"the launch supervisor did not start the server; see {self.log_path}")
        self.track()

    def _event(self, timeout: float) -> dict[str, Any] | None:
        """The supervisor's next JSON line within ``timeout`` (0: only one already there); None if none or it ended."""
        if self._pipes is None or self._pipes.stdout is None or self._pipes.stdout.closed:
            return None
        fd = self._pipes.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._events:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._events += chunk
        line, self._events = self._events.split(b"\n", 1)
        try:
            event: dict[str, Any] = json.loads(line)
        except ValueError:
            log.warning("launch supervisor wrote %r", line[:200])
            return {}
        if "exited" in event:
            self._exit = int(event["exited"])
        return event

    def track(self) -> None:
        """Remember every process of the tree alive now (the supervisor's descendants)."""
        if self.supervisor is None:
            return
        with contextlib.suppress(psutil.Error):
            for proc in self.supervisor.children(recursive=True):
                self.seen.setdefault(proc.pid, proc)

    def _strays(self) -> list[psutil.Process]:
        """Processes of this launch not (or no longer) under the supervisor: they carry its marker.

        (Not "the root's session": once the root has ended, its pid, and so a session id,
        may be reused by a process this launch never started.)
        """
        found: list[psutil.Process] = []
        for proc in psutil.process_iter():
            if proc.pid in self.seen or proc.pid == os.getpid():
                continue
            with contextlib.suppress(psutil.Error, OSError):
                if proc.environ().get(LAUNCH_MARKER) == self.marker:
                    found.append(proc)
        return found

    def alive(self) -> list[psutil.Process]:
        """Every process of this launch still running (pid reuse excluded by psutil)."""
        self.track()
        for proc in self._strays():
            self.seen.setdefault(proc.pid, proc)
        living = []
        for proc in self.seen.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    living.append(proc)
            except psutil.Error:
                continue
        return living

    def stop(self) -> list[int]:
        """End the tree: close the supervisor's pipe, wait for its report; return pids still alive after that.

        The supervisor SIGTERMs the tree and SIGKILLs what is left after ``grace``; what it
        missed (it was killed, or hung) is stopped from here the same way.
        """
        if self._pipes is None:
            return []
        self.track()
        with contextlib.suppress(OSError):
            if self._pipes.stdin is not None:
                self._pipes.stdin.close()
        deadline = time.monotonic() + 6 * self.grace + 30  # three rounds of TERM, grace, KILL, grace
        while time.monotonic() < deadline:
            event = self._event(deadline - time.monotonic())
            if event is None:  # it closed its end: it has ended
                break
            if "stopped" in event:
                self.stopped = event
        if self.supervisor is not None and not _ended(self.supervisor, max(1.0, deadline - time.monotonic())):
            log.warning("launch supervisor %d did not end; stopping the tree from here", self.supervisor.pid)
            terminate_then_kill([self.supervisor], grace=0.1)
        for _ in range(3):  # what the supervisor missed
            procs = self.alive()
            if not procs:
                break
            terminate_then_kill(procs, grace=self.grace)
        if self._pipes.stdout is not None:
            self._pipes.stdout.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._pipes.wait(timeout=self.grace)
        return sorted(p.pid for p in self.alive())

    @property
    def pids(self) -> list[int]:
        """Every process of the tree seen (by psutil here or by the supervisor), the supervisor not counted."""
        return sorted(set(self.seen) | set(self.stopped.get("stopped", [])))

    @property
    def returncode(self) -> int | None:
        """The server root's exit status once it ended (as Popen's: ``-N`` for signal N), else None."""
        if self._exit is None:
            self._event(0)
        return self._exit


def serve_until_ready(command: Sequence[str], *, env: dict[str, str], log_path: Path, port: int,
                      host: str = "127.0.0.1", deadline: float = 600.0, health_paths: Sequence[str] = ("/health",),
                      info_paths: Sequence[str] = ("/model_info", "/get_model_info"), poll_interval: float = 0.5,
                      grace: float = 3.0, cwd: str | None = None) -> ServerRun:
    """Start a server command, wait until its health endpoint answers 200, then stop it all.

    The command's stdout and stderr go to ``log_path``. Readiness is polled on
    ``127.0.0.1`` only. Whatever happens (ready, exited, deadline, KeyboardInterrupt,
    SIGTERM/SIGHUP to this process) the whole tree is stopped and the port checked
    free before this returns or re-raises.

    :raises WorkerError: the command cannot be started.
    """
    poll_host = "127.0.0.1"  # whatever the server binds, readiness is asked on loopback only
    tree = ServerTree(command, env=env, log_path=log_path, cwd=cwd, grace=grace)
    started = time.monotonic()
    ended, ready_seconds = "deadline", None
    health: dict[str, Any] = {}
    leftover: list[int] = []
    with interrupt_on_sigterm():
        try:
            tree.start()
            while time.monotonic() - started < deadline:
                tree.track()
                if tree.returncode is not None:
                    ended = "exited"
                    break
                for path in health_paths:
                    answer = http_get(f"http://{poll_host}:{port}{path}", timeout=min(5.0, poll_interval * 4))
                    if answer is not None and answer[0] == 200:
                        ended, ready_seconds = "ready", round(time.monotonic() - started, 3)
                        health["endpoint"] = path
                        break
                if ended == "ready":
                    for info_path in info_paths:
                        answer = http_get(f"http://{poll_host}:{port}{info_path}")
                        if answer is not None and answer[0] == 200:
                            with contextlib.suppress(ValueError):
                                health["model_info"] = json.loads(answer[1])
                            health["info_endpoint"] = info_path
                            break
                    break
                time.sleep(poll_interval)
        finally:
            with signals_deferred():
                leftover = tree.stop()
    freed = port_is_free(port, poll_host)
    for _ in range(20):
        if freed:
            break
        time.sleep(0.25)
        freed = port_is_free(port, poll_host)
    return ServerRun(ended=ended, returncode=tree.returncode, seconds=round(time.monotonic() - started, 3),
                     ready_seconds=ready_seconds, pids=tree.pids, leftover_pids=leftover, port=port,
                     port_freed=freed, health=health)

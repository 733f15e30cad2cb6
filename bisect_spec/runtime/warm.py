"""Warm workers: evaluation workers that outlive one command, so the next one answers at once.

Starting a worker imports SGLang (7 s on a quiet machine, 15-25 s on a busy one). A warm
worker (:mod:`bisect_spec.runtime.warm_daemon`) keeps one up between commands: ``probe``, ``shrink``
and the Python API's :class:`~bisect_spec.api.ProbeSession` start one on demand and reuse
it; ``bisect`` reuses one that is up (it would otherwise leave one per release behind).
Sweeps keep their own per-run workers (:mod:`bisect_spec.runtime.executor`), unless
``BISECT_SPEC_WARM=all``: then every command's evaluations run on warm workers (sweeps,
bisections, nightlies, the release smoke), so many commands on one target import SGLang once
(the test suite runs so: one warm worker per release and box kind for the whole run).

* **Key.** One warm worker per :class:`~bisect_spec.runtime.worker.WorkerSpec` but its GPU count
  (interpreter, import path, hardware profile, extra environment: what a worker process is started
  with) and per version of the code that runs in it. Model, draft and ``--env`` travel with each
  configuration's argv, and the count with each request, so one worker serves them all.
* **Idle stop.** ``BISECT_SPEC_WORKER_IDLE`` seconds (default :data:`DEFAULT_IDLE`) with no
  client connected, then it stops by itself; ``0`` turns warm workers off (every command
  starts and stops its own, as sweeps do).
* **Private.** Its socket lives in ``$BISECT_SPEC_HOME/workers/KEY/`` (mode 0700, like the
  ``workers`` folder above it). Before connecting, both folders must belong to this user and
  be closed to others, the socket too; the peer's uid is checked (``SO_PEERCRED``). A
  folder or socket that fails this is refused with a line naming the fix, never used.
* **One start.** ``start.lock`` (``flock``) serialises the check-and-start, so two commands
  at once start one daemon; the daemon holds ``daemon.lock`` for its life, so "is one
  running" is a lock test, not a stale pid file.
* **Interrupts.** A command interrupted (Ctrl-C) while the daemon it started is still
  starting stops it; one killed outright leaves it to its idle stop.

Hand-written rather than a library: ``multiprocessing.managers`` would serve the pool over
a socket, but it pickles (a client could make the daemon run code) and has no idle stop or
per-user checks; the protocol here is the worker's own JSON lines, relayed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import signal
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from bisect_spec.errors import NoWarmWorker, UsageError, WarmWorkerError, WorkerError
from bisect_spec.model.syntax import parse_module
from bisect_spec.runtime import environments
from bisect_spec.runtime.files import atomic_write
from bisect_spec.runtime.processes import start_daemon
from bisect_spec.runtime.worker import WORKER_SCRIPT, WorkerSpec

log = logging.getLogger(__name__)

IDLE_ENV = "BISECT_SPEC_WORKER_IDLE"
#: seconds a warm worker waits for its next client before it stops
DEFAULT_IDLE = 300.0
#: a Unix socket's address holds at most 107 bytes
MAX_ADDRESS = 107
DAEMON_MODULE = "bisect_spec.runtime.warm_daemon"

Notify = Callable[[str], None]
#: ``commands`` (default): probe, shrink and ``ProbeSession`` use warm workers; ``all``: every command does
SCOPE_ENV = "BISECT_SPEC_WARM"
SCOPES = ("commands", "all")


def idle_limit() -> float:
    """``BISECT_SPEC_WORKER_IDLE`` in seconds (0: warm workers off).

    :raises UsageError: not a number of seconds.
    """
    raw = os.environ.get(IDLE_ENV, "").strip()
    if not raw:
        return DEFAULT_IDLE
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{IDLE_ENV}={raw} is not a number of seconds: set e.g. {IDLE_ENV}=300, or 0 for no "
                         "warm workers") from None
    if value < 0:
        raise UsageError(f"{IDLE_ENV}={raw} is negative: set seconds, or 0 for no warm workers")
    return value


def everywhere() -> bool:
    """Whether every command evaluates on warm workers (``BISECT_SPEC_WARM=all``), not only probe and shrink.

    :raises UsageError: a value other than ``commands`` or ``all``.
    """
    raw = os.environ.get(SCOPE_ENV, "").strip() or SCOPES[0]
    if raw not in SCOPES:
        raise UsageError(f"{SCOPE_ENV}={raw} is not a scope: set {SCOPE_ENV}=all (every command on warm workers) "
                         f"or {SCOPE_ENV}=commands (probe and shrink only, the default)")
    return raw == "all" and idle_limit() > 0


def workers_dir() -> Path:
    return environments.home() / "workers"


def _code_version() -> str:
    """Size and mtime of the code a warm worker runs: an edited or upgraded bisect-spec gets a fresh worker.

    The code is the daemon's import closure (every ``bisect_spec`` module ``warm_daemon.py`` imports, directly or
    through others, lazy imports included) and everything under ``inside/``, which the worker runs in the release's
    environment, with the data files it reads (``store.INSIDE_DATA``)."""
    from bisect_spec.runtime.store import INSIDE_DATA

    package = Path(__file__).parent.parent
    files = sorted({*WORKER_SCRIPT.parent.rglob("*.py"), *_daemon_closure(package),
                    *(package / "data" / name for name in INSIDE_DATA)})
    return ";".join(f"{f.relative_to(package).as_posix()}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                    for f in files if f.is_file())


def _daemon_closure(package: Path) -> set[Path]:
    """:func:`_import_closure` of ``warm_daemon.py``, kept on disk (``cache/daemon-closure.json`` in the home) with
    the sizes and modification times of every module of the package it was read from: parsing every module the
    daemon imports is most of what a warm probe's command costs, and only an edit changes the answer."""
    stamp = ";".join(f"{f.relative_to(package).as_posix()}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                     for f in sorted(package.rglob("*.py")))
    kept = environments.home() / "cache" / "daemon-closure.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(kept.read_text())
        if record["package"] == str(package) and record["stamp"] == stamp:
            return {package / name for name in record["closure"]}
    closure = _import_closure(Path(__file__).with_name("warm_daemon.py"))
    with contextlib.suppress(OSError):
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(kept, json.dumps({"package": str(package), "stamp": stamp, "closure": sorted(
            f.relative_to(package).as_posix() for f in closure)}).encode())
    return closure


def _import_closure(start: Path) -> set[Path]:
    """``start`` and every module of this package it imports, transitively (read from the sources, not imported)."""
    import ast

    package = Path(__file__).parent.parent
    seen: set[Path] = set()
    todo = [start]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for node in ast.walk(parse_module(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                     if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            for name in names:
                if name and name.split(".")[0] == package.name:
                    parts = name.split(".")[1:]
                    todo += [package / Path(*parts[:n]) / "__init__.py" for n in range(len(parts) + 1)]
                    if parts:
                        todo += [package / Path(*parts).with_suffix(".py")]
    return seen


def key(spec: WorkerSpec) -> str:
    """The warm worker a spec is served by (its folder name under :func:`workers_dir`): one per release, box kind
    and environment, serving every GPU count of that kind (each request names its count)."""
    record = spec_record(spec)
    record.pop("start_timeout", None)
    record.pop("gpus", None)
    text = json.dumps({"spec": record, "code": _code_version()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def spec_record(spec: WorkerSpec) -> dict[str, Any]:
    record = asdict(spec)
    record.pop("log_path", None)
    return record


def private_dir(path: Path, *, create: bool) -> Path:
    """``path``, a folder of this user's that no one else may enter (created so when ``create``).

    :raises WorkerError: it belongs to another user, or others may read or enter it.
    """
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise WarmWorkerError(f"{path} is not a folder; remove it (bisect-spec keeps its warm workers' sockets there)")
    if info.st_uid != os.getuid():
        raise WarmWorkerError(f"refusing warm worker folder {path}: it belongs to uid {info.st_uid}, not you "
                          f"({os.getuid()}); remove it or set BISECT_SPEC_HOME to a folder of yours")
    if info.st_mode & 0o077:
        raise WarmWorkerError(f"refusing warm worker folder {path}: mode {stat.S_IMODE(info.st_mode):o} lets others in; "
                          f"run: chmod 700 {path}")
    return path


def _peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class Connection:
    """One client connection to a warm worker: a request, then its reply, in turn."""

    def __init__(self, directory: Path, *, timeout: float | None = None) -> None:
        address = directory / "sock"
        private_dir(directory.parent, create=False)
        private_dir(directory, create=False)
        info = address.lstat()
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
            raise WarmWorkerError(f"refusing {address}: not a socket of yours; remove it")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(str(address))
            if _peer_uid(self.sock) != os.getuid():
                raise WarmWorkerError(f"refusing {address}: served by another user's process")
        except BaseException:
            self.sock.close()
            raise
        self.reader = self.sock.makefile("rb")
        self.directory = directory

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send ``request``; its reply.

        :raises ConnectionError: the daemon went away (stopped, idle, killed) before replying.
        """
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        line = self.reader.readline()
        if not line:
            raise ConnectionError("the warm worker closed the connection")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.reader.close()
        with contextlib.suppress(OSError):
            self.sock.close()


def running(directory: Path) -> bool:
    """Whether a daemon serves ``directory`` (it holds ``daemon.lock``)."""
    lock_path = directory / "daemon.lock"
    if not lock_path.exists():
        return False
    with open(lock_path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def daemon_pid(directory: Path) -> int | None:
    """The pid of the daemon serving ``directory``, if it runs (checked: it is that daemon)."""
    try:
        pid = int((directory / "pid").read_text().split()[0])
        command = psutil.Process(pid).cmdline()
    except (OSError, ValueError, IndexError, psutil.Error):
        return None
    return pid if DAEMON_MODULE in command and str(directory) in command else None


@contextlib.contextmanager
def _start_lock(directory: Path) -> Iterator[None]:
    with open(directory / "start.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _wait_for_socket(directory: Path) -> Connection:
    """Connect once the daemon just started listens (an event: its socket answers)."""
    began = time.monotonic()
    while True:
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return Connection(directory)
        waited = time.monotonic() - began
        if waited > 60.0 or (waited > 10.0 and not running(directory)):
            raise WarmWorkerError(f"the warm worker did not start; see {directory / 'daemon.log'} "
                                  f"(or run without warm workers: {IDLE_ENV}=0)")
        time.sleep(0.02)


def _wait_until_stopped(directory: Path, timeout: float = 60.0) -> None:
    """Wait until the daemon of ``directory`` has ended (an event: its lock is free)."""
    deadline = time.monotonic() + timeout
    while running(directory):
        if time.monotonic() > deadline:
            raise WarmWorkerError(f"the warm worker in {directory} neither serves nor stops; "
                              f"bisect-spec workers stop {directory.name}")
        time.sleep(0.05)


def connect_or_start(spec: WorkerSpec, *, label: str, timeout: float, start: bool = True,
                     notify: Notify | None = None) -> tuple[Connection, dict[str, Any]] | None:
    """A connection to the warm worker of ``spec``, started when none runs (unless not ``start``); its hello.

    The hello waits until the worker has imported SGLang; ``notify`` hears at once when that
    is to be waited for. Returns None when ``start`` is false and none runs.

    :raises WorkerError: a folder or socket that is not private; the worker does not start
        (its reason: SGLang does not import, say).
    """
    directory = private_dir(workers_dir(), create=True) / key(spec)
    private_dir(directory, create=True)
    if len(str(directory / "sock")) > MAX_ADDRESS:
        raise WarmWorkerError(f"the warm worker socket path {directory / 'sock'} is longer than {MAX_ADDRESS} bytes: "
                          f"set a shorter BISECT_SPEC_HOME, or {IDLE_ENV}=0")
    for _attempt in range(3):
        started_here = False
        with _start_lock(directory):
            if not running(directory):
                if not start:
                    return None
                (directory / "daemon.json").write_text(json.dumps(
                    {"spec": spec_record(spec), "idle": idle_limit(), "label": label, "timeout": timeout}))
                if notify:
                    notify(f"starting a warm evaluation worker for {label}: importing SGLang "
                           f"(it stays up {idle_limit():g} s after its last use)")
                process = None
                try:
                    with _interrupts_deferred():  # a Ctrl-C inside Popen would lose the handle of what it started
                        process = start_daemon([sys.executable, "-m", DAEMON_MODULE, str(directory)],
                                               env=dict(os.environ), log_path=directory / "daemon.log")
                    process.wait()
                    conn = _wait_for_socket(directory)
                except BaseException:  # interrupted before it listens: it starts anyway, detached; stop it
                    if process is not None:
                        _stop_once_started(directory, process)
                    raise
                started_here = True
            else:
                try:
                    conn = Connection(directory)
                except (FileNotFoundError, ConnectionRefusedError):  # it is stopping: wait, then start afresh
                    _wait_until_stopped(directory)
                    continue
        try:
            if not started_here and notify:
                state = conn.call({"op": "status"})
                if state.get("state") == "starting":
                    notify(f"waiting for the warm evaluation worker for {label} (pid {state.get('pid')}), "
                           "which another command started: it is importing SGLang")
            hello = conn.call({"op": "hello"})
        except ConnectionError:
            conn.close()
            continue  # it stopped (idle) just as we came: start afresh
        except BaseException:
            conn.close()
            if started_here:  # interrupted while our own daemon starts: stop it, leave nothing half-started
                stop(directory)
            raise
        if hello.get("stopping"):  # it decided to stop (its idle limit, or `workers stop`) as we came: start afresh
            conn.close()
            _wait_until_stopped(directory)
            continue
        if not hello.get("ok"):
            conn.close()
            if started_here:
                stop(directory)
            raise WorkerError(str(hello.get("error")))
        hello["started_here"] = started_here
        return conn, hello
    raise WarmWorkerError("the warm worker kept stopping as it was reached; run again, or set "
                      f"{IDLE_ENV}=0 to start a worker of its own")


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """A Ctrl-C (SIGINT) that comes while it lasts is acted on when it ends, by the handler there was (on the main
    thread; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, _frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        previous(signal.SIGINT, None)
    elif caught and previous == signal.SIG_DFL:
        raise KeyboardInterrupt


def _stop_once_started(directory: Path, launcher: Any, timeout: float = 30.0) -> None:
    """Stop the daemon ``launcher`` (the ``Popen`` of :func:`processes.start_daemon`) is starting for ``directory``,
    once it has written its pid (an event): a command interrupted (Ctrl-C) before its daemon listens must not leave
    it serving until its idle stop. A daemon that ends before (it holds its lock from its first step) has nothing to
    stop."""
    began = time.monotonic()
    unlocked_since: float | None = None
    while time.monotonic() - began < timeout:
        if daemon_pid(directory) is not None:
            stop(directory)
            return
        if launcher.poll() is None or running(directory):  # still forking the daemon, or the daemon holds its lock
            unlocked_since = None
        elif unlocked_since is None:
            unlocked_since = time.monotonic()
        elif time.monotonic() - unlocked_since > 2.0:
            return
        time.sleep(0.02)


def stop(directory: Path, *, wait: float = 10.0) -> int | None:
    """Stop the daemon of ``directory`` (SIGTERM; it stops its workers) and wait until it has; its pid."""
    pid = daemon_pid(directory)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        try:
            proc.wait(timeout=wait)
        except psutil.TimeoutExpired:
            from bisect_spec.runtime.processes import kill_tree

            kill_tree(pid, grace=1.0)
    return pid


def listing() -> list[dict[str, Any]]:
    """Every warm worker of this ``BISECT_SPEC_HOME`` that runs: its status (``key`` added)."""
    base = workers_dir()
    if not base.is_dir():
        return []
    private_dir(base, create=False)
    found = []
    for directory in sorted(p for p in base.iterdir() if p.is_dir()):
        if not running(directory):
            continue
        try:
            conn = Connection(directory, timeout=10.0)
        except (OSError, WorkerError):
            continue
        try:
            state = conn.call({"op": "status"})
        except (OSError, ValueError):
            continue
        finally:
            conn.close()
        state["key"] = directory.name
        found.append(state)
    return found


def names_worker(name: str, state: dict[str, Any]) -> bool:
    """Whether ``name`` names the warm worker of ``state``: its key, or part of its target. A target with a GPU
    count (``SGLang 0.5.23 on h100x8``, as a session names it) names the worker of its box, which serves every
    count (``SGLang 0.5.23 on h100``)."""
    label = str(state.get("label", ""))
    return name == state["key"] or name in label or re.sub(r"(?<=\w)x\d+$", "", name.strip()) in label


def stop_all(names: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Stop the warm workers whose key or label contains one of ``names`` (all when empty); who was stopped."""
    stopped = []
    for state in listing():
        if names and not any(names_worker(n, state) for n in names):
            continue
        stop(workers_dir() / state["key"])
        stopped.append(state)
    return stopped


class WarmPool:
    """An :class:`~bisect_spec.runtime.executor.EvaluationPool` served by a warm worker.

    ``jobs`` above 1 asks the daemon for more workers (it starts them in the background,
    serving on the first one meanwhile); :meth:`imap_unordered` then keeps ``jobs``
    connections busy. :meth:`close` only disconnects: the daemon stays for the next command.
    """

    def __init__(self, spec: WorkerSpec, *, jobs: int = 1, timeout: float = 60.0, label: str = "?",
                 start: bool = True, notify: Notify | None = None, daemon_label: str | None = None) -> None:
        self.spec = spec
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.label = label
        #: what the daemon serves, in words (``workers list``): every GPU count of the box's kind
        self.daemon_label = daemon_label or label
        self.start_if_missing = start
        self.notify = notify
        self.info: dict[str, Any] = {}
        self.hello: dict[str, Any] = {}
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._directory: Path | None = None
        self._local = threading.local()  # other threads' connections (:meth:`evaluate`)
        self._opened: list[Connection] = []
        self._closed = False

    @property
    def replaced(self) -> int:
        return 0  # the daemon replaces crashed workers itself

    def start(self) -> dict[str, Any]:
        """Connect (starting the daemon if needed) and wait until its worker is up; the worker's self-description.

        :raises WorkerError: see :func:`connect_or_start`.
        :raises NoWarmWorker: not starting, and none runs (the session then starts a worker of its own).
        """
        if self._conn is not None:
            return self.info
        self._closed = False
        started = False  # whether this command started the daemon it reached
        for _attempt in range(3):
            found = connect_or_start(self.spec, label=self.daemon_label, timeout=self.timeout,
                                     start=self.start_if_missing, notify=self.notify)
            if found is None:
                raise NoWarmWorker(f"no warm worker runs for {self.label}")
            conn, hello = found
            started = started or bool(hello["started_here"])
            box = self._describe_box(conn)
            if box.get("ok"):
                break
            conn.close()
            if not box.get("stopping"):
                if started:  # ours, and it cannot serve: leave nothing half-started
                    stop(conn.directory)
                raise WarmWorkerError(f"the warm worker for {self.daemon_label} cannot describe its box "
                                      f"({box.get('error')}); run again, or set {IDLE_ENV}=0")
            # it stops (its idle limit, `workers stop`) just after our hello: as connect_or_start, start afresh
        else:
            raise WarmWorkerError("the warm worker kept stopping as it was reached; run again, or set "
                                  f"{IDLE_ENV}=0 to start a worker of its own")
        self._conn, self.hello = conn, hello
        self._directory = conn.directory
        self.info = {**hello["info"], "hardware": box["reply"]["hardware"],
                     "warm_worker": {"pid": hello["pid"], "started_now": hello["started_here"],
                                     "served_before": hello["served"]}}
        if self.jobs > 1:
            self._call(conn, {"op": "grow", "jobs": self.jobs})
        return self.info

    def _describe_box(self, conn: Connection) -> dict[str, Any]:
        """The worker's own description of this pool's box (the daemon's hello describes the count it started
        with); a daemon that went away reads as one that is stopping."""
        request = {"op": "request", "payload": self._for_this_box({"op": "info"}), "timeout": self.timeout}
        try:
            return conn.call(request)
        except (ConnectionError, OSError):
            return {"ok": False, "stopping": True}

    def _for_this_box(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` naming this pool's GPU count: the daemon's workers serve every count of the box's kind."""
        return {**request, "gpus": self.spec.gpus}

    def _call(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        try:
            return conn.call(request)
        except (ConnectionError, OSError) as exc:
            pid = self.hello.get("pid")
            raise WarmWorkerError(f"the warm evaluation worker (pid {pid}) for {self.label} stopped mid-way ({exc}); "
                              "run the command again") from exc

    def _main(self) -> Connection:
        if self._conn is None:
            self.start()
        assert self._conn is not None
        return self._conn

    def evaluate(self, argv: Sequence[str]) -> dict[str, Any]:
        """One evaluation. Called from several threads at once (a sweep's shrinks), each thread but the main one
        has a connection of its own, so the daemon's ``jobs`` workers serve them side by side."""
        request = self._for_this_box({"op": "eval", "argv": list(argv), "timeout": self.timeout})
        if self.jobs > 1 and threading.current_thread() is not threading.main_thread():
            conn = self._thread_conn()
            reply = self._call(conn, request)
        else:
            with self._lock:
                reply = self._call(self._main(), request)
        if not reply.get("ok"):
            raise WorkerError(f"warm worker: {reply.get('error')}")
        record: dict[str, Any] = reply["reply"]
        return record

    def _thread_conn(self) -> Connection:
        """This thread's own connection to the daemon, opened on first use, closed by :meth:`close`."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self._lock:
                self._refuse_if_closed()
                directory = self._main().directory
            conn = Connection(directory)
            with self._lock:
                if self._closed:  # closed while this thread connected: this connection is not kept either
                    conn.close()
                    self._refuse_if_closed()
                self._opened.append(conn)
            self._local.conn = conn
        return conn

    def _refuse_if_closed(self) -> None:
        """A thread still evaluating when the command closed its pool reconnects to nothing."""
        if self._closed:
            raise WarmWorkerError(f"the warm worker for {self.label} was disconnected")

    def request(self, payload: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        with self._lock:
            reply = self._call(self._main(), {"op": "request", "payload": self._for_this_box(payload),
                                              "timeout": timeout})
        if not reply.get("ok"):
            raise WorkerError(f"warm worker: {reply.get('error')}")
        answer: dict[str, Any] = reply["reply"]
        return answer

    def imap_unordered(self, items: Iterable[tuple[Any, Sequence[str]]], *,
                       depth: int = 2) -> Iterator[tuple[Any, dict[str, Any]]]:
        """Evaluate ``(key, argv)`` pairs over ``jobs`` connections; ``(key, record)`` as they finish."""
        pending = list(items)
        if self.jobs == 1 or len(pending) <= 1:
            for item_key, argv in pending:
                yield item_key, self.evaluate(argv)
            return
        self._main()
        assert self._directory is not None
        directory = self._directory
        local = threading.local()
        opened: list[Connection] = []

        def one(argv: Sequence[str]) -> dict[str, Any]:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = Connection(directory)
                opened.append(conn)
            reply = self._call(conn, self._for_this_box({"op": "eval", "argv": list(argv), "timeout": self.timeout}))
            if not reply.get("ok"):
                raise WorkerError(f"warm worker: {reply.get('error')}")
            record: dict[str, Any] = reply["reply"]
            return record

        try:
            with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="warm-client") as threads:
                futures = {threads.submit(one, argv): item_key for item_key, argv in pending}
                try:
                    for future in as_completed(futures):
                        yield futures[future], future.result()
                finally:
                    for future in futures:
                        future.cancel()
        finally:  # also when the caller stops early (a budget, an interrupt) or a worker fails: no socket left open
            for conn in opened:
                conn.close()

    def worker_pids(self) -> list[int]:
        """The warm worker's evaluation worker processes (not the daemon)."""
        with self._lock:
            state = self._call(self._main(), {"op": "status"})
        return [int(pid) for pid in state.get("workers", [])]

    def close(self) -> None:
        """Disconnect; the warm worker stays up for the next command until its idle stop."""
        self._closed = True
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
            self._local = threading.local()
            if self._conn is not None:
                self._conn.close()
                self._conn = None

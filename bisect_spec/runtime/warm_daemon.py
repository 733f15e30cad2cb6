"""A warm worker: a managed daemon that keeps evaluation workers of one spec up between commands.

Run as ``python -m bisect_spec.runtime.warm_daemon DIR`` by :func:`bisect_spec.runtime.warm.connect_or_start`
(never by hand). ``DIR`` (mode 0700, under ``$BISECT_SPEC_HOME/workers/``) holds what it is
told (``daemon.json``: the :class:`~bisect_spec.runtime.worker.WorkerSpec`, the idle limit, a label)
and what it makes: ``sock`` (the Unix socket it serves), ``pid``, ``daemon.lock`` (held for
its whole life: a lock that can be taken means no daemon runs), ``worker.log``.

Invariants, the reasons it may outlive the command that started it:

* It is deliberate and managed, never an orphan: it forks away at once (nobody's child,
  a session of its own), stops by itself once no client has been connected for ``idle``
  seconds (counted from its start, so a client killed while it starts leaves a daemon
  that still stops), or for :data:`IDLE_WHEN_SHORT` seconds once the machine is short of memory,
  stops on SIGTERM/SIGINT/SIGHUP and on the ``stop`` request
  (``bisect-spec workers stop``), and is listed by ``bisect-spec workers list``.
* Its evaluation workers die with it: they are ordinary :class:`~bisect_spec.runtime.worker.WorkerPool`
  workers, which ask the kernel for SIGKILL when their parent (this daemon) dies.
* At most one daemon per ``DIR``: a second one finds ``daemon.lock`` held and exits.
* Requests are line-delimited JSON, one reply per request, in order, per connection; many
  connections at once are fine (one thread each); evaluations share the pool's workers,
  so two clients on one worker are served one after the other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bisect_spec.errors import WorkerError
from bisect_spec.runtime.warm import running
from bisect_spec.runtime.worker import WorkerPool, WorkerSpec

#: once less than this share of the machine's memory is available, an idle daemon stops after
#: :data:`IDLE_WHEN_SHORT` seconds instead of its own (longer) limit: a warm worker holds SGLang in memory
#: (0.6 GB at rest, more after building a large model), and a long idle limit must not cost another process
#: its memory
SHORT_OF_MEMORY = 0.25
IDLE_WHEN_SHORT = 30.0

#: in a daemon's folder: ``idle SECONDS`` (since when, epoch) or ``engaged``, read by the daemons beside it
IDLE_FILE = "idle"

#: requests whose answer depends only on the release (asked by every session: the architecture
#: check, the flag table), answered from memory after the first time
CACHED = frozenset({"architecture", "flags", "env_vars"})


def short_of_memory() -> bool:
    """Whether less than :data:`SHORT_OF_MEMORY` of the machine's memory is available."""
    memory = psutil.virtual_memory()
    return memory.available < SHORT_OF_MEMORY * memory.total


def spec_from_record(record: dict[str, Any], log_path: Path) -> WorkerSpec:
    """The :class:`WorkerSpec` a ``daemon.json`` names (JSON has lists where the spec has tuples)."""
    return WorkerSpec(python=record["python"], pythonpath=tuple(record.get("pythonpath", ())),
                      hardware=record.get("hardware"), gpus=int(record.get("gpus", 8)),
                      torchvision_shim=bool(record.get("torchvision_shim", True)), log_path=str(log_path),
                      extra_env=tuple((str(k), str(v)) for k, v in record.get("extra_env", ())),
                      start_timeout=float(record.get("start_timeout", 240.0)))


class Daemon:
    """The serving loop: a start-up thread, an accept loop that watches the idle limit, a thread per client."""

    def __init__(self, directory: Path, config: dict[str, Any]) -> None:
        self.directory = directory
        self.label = str(config.get("label", "?"))
        self.idle = float(config["idle"])
        self.pool = WorkerPool(spec_from_record(config["spec"], directory / "worker.log"), jobs=1,
                               timeout=float(config.get("timeout", 120.0)))
        self.ready = threading.Event()
        self.stopping = threading.Event()
        self.error: str | None = None
        self.started = time.time()
        self.last_activity = time.monotonic()
        self.connections = 0
        self.served = 0
        self._lock = threading.Lock()
        self._grow_lock = threading.Lock()
        self._answers: dict[str, dict[str, Any]] = {}
        #: why it stopped, in words: the last line of its ``daemon.log``
        self.stop_reason = "stopped"

    # -- life --------------------------------------------------------------------

    def _boot(self) -> None:
        try:
            self.pool.start()
        except WorkerError as exc:
            self.error = str(exc)
        except BaseException as exc:  # said to every client, then the daemon stops
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def _touch(self) -> None:
        self.last_activity = time.monotonic()
        if not self.connections:
            self._mark("idle", time.time())

    def _mark(self, state: str, since: float | None = None) -> None:
        """Say in ``IDLE_FILE`` whether it is idle and since when (seconds since the epoch), for the daemons beside
        it: short of memory, the one idle the longest stops first (:meth:`_first_to_yield`)."""
        with contextlib.suppress(OSError):
            (self.directory / IDLE_FILE).write_text(state if since is None else f"{state} {since}")

    def _first_to_yield(self) -> bool:
        """Whether no other running daemon of this home has been idle longer (ties: the smaller key): short of
        memory, daemons stop one at a time, the longest idle first, so that memory freed by one can keep the
        others (all that had been idle 30 s used to stop at once; a CI run restarted 26 of its 77)."""
        mine = (time.time() - (time.monotonic() - self.last_activity), self.directory.name)
        for other in self.directory.parent.iterdir():
            if other == self.directory or not other.is_dir():
                continue
            try:
                state, since = (other / IDLE_FILE).read_text().split()
                theirs = (float(since), other.name)
            except (OSError, ValueError):
                continue  # starting, engaged, or never served
            if state == "idle" and theirs < mine and running(other):
                return False
        return True

    def idle_for(self) -> float:
        with self._lock:
            return 0.0 if self.connections else time.monotonic() - self.last_activity

    def serve(self, listener: socket.socket) -> int:
        def on_signal(number: int, _frame: Any) -> None:
            self.stop_reason = f"{signal.Signals(number).name} received"
            self.stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
        _log(f"serving {self.label} (pid {os.getpid()})")
        self._mark("idle", time.time())
        threading.Thread(target=self._boot, name="warm-boot", daemon=True).start()
        listener.settimeout(0.5)
        try:
            while not self.stopping.is_set():
                if self.stop_if_idle():
                    break
                if self.ready.is_set() and self.error is not None and self.idle_for() > 0:
                    self.stop_reason = f"it cannot serve: {self.error}"
                    break  # it cannot serve: stop once the clients were told
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    if self.stopping.is_set():
                        break
                    raise
                self.admit(conn)
        finally:
            self.stopping.set()  # a client still connected is told so, instead of writing to a closed worker
            listener.close()
            self.pool.close()
            _log(f"stopped: {self.stop_reason}; {self.served} evaluations in {time.time() - self.started:.0f} s")
        return 0

    # -- clients -----------------------------------------------------------------

    def stop_if_idle(self) -> bool:
        """Decide to stop once no client is engaged and the idle limit has passed; whether it did.

        Decided under the lock a client takes to engage (:meth:`_client`), so a client either engaged
        first, and keeps the daemon up, or finds it stopping and is told so: never served by workers
        the daemon is closing (``write to closed file``, seen once in CI before this).
        """
        with self._lock:
            if self.connections:
                return False
            idle = time.monotonic() - self.last_activity
            if idle < self.idle and (idle < IDLE_WHEN_SHORT or not short_of_memory() or not self._first_to_yield()):
                return False
            if idle >= self.idle:
                self.stop_reason = f"idle for {idle:.0f} s (its limit: {self.idle:g} s)"
            else:
                memory = psutil.virtual_memory()
                self.stop_reason = (f"idle for {idle:.0f} s while the machine was short of memory "
                                    f"({memory.available / 2**30:.1f} of {memory.total / 2**30:.1f} GiB available)")
            self.stopping.set()
            return True

    def admit(self, conn: socket.socket) -> threading.Thread:
        """Serve ``conn`` on a thread of its own."""
        thread = threading.Thread(target=self._client, args=(conn,), daemon=True)
        thread.start()
        return thread

    def _client(self, conn: socket.socket) -> None:
        engaged = False  # a connection that only asks for the status (workers list) keeps nothing up
        try:
            with conn, conn.makefile("rb") as reader:
                for line in reader:
                    request = json.loads(line)
                    if request.get("op") != "status" and not engaged:
                        with self._lock:  # against stop_if_idle: engaged before it decides, or told it is stopping
                            if not self.stopping.is_set():
                                engaged = True
                                self.connections += 1
                                self._mark("engaged")
                    try:
                        reply = self.answer(request)
                    except Exception as exc:  # the client is told why, instead of reading a closed connection
                        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    conn.sendall(json.dumps(reply, default=repr).encode() + b"\n")
                    if request.get("op") == "stop":
                        self.stop_reason = "asked to stop (bisect-spec workers stop, or the command that started it)"
                        self.stopping.set()
                        return
        except (OSError, ValueError):
            pass  # a client that went away or wrote garbage: its connection ends, nothing else
        finally:
            if engaged:
                with self._lock:
                    self.connections -= 1
                    self._touch()

    def _wait_ready(self) -> str | None:
        while not self.ready.wait(0.5):
            if self.stopping.is_set():
                return "the warm worker is stopping"
        return self.error

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return {"ok": True, **self.status()}
        if op == "stop":
            return {"ok": True}
        error = self._wait_ready()
        if self.stopping.is_set():
            return {"ok": False, "error": "the warm worker is stopping", "stopping": True}
        if error is not None:
            return {"ok": False, "error": error}
        if op == "hello":
            return {"ok": True, "info": self.pool.info, **self.status()}
        if op == "eval":
            record = self.pool.evaluate(request["argv"], request.get("timeout"), request.get("gpus"))
            with self._lock:
                self.served += 1
            return {"ok": True, "reply": record}
        if op == "request":
            payload = request["payload"]
            cached = json.dumps(payload, sort_keys=True) if payload.get("op") in CACHED else None
            if cached is not None and cached in self._answers:
                return {"ok": True, "reply": self._answers[cached]}
            try:
                reply = self.pool.request(payload, float(request.get("timeout", 60.0)))
            except WorkerError as exc:
                return {"ok": False, "error": str(exc)}
            if cached is not None:
                self._answers[cached] = reply
            return {"ok": True, "reply": reply}
        if op == "grow":
            threading.Thread(target=self._grow, args=(int(request["jobs"]),), daemon=True).start()
            return {"ok": True}
        return {"ok": False, "error": f"unknown request {op!r}"}

    def _grow(self, jobs: int) -> None:
        with self._grow_lock, contextlib.suppress(WorkerError):
            self.pool.grow(jobs)  # a worker that does not start leaves the pool as it was

    def status(self) -> dict[str, Any]:
        memory = 0
        with contextlib.suppress(psutil.Error):
            me = psutil.Process()
            for proc in (me, *me.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    memory += proc.memory_info().rss
        return {"pid": os.getpid(), "label": self.label, "state": self._state(), "started": self.started,
                "idle_seconds": round(self.idle_for(), 1), "idle_limit": self.idle, "served": self.served,
                "memory": memory, "workers": self.pool.worker_pids(), "clients": self.connections}

    def _state(self) -> str:
        if not self.ready.is_set():
            return "starting"
        return "ready" if self.error is None else f"failed: {self.error}"


def _log(line: str) -> None:
    """A line of the daemon's life in its ``daemon.log`` (its standard error): when it started serving, when and
    why it stopped."""
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    directory = Path(argv[1])
    if os.fork() > 0:  # the first process exits at once: the daemon is nobody's child
        os._exit(0)
    lock = open(directory / "daemon.lock", "a+")  # noqa: SIM115 - held for the daemon's whole life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another daemon serves this directory
    config = json.loads((directory / "daemon.json").read_text())
    address = directory / "sock"
    with contextlib.suppress(FileNotFoundError):
        address.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)
    try:
        listener.bind(str(address))
    finally:
        os.umask(old_mask)
    listener.listen(64)
    (directory / "pid").write_text(f"{os.getpid()}\n")
    try:
        return Daemon(directory, config).serve(listener)
    finally:  # still holding daemon.lock: no other daemon can have bound this address meanwhile
        with contextlib.suppress(OSError):
            address.unlink()
        with contextlib.suppress(OSError):
            (directory / "pid").unlink()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

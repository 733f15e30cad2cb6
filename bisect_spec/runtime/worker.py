"""Evaluation workers: long-lived processes that import SGLang once and answer evaluations.

A worker is one long-lived Python process per release environment: it imports SGLang
once (5-8 s), builds the parser once, installs the hardware profile, then resolves
configurations on request (``worker_main.py`` is its entry point). Faults inside a
worker never take the run down: a segfault, ``os._exit``, a hang past the timeout or a
worker killed from outside each become an outcome record of their own (``crashed`` /
``timeout``), the worker is replaced, and evaluation goes on.

Workers are started on the one thread of :func:`bisect_spec.runtime.processes.spawn`; the other
processes the runtime starts are :mod:`bisect_spec.runtime.processes`'.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from bisect_spec.errors import WorkerError
from bisect_spec.model.flags import CONFIG_ENV
from bisect_spec.runtime.processes import describe_exit, kill_tree, spawn

log = logging.getLogger(__name__)

WORKER_SCRIPT = Path(__file__).parent.parent / "inside" / "worker_main.py"


def inside_folder() -> str:
    """bisect-spec's ``inside/`` folder: the code that runs inside an SGLang environment."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "inside")


@dataclass(frozen=True)
class WorkerSpec:
    """How to start a worker: which Python, which import path, which hardware.

    :param python: interpreter of the release environment.
    :param pythonpath: directories put first on the import path (the release overlay).
    :param hardware: hardware profile record; ``None`` = the honest CPU machine;
        ``{"name": "real"}`` = whatever GPUs the machine really has.
    """

    python: str
    pythonpath: tuple[str, ...] = ()
    hardware: dict[str, Any] | None = None
    gpus: int = 8
    torchvision_shim: bool = True
    log_path: str | None = None
    extra_env: tuple[tuple[str, str], ...] = ()
    start_timeout: float = 240.0

    def environment(self) -> dict[str, str]:
        # configuration variables reach an evaluation only as recorded ones (Target.env, a
        # configuration's own assignments), never silently inherited
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME") and not CONFIG_ENV.match(k)}
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(self.pythonpath)
        env.update(
            BISECT_SPEC_INSIDE=inside_folder(),  # where repro.py finds the simulation (bisect_spec/inside)
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            PYTHONNOUSERSITE="1",
            PYTHONDONTWRITEBYTECODE="1",
            TOKENIZERS_PARALLELISM="false",
            OMP_NUM_THREADS="1",
        )
        env.update(dict(self.extra_env))
        return env


class WorkerDied(Exception):
    """The worker process ended while a request was outstanding."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class WorkerTimedOut(Exception):
    """The worker did not answer within the timeout; it has been killed."""


class WorkerProcess:
    """One evaluation worker process and its line protocol."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.process: subprocess.Popen[bytes] | ForkedProcess | None = None
        self.info: dict[str, Any] = {}
        self._buffer = b""
        self._next_id = 0
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, zygote: Zygote | None = None) -> dict[str, Any]:
        """Start the process and wait until SGLang is imported; return its self-description.

        With ``zygote`` (of the same spec) the worker is forked from it, SGLang already imported.
        """
        self._open_log()
        if zygote is not None:
            try:
                self.process = zygote.fork_worker(self._log)
            except BaseException:
                self.close()
                raise
            return self._hello()
        return self._start_process(self._config(), stdin=subprocess.PIPE)

    def _config(self) -> dict[str, Any]:
        # parent: the worker dies with this process (it checks it was not orphaned already)
        return {"hardware": self.spec.hardware, "gpus": self.spec.gpus, "torchvision_shim": self.spec.torchvision_shim,
                "parent": os.getpid()}

    def _open_log(self) -> None:
        if self.spec.log_path and self._log is None:
            Path(self.spec.log_path).parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.spec.log_path, "ab")  # noqa: SIM115 - lives as long as the worker

    def _start_process(self, config: dict[str, Any], *, stdin: Any) -> dict[str, Any]:
        try:
            self.process = spawn(lambda: subprocess.Popen(
                [self.spec.python, "-u", str(WORKER_SCRIPT), json.dumps(config)],
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=self._log if self._log else subprocess.DEVNULL,
                env=self.spec.environment(),
                start_new_session=True,
                cwd=os.path.dirname(self.spec.log_path) if self.spec.log_path else None,
            ))
        except OSError as exc:
            raise WorkerError(f"cannot start evaluation worker {self.spec.python}: {exc.strerror}") from exc
        return self._hello()

    def _hello(self) -> dict[str, Any]:
        try:
            hello = self._read_reply(self.spec.start_timeout)
        except (WorkerDied, WorkerTimedOut) as exc:
            self.close()
            raise WorkerError(f"evaluation worker failed to start: {exc}; see {self.spec.log_path or 'its stderr'}") from exc
        if not hello.get("ok"):
            self.close()
            raise WorkerError(f"SGLang does not import in this environment ({hello.get('error')})")
        self.info = hello["info"]
        return self.info

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and wait for its reply.

        :raises WorkerDied: the process ended (segfault, ``os._exit``, killed).
        :raises WorkerTimedOut: no reply within ``timeout``; the process was killed.
        """
        self.send(payload)
        return self.receive(timeout)

    def send(self, payload: dict[str, Any]) -> None:
        """Queue a request; the worker answers requests in the order they were sent.

        :raises WorkerDied: the process is gone.
        """
        if self.process is None or self.process.stdin is None:
            raise WorkerDied("not started")
        self._next_id += 1
        payload = {**payload, "id": self._next_id}
        try:
            self.process.stdin.write((json.dumps(payload) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
            self.close()  # its pipes too: a dead worker's streams are never left to the garbage collector
            raise WorkerDied(describe_exit(self.process.returncode)) from None

    def receive(self, timeout: float) -> dict[str, Any]:
        """The reply to the oldest unanswered request.

        :raises WorkerDied: see :meth:`request`. :raises WorkerTimedOut: see :meth:`request`.
        """
        return self._read_reply(timeout)

    def _read_reply(self, timeout: float) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise WorkerTimedOut(f"no answer within {timeout:g} s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=5)
                self.close()  # its pipes too: a dead worker's streams are never left to the garbage collector
                raise WorkerDied(describe_exit(self.process.returncode))
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
            if not isinstance(reply, dict):
                raise ValueError("not an object")
            return reply
        except ValueError:
            self.close()
            raise WorkerDied(f"protocol error (garbage on the worker pipe: {line[:60]!r})") from None

    def evaluate(self, argv: Sequence[str], timeout: float, gpus: int | None = None) -> dict[str, Any]:
        """Resolve one configuration (on a box of ``gpus`` GPUs of its kind, when given); worker faults become
        records, never exceptions."""
        started = time.perf_counter()
        request: dict[str, Any] = {"op": "eval", "argv": list(argv)}
        if gpus is not None:
            request["gpus"] = gpus
        try:
            return self.request(request, timeout)
        except WorkerTimedOut:
            return {"argv": list(argv), "status": "timeout", "crash": f"no answer within {timeout:g} s",
                    "seconds": round(time.perf_counter() - started, 6)}
        except WorkerDied as exc:
            return {"argv": list(argv), "status": "crashed", "crash": exc.description,
                    "seconds": round(time.perf_counter() - started, 6)}

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def close(self) -> None:
        """Stop the worker and everything it started."""
        if self.process is not None:
            if self.process.poll() is None:
                try:
                    if self.process.stdin:
                        self.process.stdin.close()
                except OSError:
                    pass
                try:
                    self.process.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    kill_tree(self.process.pid, grace=1.0)
                    self.process.wait(timeout=5)
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    if stream:
                        stream.close()
                except OSError:
                    pass
        if self._log:
            self._log.close()
            self._log = None


#: ``0``: every worker of a pool imports SGLang itself, instead of being forked from the pool's zygote (the default,
#: ``1``, where the platform can pass file descriptors: Linux)
FORK_ENV = "BISECT_SPEC_FORK"


def forking() -> bool:
    """Whether pools fork their workers from a zygote (the default; ``BISECT_SPEC_FORK=0`` turns it off; Linux only)."""
    return os.environ.get(FORK_ENV, "1").strip() != "0" and hasattr(socket, "send_fds") and sys.platform == "linux"


class ForkedProcess:
    """What a :class:`WorkerProcess` uses of ``subprocess.Popen``, for a worker its pool's zygote forked.

    The zygote is the worker's parent, so only it can wait for the worker: it says how each one ended.
    """

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes], zygote: Zygote) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.returncode(self.pid, 0.0)
        if self.returncode is None and not _running(self.pid):
            # it has ended (reaped, or a zombie the zygote is reaping): its exit, which the zygote sends as it
            # reaps, is on its way (the tests saw a killed worker's poll come between the two)
            self.returncode = self._zygote.returncode(self.pid, 10.0)
            if self.returncode is None:
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.returncode(self.pid, 86400.0 if timeout is None else timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"evaluation worker {self.pid}", timeout or 0.0)
        return self.returncode


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Zygote(WorkerProcess):
    """A process of one spec that imports SGLang once and evaluates nothing: it forks the pool's workers.

    A pool of ``jobs`` workers, and every replacement of a crashed one, then costs one import of SGLang
    (5-10 s of CPU each) instead of one per worker. A forked worker starts from this process as it stands right
    after the import, the state a worker that imported SGLang itself starts from (``worker_main._zygote``).
    Hand-written because ``multiprocessing``'s forkserver runs the orchestrator's Python and its own pickled
    protocol, where workers run the release's Python and answer on pipes the pool owns.
    """

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self._control: socket.socket | None = None
        self._exits: dict[int, int] = {}
        self._lock = threading.Lock()

    def start(self, zygote: Zygote | None = None) -> dict[str, Any]:
        """Start the zygote and wait until it has imported SGLang (a failure reads as a worker's would)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._open_log()
            info = self._start_process({**self._config(), "zygote": True}, stdin=theirs)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours
        return info

    def fork_worker(self, log: IO[bytes] | None) -> ForkedProcess:
        """A new worker, its stdin, protocol and stderr (``log``, else nothing) its own.

        :raises WorkerDied: the zygote is gone.
        """
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr = log.fileno() if log is not None else os.open(os.devnull, os.O_WRONLY)
        try:
            pid = self._fork([stdin_read, stdout_write, stderr])
        except BaseException:
            os.close(stdin_write)
            os.close(stdout_read)
            raise
        finally:
            os.close(stdin_read)
            os.close(stdout_write)
            if log is None:
                os.close(stderr)
        return ForkedProcess(pid, os.fdopen(stdin_write, "wb"), os.fdopen(stdout_read, "rb"), self)

    def _fork(self, fds: list[int]) -> int:
        with self._lock:
            if self._control is None or not self.alive:
                raise WorkerDied("the zygote is gone")
            try:
                socket.send_fds(self._control, [json.dumps({"op": "fork"}).encode()], fds)
            except OSError as exc:
                raise WorkerDied(f"the zygote is gone ({exc})") from exc
            while True:
                message = self._receive(self.spec.start_timeout)
                if message is None:
                    raise WorkerDied(f"the zygote did not fork within {self.spec.start_timeout:g} s")
                if "forked" in message:
                    return int(message["forked"])
                if "error" in message:
                    raise WorkerError(f"the zygote refused to fork: {message['error']}")

    def _receive(self, timeout: float) -> dict[str, Any] | None:
        """The zygote's next message within ``timeout`` (an exit is recorded as it passes); None: none came.

        :raises WorkerDied: the zygote is gone.
        """
        assert self._control is not None
        ready, _, _ = select.select([self._control], [], [], max(0.0, timeout))
        if not ready:
            return None
        data = self._control.recv(65536)
        if not data:
            raise WorkerDied("the zygote is gone")
        message: dict[str, Any] = json.loads(data)
        if "exited" in message:
            self._exits[int(message["exited"])] = int(message["returncode"])
        return message

    def returncode(self, pid: int, timeout: float) -> int | None:
        """How worker ``pid`` ended, once the zygote has reaped it (waiting up to ``timeout``); None: it runs.

        A worker of a zygote that is gone was killed with it (its parent-death signal): ``-SIGKILL`` once gone.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while pid not in self._exits:
                try:
                    if self._control is None or self._receive(deadline - time.monotonic()) is None:
                        break
                except WorkerDied:
                    self._control_closed()
                    break
            if pid in self._exits:
                return self._exits[pid]
        return -signal.SIGKILL if self._control is None and not _running(pid) else None

    def _control_closed(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None

    def close(self) -> None:
        """End the zygote: end-of-file on its control socket (its workers, if any are left, die with it)."""
        with self._lock:
            self._control_closed()
        super().close()


@dataclass
class WorkerPool:
    """``jobs`` workers of one spec, evaluating configurations in parallel.

    A worker that crashes or times out is replaced before its next evaluation.
    """

    spec: WorkerSpec
    jobs: int = 1
    timeout: float = 60.0
    _idle: queue.Queue[WorkerProcess] = field(default_factory=queue.Queue, init=False)
    _all: list[WorkerProcess] = field(default_factory=list, init=False)
    info: dict[str, Any] = field(default_factory=dict, init=False)
    replaced: int = field(default=0, init=False)
    _closed: bool = field(default=False, init=False)
    #: the process every worker of this pool is forked from (:class:`Zygote`), started with the first worker
    _zygote: Zygote | None = field(default=None, init=False)
    _zygote_lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def start(self) -> dict[str, Any]:
        """Start every worker (in parallel); return the first one's self-description."""
        self._closed = False
        kept = []
        while not self._idle.empty():  # a worker of an earlier start that was closed with it is not used again
            worker = self._idle.get_nowait()
            if worker in self._all:
                kept.append(worker)
        for worker in kept:
            self._idle.put(worker)
        errors: list[BaseException] = []
        workers = [WorkerProcess(self.spec) for _ in range(max(1, self.jobs))]

        def boot(worker: WorkerProcess) -> None:
            try:
                self._boot(worker)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=boot, args=(w,)) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            for worker in workers:
                worker.close()
            raise errors[0]
        for worker in workers:
            self._all.append(worker)
            self._idle.put(worker)
        self.info = workers[0].info
        return self.info

    def _healthy(self, worker: WorkerProcess) -> WorkerProcess:
        if self._closed:  # a thread still evaluating when the pool closed starts no worker after it
            raise WorkerError("the evaluation workers were stopped")
        if worker.alive:
            return worker
        worker.close()
        if worker in self._all:  # a dead worker whose replacement failed to start comes back here: try again
            self._all.remove(worker)
        fresh = WorkerProcess(self.spec)
        self._boot(fresh)
        if self._closed:  # the pool closed while this worker started: it must not outlive the command
            fresh.close()
            raise WorkerError("the evaluation workers were stopped")
        self._all.append(fresh)
        self.replaced += 1
        return fresh

    def evaluate(self, argv: Sequence[str], timeout: float | None = None, gpus: int | None = None) -> dict[str, Any]:
        """Evaluate one configuration on any idle worker (``timeout`` overrides the pool's; ``gpus``, the box's
        count: a warm daemon's pool serves every count of its box)."""
        worker = self._idle.get()
        try:  # taken from the idle queue, always put back: a failed replacement keeps its slot for a retry
            worker = self._healthy(worker)
            record = worker.evaluate(argv, self.timeout if timeout is None else timeout, gpus)
            if record.get("status") in ("crashed", "timeout"):
                worker.close()
            return record
        finally:
            self._idle.put(worker)

    def request(self, payload: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Send a non-evaluation request (flags, source) to one worker."""
        worker = self._idle.get()
        try:
            worker = self._healthy(worker)
            return worker.request(payload, timeout)
        except (WorkerDied, WorkerTimedOut) as exc:
            raise WorkerError(f"worker failed answering {payload.get('op')}: {exc}") from exc
        finally:
            self._idle.put(worker)

    def imap_unordered(self, items: Iterable[tuple[Any, Sequence[str]]], *,
                       depth: int = 2) -> Iterator[tuple[Any, dict[str, Any]]]:
        """Evaluate ``(key, argv)`` pairs in parallel, yielding ``(key, record)`` as they finish.

        Each worker has up to ``depth`` requests in flight, so it starts the next
        configuration while the orchestrator is still reading the last reply.
        """
        pending: queue.Queue[tuple[Any, Sequence[str]] | None] = queue.Queue()
        done: queue.Queue[tuple[Any, dict[str, Any]] | BaseException] = queue.Queue()
        count = 0
        for item in items:
            pending.put(item)
            count += 1
        threads = max(1, min(self.jobs, count))
        for _ in range(threads):
            pending.put(None)

        def drain() -> None:
            try:
                self._drain(pending, done, depth)
            except BaseException as exc:
                done.put(exc)

        runners = [threading.Thread(target=drain, daemon=True) for _ in range(threads)]
        for runner in runners:
            runner.start()
        try:
            for _ in range(count):
                result = done.get()
                if isinstance(result, BaseException):
                    raise result
                yield result
        finally:
            while True:
                try:
                    pending.get_nowait()
                except queue.Empty:
                    break
            for _ in range(threads):
                pending.put(None)

    def _drain(self, pending: queue.Queue[tuple[Any, Sequence[str]] | None],
               done: queue.Queue[tuple[Any, dict[str, Any]] | BaseException], depth: int) -> None:
        worker = self._idle.get()
        inflight: deque[tuple[Any, Sequence[str], float]] = deque()
        retry: deque[tuple[Any, Sequence[str]]] = deque()
        finished = False
        try:
            worker = self._healthy(worker)
            while True:
                while not finished and len(inflight) < depth:
                    item = retry.popleft() if retry else pending.get()
                    if item is None:
                        finished = True
                        break
                    key, argv = item
                    try:
                        worker.send({"op": "eval", "argv": list(argv)})
                    except WorkerDied:
                        retry.appendleft(item)
                        worker = self._replace(worker)
                        continue
                    inflight.append((key, argv, time.perf_counter()))
                if not inflight:
                    if retry:
                        continue
                    return
                key, argv, sent = inflight.popleft()
                record: dict[str, Any] | None
                try:
                    reply = worker.receive(self.timeout)
                    done.put((key, reply))
                    if reply.get("status") != "crashed":
                        continue
                    record = None  # caught in-process (MemoryError, sys.exit): start afresh all the same
                except WorkerTimedOut:
                    record = {"argv": list(argv), "status": "timeout", "crash": f"no answer within {self.timeout:g} s"}
                except WorkerDied as exc:
                    record = {"argv": list(argv), "status": "crashed", "crash": exc.description}
                if record is not None:
                    record["seconds"] = round(time.perf_counter() - sent, 6)
                    done.put((key, record))
                # the worker is gone: what was queued behind the fault goes to its replacement
                retry.extend((k, a) for k, a, _ in inflight)
                inflight.clear()
                worker = self._replace(worker)
        finally:
            self._idle.put(worker)

    def grow(self, jobs: int) -> None:
        """Start workers until there are ``jobs`` (a warm worker asked for more by a shrink); blocking."""
        while len(self._all) < jobs:
            fresh = WorkerProcess(self.spec)
            self._boot(fresh)
            self._all.append(fresh)
            self._idle.put(fresh)
        self.jobs = max(self.jobs, jobs)

    def _replace(self, worker: WorkerProcess) -> WorkerProcess:
        worker.close()
        return self._healthy(worker)

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (tests kill them from outside)."""
        return [w.pid for w in self._all if w.pid is not None]

    def close(self) -> None:
        """Stop every worker, then the zygote; one that fails to stop does not keep the others running."""
        self._closed = True
        failures: list[BaseException] = []
        for worker in list(self._all):
            try:
                worker.close()
            except Exception as exc:
                failures.append(exc)
        self._all.clear()
        with self._zygote_lock:
            if self._zygote is not None:
                try:
                    self._zygote.close()
                except Exception as exc:
                    failures.append(exc)
                self._zygote = None
        if failures:
            raise failures[0]

    def _boot(self, worker: WorkerProcess) -> None:
        """Start ``worker``: forked from the pool's zygote (:func:`forking`), else importing SGLang itself."""
        if not forking():
            worker.start()
            return
        for attempt in range(2):
            zygote = self._zygote_for_start()
            try:
                worker.start(zygote)
                return
            except WorkerDied:  # the zygote ended (killed from outside) since it was checked: a fresh one
                with self._zygote_lock:
                    if self._zygote is zygote:
                        zygote.close()
                        self._zygote = None
                if attempt:
                    raise

    def _zygote_for_start(self) -> Zygote:
        with self._zygote_lock:
            if self._zygote is not None and not self._zygote.alive:
                self._zygote.close()
                self._zygote = None
            if self._zygote is None:
                fresh = Zygote(self.spec)
                fresh.start()
                if self._closed:  # the pool closed while its zygote started
                    fresh.close()
                    raise WorkerError("the evaluation workers were stopped")
                self._zygote = fresh
            return self._zygote

    @property
    def zygote_pid(self) -> int | None:
        """The process this pool's workers are forked from, while it runs."""
        zygote = self._zygote
        return zygote.pid if zygote is not None and zygote.alive else None

    def __enter__(self) -> WorkerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

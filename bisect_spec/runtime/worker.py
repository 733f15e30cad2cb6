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
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

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
        self.process: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self._buffer = b""
        self._next_id = 0
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> dict[str, Any]:
        """Start the process and wait until SGLang is imported; return its self-description."""
        # parent: the worker dies with this process (it checks it was not orphaned already)
        config = {"hardware": self.spec.hardware, "gpus": self.spec.gpus, "torchvision_shim": self.spec.torchvision_shim,
                  "parent": os.getpid()}
        if self.spec.log_path:
            Path(self.spec.log_path).parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.spec.log_path, "ab")  # noqa: SIM115 - lives as long as the worker
        try:
            self.process = spawn(lambda: subprocess.Popen(
                [self.spec.python, "-u", str(WORKER_SCRIPT), json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log if self._log else subprocess.DEVNULL,
                env=self.spec.environment(),
                start_new_session=True,
                cwd=os.path.dirname(self.spec.log_path) if self.spec.log_path else None,
            ))
        except OSError as exc:
            raise WorkerError(f"cannot start evaluation worker {self.spec.python}: {exc.strerror}") from exc
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
                worker.start()
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
        fresh.start()
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
            fresh.start()
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
        self._closed = True
        for worker in list(self._all):
            worker.close()
        self._all.clear()

    def __enter__(self) -> WorkerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

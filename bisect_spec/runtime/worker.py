"""Evaluation workers: the only module that starts processes.

A worker is one long-lived Python process per release environment: it imports SGLang
once (5-8 s), builds the parser once, installs the hardware profile, then resolves
configurations on request (``worker_main.py`` is its entry point). Faults inside a
worker never take the run down: a segfault, ``os._exit``, a hang past the timeout or a
worker killed from outside each become an outcome record of their own (``crashed`` /
``timeout``), the worker is replaced, and evaluation goes on.

Package installs (``pip``) also run from here, so "who starts processes" has one answer.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from bisect_spec.errors import WorkerError
from bisect_spec.model.flags import CONFIG_ENV

log = logging.getLogger(__name__)

WORKER_SCRIPT = Path(__file__).parent.parent / "inside" / "worker_main.py"
SUPERVISOR_SCRIPT = Path(__file__).parent.parent / "launch" / "supervisor_main.py"


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


def describe_exit(returncode: int | None) -> str:
    """Human and machine readable reason a worker process ended."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        kind = {"SIGSEGV": "segfault", "SIGKILL": "killed", "SIGABRT": "abort", "SIGBUS": "bus error"}.get(name, "signal")
        return f"{kind} ({name})"
    return f"exit({returncode})"


def kill_tree(pid: int, *, grace: float = 2.0) -> None:
    """Terminate a process and all its descendants; SIGKILL whatever ignores SIGTERM."""
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    terminate_then_kill([root, *root.children(recursive=True)], grace=grace)


def terminate_then_kill(procs: list[psutil.Process], *, grace: float) -> None:
    """SIGTERM every process, wait up to ``grace``, SIGKILL the ones still alive and reap them."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)


_SPAWNER: concurrent.futures.ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawn(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Run ``start`` (a ``Popen``) on the one thread that starts evaluation workers.

    A worker asks the kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``, see
    ``worker_main.py``), and Linux takes the *thread* that forked it as that parent. Workers
    are started from short-lived threads (:meth:`WorkerPool.start` boots each in its own,
    a pool's drain threads replace them), which would take their workers with them when
    they end. This thread lives as long as the process; a pool executor's thread waits
    for work and ends only at interpreter exit.
    """
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bisect-spec-spawner")
        spawner = _SPAWNER
    return spawner.submit(start).result()


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
            self.process = _spawn(lambda: subprocess.Popen(
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
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.close()
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
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.close()
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

    def evaluate(self, argv: Sequence[str], timeout: float) -> dict[str, Any]:
        """Resolve one configuration; worker faults become records, never exceptions."""
        started = time.perf_counter()
        try:
            return self.request({"op": "eval", "argv": list(argv)}, timeout)
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

    def start(self) -> dict[str, Any]:
        """Start every worker (in parallel); return the first one's self-description."""
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
        if worker.alive:
            return worker
        worker.close()
        if worker in self._all:  # a dead worker whose replacement failed to start comes back here: try again
            self._all.remove(worker)
        fresh = WorkerProcess(self.spec)
        fresh.start()
        self._all.append(fresh)
        self.replaced += 1
        return fresh

    def evaluate(self, argv: Sequence[str], timeout: float | None = None) -> dict[str, Any]:
        """Evaluate one configuration on any idle worker (``timeout`` overrides the pool's)."""
        worker = self._idle.get()
        try:  # taken from the idle queue, always put back: a failed replacement keeps its slot for a retry
            worker = self._healthy(worker)
            record = worker.evaluate(argv, self.timeout if timeout is None else timeout)
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
        for worker in list(self._all):
            worker.close()
        self._all.clear()

    def __enter__(self) -> WorkerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_daemon(argv: Sequence[str], *, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start a deliberate, managed daemon (a warm worker, ``warm_daemon.py``) in a session of its own.

    The daemon forks once more at start and the first process exits at once (wait for it
    with ``.wait()``), so it is nobody's child: whoever kills this process's tree does not
    kill it. It stops itself when idle; ``bisect-spec workers list`` shows it.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        try:
            return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=env,
                                    start_new_session=True, cwd=str(log_path.parent))
        except OSError as exc:
            raise WorkerError(f"cannot start a warm worker with {argv[0]}: {exc.strerror}") from exc


def run_command(argv: Sequence[str], *, log_path: Path | None = None, env: dict[str, str] | None = None,
                progress: Callable[[str], None] | None = None) -> int:
    """Run an installer command (pip), streaming its output to a log; return its exit code."""
    log_file = open(log_path, "ab") if log_path else None  # noqa: SIM115
    try:
        with subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as proc:
            assert proc.stdout is not None
            for raw in proc.stdout:
                if log_file:
                    log_file.write(raw)
                if progress:
                    progress(raw.decode(errors="replace").rstrip())
            return proc.wait()
    finally:
        if log_file:
            log_file.close()


def run_with_python(argv: Sequence[str], interpreter: str) -> int:
    """Run a user's command with ``python``/``python3`` meaning ``interpreter``; its exit status.

    ``interpreter``'s directory goes first on ``PATH`` (where it is a launcher named
    ``python``, a ``python3`` beside it is made too); a leading ``python``/``python3`` is
    replaced outright, so an alias or a shell function cannot pick another one.
    """
    if not argv:
        return 0
    directory = os.path.dirname(interpreter)
    if os.path.basename(interpreter) == "python" and not os.path.exists(os.path.join(directory, "python3")):
        os.symlink("python", os.path.join(directory, "python3"))
    command = list(argv)
    if command[0] in ("python", "python3"):
        command[0] = interpreter
    env = {**os.environ, "PATH": directory + os.pathsep + os.environ.get("PATH", "")}
    try:
        with subprocess.Popen(command, env=env) as proc:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                proc.wait()
                return 130
    except FileNotFoundError:
        raise WorkerError(f"{command[0]}: command not found") from None


def capture(argv: Sequence[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300.0) -> tuple[int, bytes, str]:
    """Run a short read-only command (``git``) to completion: its exit code, stdout and stderr.

    :raises OSError: the program cannot be started (not installed).
    """
    try:
        done = subprocess.run(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return 124, exc.stdout or b"", f"{argv[0]} did not finish within {timeout:g} s"
    return done.returncode, done.stdout, done.stderr.decode(errors="replace")


def create_venv(python: str, target: Path) -> int:
    """Create a virtual environment at ``target`` with ``python``; return the exit code."""
    return subprocess.run([python, "-m", "venv", str(target)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).returncode


def current_python() -> str:
    return sys.executable


# -- server launches ---------------------------------------------------------------
#
# A real ``launch_server`` starts a tree: the HTTP process, a scheduler per rank, a
# detokenizer, sometimes grandchildren that outlive their parents. It runs under a
# supervisor (``supervisor_main.py``, whose docstring says how and what it does not
# cover) that ends the whole tree when this process stops or dies, however it dies.
# Here every process seen is remembered too, the server gets a session of its own and
# an environment marker, and on the way out all of it is stopped and the port checked
# free. A marked process whose bisect-spec is gone is a leftover: named, never killed.

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

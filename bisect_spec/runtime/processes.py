"""Process utilities: the module that starts processes for the runtime layer.

Package installs (``pip``, ``venv``), commands run for their output (``git``), a warm worker's
daemon started in a session of its own, and the one thread that starts evaluation workers
(:func:`spawn`); how a process ended, said in words; a process tree stopped. The evaluation
workers themselves are :mod:`bisect_spec.runtime.worker`, real servers' supervision
:mod:`bisect_spec.launch.supervision`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from bisect_spec.errors import WorkerError


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
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:  # gone already, or between the two lookups (a forked worker its zygote reaped)
        return
    terminate_then_kill(tree, grace=grace)


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


def spawn(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
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
    inside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "inside")
    env = {**os.environ, "PATH": directory + os.pathsep + os.environ.get("PATH", ""),
           "BISECT_SPEC_INSIDE": os.environ.get("BISECT_SPEC_INSIDE", inside)}  # repro.py imports the simulation
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



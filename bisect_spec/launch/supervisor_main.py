"""Supervisor of one launched server tree: nothing it starts outlives the tool (run as a script).

Mechanism. bisect-spec never starts a server directly. It starts this small process
(``python supervisor_main.py``, in a session of its own) and keeps the write end of a
pipe to its stdin; the first line is the launch (JSON: command, environment, working
directory, log, grace). The supervisor then

* detaches: it forks and the first process exits, so the supervisor is no child of the
  tool. Some hosts SIGKILL a dying process's direct children, and only those: a Ray
  worker does (``RAY_kill_child_processes_on_worker_exit``, on by default). A supervisor
  killed that way could not end the tree; a detached one sees the end-of-file instead;
* makes itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``, via
  ``ctypes``): a process of the tree whose parent exits is re-parented to the supervisor
  instead of to init, so the tree stays findable as its descendants, also a daemon that
  double-forked and left the session with ``setsid``;
* starts the server in a new session with the launch marker in its environment
  (``BISECT_SPEC_LAUNCH_ID``) and ``PR_SET_PDEATHSIG(SIGKILL)`` (the server root dies
  if the supervisor itself is killed);
* sleeps in ``select`` on the pipe and on ``SIGCHLD`` (no polling): it reaps exited
  processes and reports the server root's exit status as a JSON line on stdout.

End-of-file on the pipe means the tool is gone or done. The kernel closes the pipe
when the tool dies however it dies (``exit``, an exception, SIGKILL, the OOM killer, a
segfault, SIGHUP from a closed terminal), so no cooperation from the tool is needed;
the tool's own orderly stop is the same end-of-file. The supervisor then SIGTERMs
every descendant and every process carrying this launch's marker, waits ``grace``
seconds, SIGKILLs what is left, looks again (a dying process may start another), reaps
them, reports ``{"stopped": ...}`` and exits. SIGTERM, SIGINT or SIGHUP sent to the
supervisor itself do the same. It never touches a process it did not start: only its
own descendants and exact holders of the launch's marker.

Not covered:

* other operating systems: macOS and the BSDs have no ``PR_SET_CHILD_SUBREAPER`` and no
  ``PR_SET_PDEATHSIG``, so a process whose parent exits goes to init and is found only by
  the marker in its environment (not if it clears its environment); Windows is not
  supported at all (``fork``, ``select`` on a pipe);
* processes the server has *another* daemon start for it (``docker run``, ``systemd-run``,
  ``ssh``): they are not descendants and carry no marker;
* a process that makes itself a subreaper and hides its own orphans, or a process
  that cannot be killed (``D`` state: it goes when the kernel lets it);
* the supervisor itself killed by SIGKILL (e.g. the OOM killer choosing it, which is
  unlikely: it is small): then only the server root dies, by its parent-death signal;
  the rest is named as a leftover by the next launch (``supervision.leftover_servers``);
* a copy of the pipe's write end kept by another process: the tool's pipes are
  close-on-exec, but a child the tool ``fork``\\ s without ``exec`` keeps it, and the
  end-of-file comes only when that child ends too.

Imports only the standard library and psutil, so it runs in the tool's Python without
``bisect_spec`` on the path (e.g. in a Ray worker).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
# run as a script: the package directory is sys.path[0]; none of its modules is wanted here
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import psutil  # noqa: E402 - after the path is cleaned

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MARKER = "BISECT_SPEC_LAUNCH_ID"


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where there is no such call (not Linux) or it fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def emit(event: dict[str, Any]) -> None:
    """One JSON line to the tool; nothing when the tool is gone."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def reap(root: int | None = None) -> int | None:
    """Collect every exited child (orphans included); the exit status of ``root`` if it was among them."""
    status: int | None = None
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == root:
            status = os.waitstatus_to_exitcode(raw)


def tree(marker: str) -> list[psutil.Process]:
    """Every live descendant of the supervisor, and every other process carrying ``marker``."""
    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True)}
    for proc in psutil.process_iter():
        if proc.pid in found or proc.pid == me.pid:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(MARKER) == marker:
                found[proc.pid] = proc
    living = []
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                living.append(proc)
    return living


def end_tree(marker: str, grace: float) -> tuple[list[int], list[int]]:
    """SIGTERM the tree, SIGKILL what is left after ``grace``; ``(pids ended, pids still alive)``."""
    ended: set[int] = set()
    for _ in range(3):  # a dying process may start one more; look again
        procs = tree(marker)
        if not procs:
            break
        ended.update(p.pid for p in procs)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(procs, timeout=grace)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=grace)
    reap()
    return sorted(ended), sorted(p.pid for p in tree(marker))


def main() -> int:
    if os.fork() > 0:  # detach: the launching process's children may be SIGKILLed with it (Ray does so)
        os._exit(0)
    spec = json.loads(sys.stdin.buffer.readline() or b"null")
    if not isinstance(spec, dict):
        return 2  # the tool went away before it said what to launch
    marker: str = spec["env"][MARKER]
    grace = float(spec.get("grace", 3.0))
    subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1)

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    stop_signals: list[int] = []
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake select; handlers reset on exec
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: stop_signals.append(signum))

    try:
        with open(spec["log"], "ab") as log:
            server = subprocess.Popen(spec["command"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      env=spec["env"], cwd=spec.get("cwd"), start_new_session=True,
                                      preexec_fn=lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL))
    except OSError as exc:
        emit({"error": exc.strerror or str(exc)})
        return 1
    emit({"root": server.pid, "supervisor": os.getpid(), "subreaper": subreaper})

    pipe = sys.stdin.buffer.fileno()
    exited = False
    while not stop_signals:
        readable, _, _ = select.select([pipe, wake_read], [], [])
        if wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 512)
        status = reap(server.pid)
        if status is not None and not exited:
            exited = True
            emit({"exited": status})
        if pipe in readable and not os.read(pipe, 4096):
            break  # end-of-file: the tool is done or dead
    ended, left = end_tree(marker, grace)
    server.returncode = server.returncode or 0  # reaped here, not by Popen: nothing left for Popen to wait for
    emit({"stopped": ended, "left": left})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Entry point of an evaluation worker process (run as a script, not imported).

It runs under the Python of a release environment, which has SGLang but not click or
hypothesis, so it loads only ``bisect_spec.inside``, without executing
``bisect_spec/__init__.py``.

Protocol: one JSON request per line on stdin, one JSON reply per line on a private
copy of the original stdout. Anything SGLang prints goes to stderr (the worker log).

A worker never outlives the process that started it (the tool, or the Ray actor that
hosts it). Between evaluations it is reading stdin, and end-of-file ends it. During an
evaluation it is not reading, and a hung one would run on forever; so on Linux the worker
asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``). The
kernel counts the parent *thread*: ``worker.py`` starts every worker from one thread that
lives as long as its process, never from a short-lived one. Other operating systems have
no such call; there, a worker mid-evaluation ends only when that evaluation does.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import types
from typing import IO, Any

PR_SET_PDEATHSIG = 1


def _load_package() -> None:
    """``bisect_spec.inside`` without running ``bisect_spec/__init__.py`` (orchestrator dependencies)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for name, path in (("bisect_spec", os.path.dirname(here)), ("bisect_spec.inside", here)):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package


#: A JIT build's lock file older than this is a killed build's (SGLang's NGRAM extension builds in about a minute).
STALE_BUILD_LOCK_SECONDS = 600


def _stale_build_locks(root: str | None = None, *, older_than: float = STALE_BUILD_LOCK_SECONDS) -> list[str]:
    """Remove the lock files of torch's extension builds (``torch.utils.cpp_extension.load``) that a killed build left:
    torch waits on such a lock for as long as it exists, so every later evaluation importing that extension (0.5.9's
    ``ngram_cache_cpp``, built at import by NGRAM's worker) would hang to its timeout. A lock younger than
    ``older_than`` seconds may be a build in progress and is kept. ``root``: torch's build root
    (``TORCH_EXTENSIONS_DIR``, else ``~/.cache/torch_extensions``). Returns the paths removed."""
    import glob
    import time

    root = root or os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch_extensions")
    removed = []
    for lock in [*glob.glob(os.path.join(root, "*", "lock")), *glob.glob(os.path.join(root, "*", "*", "lock"))]:
        try:
            if time.time() - os.path.getmtime(lock) > older_than:
                os.unlink(lock)
                removed.append(lock)
        except OSError:  # another worker removed it first, or it is not ours to remove
            continue
    return removed


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL this worker when ``parent`` dies, even in the middle of a hung evaluation (Linux).

    Exits at once if ``parent`` died before the request took effect (the worker is then
    already some other process's child). Does nothing where ``prctl`` is missing.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return
    if armed and parent is not None and os.getppid() != parent:
        os._exit(0)


def _torchvision_shim() -> None:
    """PyPI's torchvision is a CUDA build; its C ops fail beside the CPU torch.

    Declaring the two op schemas it registers fakes for lets it import (used only for
    the environments bisect-spec builds, never for ``--sglang current``).
    """
    import torch

    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")
    globals()["_TORCHVISION_LIBRARY"] = library


#: Outbound connection attempts the guard refused (reported by the "info" request).
BLOCKED: list[str] = []


def _no_network() -> None:
    """Evaluations run offline: any outbound connection or DNS lookup fails at once.

    Without this a hub id costs 46 s of retries before failing; with it, the attempt is
    a recorded failure (``ConnectionRefusedError: bisect-spec blocked ...``), never a hang.
    Loopback stays allowed.
    """
    import socket

    local = {"127.0.0.1", "::1", "localhost", "0.0.0.0"}
    real_connect, real_connect_ex, real_getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def refuse(what: str) -> ConnectionRefusedError:
        BLOCKED.append(what)
        return ConnectionRefusedError(f"bisect-spec blocked network access to {what}: evaluations run offline")

    def connect(self: socket.socket, address: object) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and address[0] not in local:
            raise refuse(f"{address[0]}:{address[1]}")
        return real_connect(self, address)  # type: ignore[arg-type]

    def connect_ex(self: socket.socket, address: object) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and address[0] not in local:
            raise refuse(f"{address[0]}:{address[1]}")
        return real_connect_ex(self, address)  # type: ignore[arg-type]

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host is not None and str(host) not in local:
            raise refuse(str(host))
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]


def main() -> int:
    protocol_fd = os.dup(1)
    os.environ["BISECT_SPEC_PROTOCOL_FD"] = str(protocol_fd)
    protocol = os.fdopen(protocol_fd, "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    config = json.loads(sys.argv[1])
    _die_with_parent(config.get("parent"))
    _load_package()
    for lock in _stale_build_locks():
        print(f"bisect-spec: removed a killed JIT build's stale lock {lock}", file=sys.stderr)
    if config.get("offline", True):
        _no_network()
    if config.get("torchvision_shim"):
        _torchvision_shim()
    try:
        from bisect_spec.inside.evaluator import Evaluator

        evaluator = Evaluator(config.get("hardware"), int(config.get("gpus", 8)))
    except BaseException as exc:
        import traceback

        protocol.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc()[-3000:]}) + "\n")
        return 3
    if config.get("zygote"):
        return _zygote(evaluator, protocol, protocol_fd)
    protocol.write(json.dumps({"ok": True, "info": evaluator.info()}) + "\n")
    return _serve(evaluator, protocol)


def _serve(evaluator: Any, protocol: IO[str]) -> int:
    """Answer requests from stdin until end-of-file (the pool closed this worker) or ``exit``."""
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if request.get("gpus") is not None:  # a warm worker serves every GPU count of its box: this request's
            evaluator.use_gpus(int(request["gpus"]))
        if op == "eval":
            reply = evaluator.evaluate(request["argv"])
        elif op == "flags":
            reply = {"flags": evaluator.flags()}
        elif op == "info":
            reply = {**evaluator.info(), "network_blocked": list(BLOCKED)}
        elif op == "architecture":
            reply = evaluator.knows_architecture(request["architecture"])
        elif op == "source":
            reply = evaluator.source_of(request["file"], request["function"])
        elif op == "block":
            reply = evaluator.block_at(request["file"], int(request["line"]))
        elif op == "env_vars":
            from bisect_spec.inside.launch.environment import speculative_env_vars

            reply = {"env_vars": speculative_env_vars(evaluator.package_root)}
        elif op == "merged_argv":
            reply = evaluator.merged_argv(request["argv"])
        elif op == "find":
            reply = evaluator.find_code(request["pattern"], int(request.get("limit", 20)))
        elif op == "exit":
            return 0
        else:
            reply = {"error": f"unknown op {op!r}"}
        reply["id"] = request.get("id")
        protocol.write(json.dumps(reply, default=repr) + "\n")
    return 0


#: the name a zygote shows in ``ps`` and ``/proc/PID/comm`` (its workers keep their interpreter's)
ZYGOTE_NAME = b"bisect-zygote"
PR_SET_NAME = 15


def _zygote(evaluator: Any, protocol: IO[str], protocol_fd: int) -> int:
    """Fork the pool's workers from this process, which has imported SGLang and evaluates nothing.

    stdin is the pool's end of a ``SOCK_SEQPACKET`` Unix socket. Each ``{"op": "fork"}`` message carries
    three file descriptors, the new worker's stdin, protocol (stdout) and stderr; the child puts them where a
    started worker has its own, says hello and serves as one (:func:`_serve`). The zygote answers
    ``{"forked": PID}``, and ``{"exited": PID, "returncode": N}`` (``subprocess``'s convention) when it has
    reaped a worker. A worker is a copy of this process as it is now, right after the import: the same state a
    worker that imported SGLang itself starts from, so no verdict depends on which way it started.
    End-of-file on stdin (the pool closed) ends the zygote, and its workers with it (their parent-death signal).
    """
    import select
    import socket

    name = _process_name()
    _set_process_name(ZYGOTE_NAME)
    control = socket.socket(fileno=os.dup(0))
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)  # the wake-up byte is what matters
    zygote = os.getpid()
    protocol.write(json.dumps({"ok": True, "info": evaluator.info(), "zygote": zygote}) + "\n")
    while True:
        ready, _, _ = select.select([control.fileno(), wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            _reap(control)
        if control.fileno() not in ready:
            continue
        message, fds, _flags, _address = socket.recv_fds(control, 65536, 3)
        if not message:
            return 0
        if json.loads(message).get("op") != "fork" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"error": "a fork request carries three file descriptors"}).encode())
            continue
        sys.stderr.flush()
        protocol.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(wake_read)
            os.close(wake_write)
            control.close()
            _set_process_name(name)  # a worker is named as one that started itself is (fork copies the name)
            os.setsid()
            os.dup2(fds[0], 0)
            os.dup2(fds[1], protocol_fd)
            os.dup2(fds[2], 2)
            os.dup2(2, 1)
            for fd in fds:
                os.close(fd)
            _die_with_parent(zygote)
            protocol.write(json.dumps({"ok": True, "info": evaluator.info()}) + "\n")
            return _serve(evaluator, protocol)
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"forked": pid}).encode())


def _process_name() -> bytes:
    try:
        with open("/proc/self/comm", "rb") as comm:
            return comm.read().strip()
    except OSError:
        return b"python"


def _set_process_name(name: bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def _reap(control: Any) -> None:
    """Tell the pool how each worker that ended did (the zygote is their parent: only it can wait for them)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        control.send(json.dumps({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())


if __name__ == "__main__":
    sys.exit(main())

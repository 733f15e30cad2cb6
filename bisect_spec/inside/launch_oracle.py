"""The fidelity oracle: SGLang's own ``launch_server``, stopped where it first needs a GPU.

bisect-spec's verdict comes from an in-process evaluation; this module is the check
nobody here wrote: the real ``python -m sglang.launch_server`` run on this CPU machine
under the same simulated box, stopped when it fails or when it reaches the first step
that needs a GPU kernel, weights or the network. Reaching that point is a pass.

It has two halves in one file.

* **Inside a release environment** (:func:`main`, run as a script, like ``launch_main.py``):
  a *zygote* prepares the process exactly as ``launch_main`` prepares a launched server
  (torchvision shim, SGLang imported honestly on the CPU, the hardware profile installed,
  later SGLang imports simulated-first), imports the launch path once, then forks one
  child per configuration. The child runs ``sglang.launch_server`` as ``__main__`` with
  ``runpy`` (what ``python -m`` does) in a new session, its output in ``main.log``.
  Standard library only at module level; SGLang and torch are reached by module name.
* **Pure functions over a launch's logs** (used by the zygote and by the orchestrator;
  no processes): :func:`events_of` reads the markers, :func:`settled` says whether
  every process of the tree has reached its stop point, :func:`verdict` turns a finished
  launch into ``reached`` / ``failed`` / ``timed-out`` with the deciding failure's
  exception type and failing statement, computed by the same code as in-process
  (``statements.failure_from_block``). ``scripts/bench_fidelity.py`` compares that with
  the in-process verdict.

Stop points (each prints one marker line and then blocks the process; the zygote kills
the launch's session once the tree has settled):

``set_device``            ``torch.cuda.set_device`` (the simulated one), the first device call
                          of a scheduler (``init_parallel_runtime`` from 0.5.21, the model
                          runner's ``init_torch_distributed`` before)
``init_process_group``    ``torch.distributed.init_process_group`` (NCCL/gloo)
``init_torch_distributed`` / ``load_model``  the model runner's, where the class has them
``network``               a connection to a host other than loopback, from the main thread
``wait-children``         a process blocks on a ``multiprocessing`` pipe: the launcher waiting
                          for its schedulers to report ready (its last step before serving)
``wait-ipc``              a process blocks on a ZeroMQ receive (the detokenizer's loop)

A scheduler has settled when it reached a device, weights or network stop; every other
process of the tree when it reached any stop or exited cleanly. A device error raised
instead of a stop (CPU torch's ``Torch not compiled with CUDA enabled``, a call into a
stubbed GPU-only package, an import of a GPU package the simulated box only pretends to
have) also counts as reaching device work. The box is ``simulated_gpu``'s, as for the
in-process verdict: its GPU packages answer availability and version checks (the
launcher's ``assert_pkg_version`` included) and are never imported.

What differs from a plain ``python -m sglang.launch_server`` and why the verdict does not:

1. *One import, many launches.* The zygote imports SGLang and the launch path
   (``sglang.srt.entrypoints.http_server`` and what it imports) before any configuration
   is known, and forks a child per configuration; ``launch_server.py`` itself still runs
   fresh as ``__main__`` in each child. A plain launch imports the same modules, in the
   same process preparation, a few hundred milliseconds later (after argument parsing).
   Every child starts from the same pristine zygote, never from another launch.
2. *Fork instead of spawn.* SGLang starts its scheduler, detokenizer and data-parallel
   controller with ``multiprocessing`` ``spawn``. Here every such process is forked
   (``SpawnProcess._Popen`` uses the fork ``Popen``), so it inherits the simulated box
   and the imports (a spawned child would import SGLang again, 7-10 s, without the
   simulation). The process runs the same target with the same arguments; what spawn
   would have reset is reset (signal handlers), the environment variables are the same
   (spawn passes ``os.environ`` too). It also inherits the launcher's in-memory state,
   e.g. the runtime context the launcher published: SGLang re-publishes it in the
   scheduler (last publish wins), so the scheduler reads its own.
3. *Per-process logs.* A forked process writes to ``<pid>.log`` beside ``main.log``, so
   eight ranks failing at once leave eight readable tracebacks, not one interleaved one.
4. *Stopping.* A stop blocks the process instead of letting it fail on the missing GPU;
   nothing SGLang does before that point changes.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import json
import os
import re
import sys
import time
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA = "bisect-spec/launch-oracle/1"
#: Prefix of a marker line; the rest of the line is one JSON object.
MARKER = "@@bisect-spec-oracle "
#: Stops that need a GPU, weights or the network (a scheduler must reach one of these).
DEVICE_STOPS = ("set_device", "init_process_group", "init_torch_distributed", "load_model", "network")
#: Stops of a process waiting for its peers (launcher, detokenizer, data-parallel controller).
WAIT_STOPS = ("wait-children", "wait-ipc")
#: A failure that is the device itself answering: CPU torch, a stubbed GPU-only package, no driver.
DEVICE_ERROR = re.compile(r"Torch not compiled with CUDA enabled|is a bisect-spec stub: it needs a GPU build"
                          r"|bisect-spec never imports GPU code"
                          r"|Found no NVIDIA driver|No CUDA GPUs are available|CUDA driver initialization failed"
                          r"|libcuda\.so|CUDA_HOME environment variable is not set")
#: Launcher tracebacks that only report that a subprocess died first ("see above").
CONSEQUENCE = re.compile(r"Initialization failed\. Please see the error messages above|scheduler died during"
                         r"|scheduler is dead|Rank \d+ scheduler|Received sigquit|KeyboardInterrupt")
MAIN_LOG = "main.log"

# -- orchestrator side: pure functions over logs ------------------------------------


def events_of(texts: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every marker of a launch, from its logs (``{file name: text}``), in time order."""
    found: list[dict[str, Any]] = []
    for name, text in texts.items():
        for line in text.splitlines():
            at = line.find(MARKER)
            if at < 0:
                continue
            try:
                event = json.loads(line[at + len(MARKER):])
            except ValueError:
                continue  # a line cut by a kill
            if isinstance(event, dict):
                event["log"] = name
                found.append(event)
    found.sort(key=lambda e: (e.get("t", 0.0), e.get("seq", 0)))
    return found


def processes(events: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """pid -> ``{"role", "reached", "reached_any_thread", "children", "exit", "log", "details"}`` per process.

    ``reached`` lists the stops met by the process's main thread, ``reached_any_thread``
    those met by any of its threads (a data-parallel controller waits for its schedulers
    in one thread per rank), ``details`` what each stop saw (``set_device``: the device).
    """
    table: dict[int, dict[str, Any]] = {}

    def entry(pid: int) -> dict[str, Any]:
        return table.setdefault(pid, {"role": "?", "reached": [], "reached_any_thread": [], "children": [],
                                      "exit": None, "log": None, "details": []})

    for event in events:
        kind, pid = event.get("e"), int(event.get("pid", 0))
        if kind == "start":
            entry(pid).update(role=str(event.get("role", "?")), log=event.get("log"))
        elif kind == "spawn":
            child = entry(int(event["child"]))
            entry(pid)["children"].append(int(event["child"]))
            if child["role"] == "?":
                child["role"] = str(event.get("target", "?"))
        elif kind == "reached":
            what = str(event.get("what"))
            entry(pid)["reached_any_thread"].append(what)
            if event.get("main_thread", True):
                entry(pid)["reached"].append(what)
            if event.get("detail"):
                entry(pid)["details"].append(f"{what}{event['detail']}")
        elif kind == "exit":
            entry(pid)["exit"] = event.get("code")
    return table


def is_scheduler(role: str) -> bool:
    return "scheduler" in role.lower()


#: Seconds without a new marker before a tree with a second spawner (a data-parallel
#: controller starts its schedulers from one thread per rank) counts as settled.
QUIET_SECONDS = 1.0


def settled(events: Iterable[dict[str, Any]], *, quiet: float = float("inf")) -> bool:
    """Whether every process of the launch tree has reached its stop point.

    The launcher (role ``main``) must have reached one in its main thread (normally
    ``wait-children``); a scheduler a device, weights or network stop; any other process
    a stop in any thread, or a clean exit. When a process other than the launcher starts
    processes too, the tree must also have been quiet (no new marker) for
    :data:`QUIET_SECONDS`: its later ranks may not have been started yet.

    :param quiet: seconds since the last marker appeared.
    """
    table = processes(events)
    roots = [p for p in table.values() if p["role"] == "main"]
    if not roots or not roots[0]["reached"]:
        return False
    for proc in table.values():
        if proc["role"] == "main":
            continue
        if is_scheduler(proc["role"]):
            if not any(stop in DEVICE_STOPS for stop in proc["reached"]):
                return False
        elif not proc["reached_any_thread"] and proc["exit"] != 0:
            return False
    spawners = [p for p in table.values() if p["role"] != "main" and p["children"]]
    return not spawners or quiet >= QUIET_SECONDS


def _first_stop(table: Mapping[int, dict[str, Any]]) -> str:
    """Where the launch stopped, for reports: the schedulers' stop, else the launcher's."""
    stops = [str(s) for p in table.values() if is_scheduler(p["role"]) for s in p["reached"] if s in DEVICE_STOPS]
    if stops:
        return stops[0]
    mains = [str(s) for p in table.values() if p["role"] == "main" for s in p["reached"]]
    return mains[0] if mains else ""


def verdict(texts: Mapping[str, str], *, ended: str, returncode: int | None = None) -> dict[str, Any]:
    """The oracle's verdict on one finished launch.

    :param texts: ``{log file name: text}`` of the launch (``main.log`` and one per forked process).
    :param ended: how the zygote saw it end: ``reached`` (the tree settled), ``exited`` or ``timed-out``.
    :return: ``{"verdict": "reached"|"failed"|"timed-out", "stop", "process", "exception",
        "frame", "error", "traceback_tail", "processes"}``; ``stop`` says where a reached
        launch stopped (``set_device``, ``device-error``, ...) and where a failed one's
        failure was raised (``main`` or the subprocess's target).
    """
    from . import statements

    events = events_of(texts)
    table = processes(events)
    summary = {str(pid): {"role": p["role"], "reached": p["reached_any_thread"], "exit": p["exit"],
                          **({"details": p["details"]} if p["details"] else {})} for pid, p in table.items()}
    out: dict[str, Any] = {"verdict": "timed-out", "stop": "", "process": "", "exception": {}, "frame": {},
                           "error": "", "traceback_tail": "", "processes": summary}
    if ended == "reached":
        out.update(verdict="reached", stop=_first_stop(table))
        return out
    role_of = {str(p["log"]): p["role"] for p in table.values() if p["log"]}
    blocks: list[tuple[int, str, dict[str, Any]]] = []  # (rank, log, block): genuine failures first
    for name, text in texts.items():
        for block in statements.traceback_blocks(text):
            if not block["type"]:
                continue
            consequence = bool(CONSEQUENCE.search(f"{block['type']}: {block['message']}"))
            blocks.append((1 if consequence else 0, name, block))
    if blocks:
        # a subprocess's genuine failure explains the launcher's "see above"; in a tie the launcher's own
        _rank, name, block = sorted(blocks, key=lambda b: (b[0], b[1] != MAIN_LOG))[0]
        failure = statements.failure_from_block(block)
        message = block["message"].splitlines()[0] if block["message"] else ""
        out.update(exception={k: v for k, v in failure["exception"].items() if k != "module"},
                   frame=failure.get("frame", {}), traceback_tail=failure["traceback_tail"],
                   process=role_of.get(name, "main" if name == MAIN_LOG else "?"),
                   error=f"{block['type']}: {message}" if message else block["type"])
        if DEVICE_ERROR.search(block["message"]) or DEVICE_ERROR.search(block["type"]):
            out.update(verdict="reached", stop="device-error")
            return out
        out["verdict"] = "failed" if ended == "exited" else "timed-out"
        return out
    if ended == "exited":
        lines = [line for line in texts.get(MAIN_LOG, "").splitlines() if line.strip() and MARKER not in line]
        out.update(verdict="failed", error=(lines[-1].strip()[:300] if lines else f"exit({returncode})"),
                   process="main")
    return out


def read_logs(directory: Path) -> dict[str, str]:
    """``{file name: text}`` of a launch directory's logs."""
    return {p.name: p.read_text(errors="replace") for p in sorted(Path(directory).glob("*.log"))}


# -- inside a release environment ----------------------------------------------------

_STATE: dict[str, Any] = {"seq": 0, "seen": set(), "dir": None}


def _emit(event: dict[str, Any]) -> None:
    """One marker line on this process's stderr (its log)."""
    _STATE["seq"] += 1
    import threading

    record = {**event, "pid": os.getpid(), "t": round(time.time(), 4), "seq": _STATE["seq"],
              "main_thread": threading.current_thread() is threading.main_thread()}
    with contextlib.suppress(OSError):
        os.write(2, (MARKER + json.dumps(record, default=repr) + "\n").encode())


def _reach(what: str, detail: str = "") -> None:
    """A stop point: say so once, then block this thread until the launch is killed."""
    _emit({"e": "reached", "what": what, "detail": detail})
    _flush()
    while True:
        time.sleep(3600)


def _waiting(what: str) -> None:
    """A wait stop: say so once per process and kind of thread (main or not); the real wait goes on."""
    key = (os.getpid(), what, _main_thread())
    if key in _STATE["seen"]:
        return
    _STATE["seen"].add(key)
    _emit({"e": "reached", "what": what})


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def install_stop_hooks() -> None:
    """Make every stop point print its marker and block (see the module docstring).

    Called in the zygote after the simulated box is installed and before SGLang's launch
    path is imported, so names bound at import (``from multiprocessing.connection import
    wait``) already see the hooks. Every hook is installed only where the name exists.
    """
    import importlib

    torch: Any = importlib.import_module("torch")
    _replace_simulated("cuda.set_device", lambda *a, **k: _reach("set_device", repr(a[:1])))
    distributed = getattr(torch, "distributed", None)
    if distributed is not None and hasattr(distributed, "init_process_group"):
        distributed.init_process_group = lambda *a, **k: _reach("init_process_group", str(k.get("backend", "")))
    _hook_network()
    _hook_processes()
    _hook_waits()


def _replace_simulated(name: str, value: Callable[..., Any]) -> None:
    """Set a simulated ``torch.cuda`` answer so that suspending the simulation keeps it."""
    import importlib

    torch: Any = importlib.import_module("torch")
    owner, attribute = name.split(".", 1)
    setattr(getattr(torch, owner), attribute, value)
    simulated = sys.modules.get("bisect_spec.inside.simulated_gpu")
    answers = getattr(simulated, "_SIMULATED", None)
    if isinstance(answers, dict) and name in answers:
        answers[name] = value


def hook_model_runner() -> list[str]:
    """Stop at the model runner's ``init_torch_distributed`` / ``load_model`` where the class has them.

    :return: the methods hooked (none when the module is not imported yet).
    """
    module = sys.modules.get("sglang.srt.model_executor.model_runner")
    runner = getattr(module, "ModelRunner", None)
    hooked = []
    for name in ("init_torch_distributed", "load_model"):
        if runner is not None and callable(getattr(runner, name, None)):
            setattr(runner, name, lambda self, *a, _name=name, **k: _reach(_name, f"({getattr(self, 'gpu_id', '?')},)"))
            hooked.append(name)
    return hooked


def _hook_network() -> None:
    import socket

    local = {"127.0.0.1", "::1", "localhost", "0.0.0.0", "", None}
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def outside(sock: socket.socket, address: object) -> str | None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and address[0] not in local:
            return f"{address[0]}:{address[1]}"
        return None

    def stop_or_refuse(where: str) -> None:
        if _main_thread():
            _reach("network", where)
        raise ConnectionRefusedError(f"bisect-spec oracle: no network from a background thread ({where})")

    def connect(sock: socket.socket, address: Any) -> None:
        where = outside(sock, address)
        if where:
            stop_or_refuse(where)
        return real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        where = outside(sock, address)
        if where:
            stop_or_refuse(where)
        return real_connect_ex(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in local and not str(host).startswith("127."):
            stop_or_refuse(str(host))
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo


def _hook_processes() -> None:
    """Fork every process SGLang starts, log it per process, reset what spawn would reset."""
    import multiprocessing.context
    import multiprocessing.process
    import signal

    context: Any = multiprocessing.context

    def popen_fork(process_obj: Any) -> Any:
        return context.ForkProcess._Popen(process_obj)

    for name in ("SpawnProcess", "ForkServerProcess"):
        cls = getattr(context, name, None)
        if cls is not None:
            cls._Popen = staticmethod(popen_fork)
    base: Any = multiprocessing.process.BaseProcess
    real_start, real_bootstrap = base.start, base._bootstrap

    def start(self: Any) -> None:
        name = _target_name(self)  # start() drops the target
        real_start(self)
        _emit({"e": "spawn", "child": self.pid, "target": name})

    def bootstrap(self: Any, *args: Any, **kwargs: Any) -> int:
        directory = _STATE.get("dir")
        if directory:
            fd = os.open(os.path.join(directory, f"{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        for number in signal.valid_signals():  # a spawned interpreter starts with the default handlers
            try:
                handler = signal.getsignal(number)
            except (OSError, ValueError):
                continue
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
        _STATE["seen"] = set()
        _emit({"e": "start", "role": _target_name(self), "parent": os.getppid()})
        code = 1
        try:
            code = int(real_bootstrap(self, *args, **kwargs))
        finally:
            _emit({"e": "exit", "code": code})
        return code

    base.start = start
    base._bootstrap = bootstrap


def _target_name(process: Any) -> str:
    target = getattr(process, "_target", None)
    return str(getattr(target, "__name__", None) or type(process).__name__)


def _hook_waits() -> None:
    """Mark a process that blocks on a ``multiprocessing`` pipe or a ZeroMQ receive."""
    import importlib
    import multiprocessing.connection as connection

    conn: Any = connection.Connection
    for name in ("poll", "recv", "recv_bytes"):
        real = getattr(conn, name)
        setattr(conn, name, _before(real, "wait-children"))
    real_wait = connection.wait
    connection.wait = _before(real_wait, "wait-children")
    try:
        zmq: Any = importlib.import_module("zmq")
    except ImportError:
        return
    for name in ("recv", "recv_pyobj", "recv_multipart", "recv_string", "recv_json"):
        real = getattr(zmq.Socket, name, None)
        if real is not None:
            setattr(zmq.Socket, name, _before(real, "wait-ipc"))
    poll = getattr(zmq.Poller, "poll", None)
    if poll is not None:
        zmq.Poller.poll = _before(poll, "wait-ipc")


def _before(real: Callable[..., Any], what: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _waiting(what)
        return real(*args, **kwargs)

    wrapper.__wrapped__ = real  # type: ignore[attr-defined]
    return wrapper


class _GpuPackageModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """In a launch, the box's GPU packages import (a real install has them), their code never runs.

    ``simulated_gpu`` makes the box claim the GPU packages the release pins (``find_spec``,
    versions) and refuses to import them: right for resolution, but the launcher imports
    some before any GPU work (0.5.23's ``configure_logger`` does ``from flashinfer.jit.core
    import logger`` when flashinfer is available). Here such an import gives a stub module
    (``version_shims``): every attribute stands in and *calling* one raises ``... is a
    bisect-spec stub: it needs a GPU build``, which the verdict counts as reaching GPU
    work. The one exception is a module-level ``logger``, a plain ``logging.Logger`` on a
    real install and here. Each import is recorded (a ``gpu-package`` marker).
    """

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        import importlib.machinery

        from bisect_spec.inside import simulated_gpu

        if name.split(".")[0] not in simulated_gpu.box_package_modules():
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        from bisect_spec.inside import version_shims

        class GpuPackageModule(version_shims._StubModule):
            def __getattr__(self, attribute: str) -> Any:
                if attribute == "logger":
                    import logging

                    return logging.getLogger(self.__name__)
                return super().__getattr__(attribute)

        _emit({"e": "gpu-package", "module": spec.name})
        module = GpuPackageModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


#: Modules the launch path imports (lazily, inside ``run_server``); the zygote imports them once.
LAUNCH_MODULES = ("sglang.srt.entrypoints.http_server",)
#: Packages whose every module the launch imports one by one, ignoring failures
#: (``import_processors``, the model registry); the zygote imports them once the same way.
LAUNCH_PACKAGES = ("sglang.srt.multimodal.processors", "sglang.srt.models")


def preimport(stubbed: list[str]) -> list[str]:
    """Import the launch path in the zygote, as the launch itself would (see the module docstring).

    :param stubbed: GPU-only modules stubbed so far (grows; see ``evaluator.with_stubs``).
    :return: the package modules that failed to import (the launch will try them again and fail the same way).
    """
    import importlib
    import pkgutil

    for name in LAUNCH_MODULES:
        _STATE.setdefault("imported", {})[name] = _import_like_launch_main(name, stubbed)
    failed: dict[str, BaseException] = {}
    for package_name in LAUNCH_PACKAGES:
        try:
            package = importlib.import_module(package_name)
        except Exception as exc:
            failed[package_name] = exc
            continue
        for _finder, name, is_package in pkgutil.iter_modules(package.__path__, package_name + "."):
            if is_package:
                continue
            try:
                importlib.import_module(name)
            except Exception as exc:
                failed[name] = exc
    if failed:
        sys.meta_path.insert(0, _FailedImports(failed))
    return sorted(failed)


def _import_like_launch_main(name: str, stubbed: list[str]) -> str:
    """Import ``name`` simulated-first, as ``launch_main``'s importer does; if that fails, on the CPU.

    ``launch_main`` falls back to the CPU only on an ImportError; here any failure of
    the simulated attempt does (0.5.9/0.5.12 register fake kernels for ``sgl_kernel``
    ops when they believe CUDA is present, which the stub cannot declare). What the
    failed attempt imported is dropped first. On the CPU, GPU-only packages that are
    imported unconditionally (``sgl_kernel`` in 0.5.9/0.5.12) are stubbed as in a worker
    (``evaluator.with_stubs``), with the box's package answers hidden meanwhile: a package
    the box claims to have cannot be stubbed.
    :return: ``simulated`` or ``cpu``: how it was imported.
    """
    import importlib

    from bisect_spec.inside import evaluator, simulated_gpu

    before = set(sys.modules)
    try:
        evaluator.with_stubs(lambda: importlib.import_module(name), stubbed)
        return "simulated"
    except Exception as exc:
        simulated_failure = exc
        for added in set(sys.modules) - before:
            if added == "sglang" or added.startswith("sglang."):
                sys.modules.pop(added, None)
    try:
        with simulated_gpu.packages_hidden():  # what the box claims but cannot import gets a stub
            evaluator.with_stubs(lambda: simulated_gpu.import_on_cpu(name), stubbed)
    except Exception as exc:
        # the first failure is the cause (a module the release environment lacks); the retry's own
        # error can be an artefact of re-running modules that modules kept from the first try hooked
        # into (0.5.18+: msgspec's "unique `tag` values" from kv_events_publisher)
        raise exc from simulated_failure
    return "cpu"


class _FailedImports:
    """A module of the launch path that failed to import in the zygote fails again at once.

    Importing it again fails the same way (a CUDA-only package it needs is missing here),
    after seconds of importing what comes before; the same exception type and message
    are raised without the wait.
    """

    def __init__(self, failed: Mapping[str, BaseException]) -> None:
        self.failed = {name: (type(exc), str(exc)) for name, exc in failed.items()}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        known = self.failed.get(name)
        if known is None:
            return None
        kind, message = known
        if issubclass(kind, ImportError):
            raise kind(message, name=name)
        raise kind(message)


def _launch_child(argv: Sequence[str], directory: str, protocol_fd: int) -> None:
    """In the forked child: become a fresh ``python -m sglang.launch_server`` and never return."""
    import atexit
    import runpy

    code = 1
    try:
        os.setsid()
        fd = os.open(os.path.join(directory, MAIN_LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.close(protocol_fd)
        _STATE.update(dir=directory, seen=set())
        _emit({"e": "start", "role": "main", "parent": os.getppid()})
        sys.argv = ["sglang.launch_server", *argv]
        try:
            runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
    finally:
        _flush()
        os._exit(code)


def _reap(pid: int, deadline: float) -> int | None:
    """Wait for ``pid`` until ``deadline`` (monotonic); its exit status or None."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _reap_orphans() -> None:
    """Collect the launch's orphans (the zygote is their subreaper)."""
    while True:
        try:
            done, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not done:
            return


def run_one(argv: Sequence[str], directory: str, *, deadline: float, protocol_fd: int) -> dict[str, Any]:
    """Fork one launch of ``argv``, watch its logs until it settles, exits or times out, then kill it."""
    import signal

    os.makedirs(directory, exist_ok=True)
    for old in Path(directory).glob("*.log"):
        old.unlink()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _launch_child(argv, directory, protocol_fd)
    ended, code = "timed-out", None
    seen, changed = 0, time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            ended, code = "exited", os.waitstatus_to_exitcode(status)
            break
        events = events_of(read_logs(Path(directory)))
        if len(events) != seen:
            seen, changed = len(events), time.monotonic()
        if settled(events, quiet=time.monotonic() - changed):
            ended = "reached"
            break
        if time.monotonic() - started > deadline:
            break
        time.sleep(0.05)
    seconds = time.monotonic() - started
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if ended != "exited":
        code = _reap(pid, time.monotonic() + 10)
    settle = time.monotonic() + 2
    while time.monotonic() < settle:  # the killed subprocesses are reparented to this subreaper
        _reap_orphans()
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.02)
    _reap_orphans()
    return {"ended": ended, "returncode": code, "seconds": round(seconds, 3), "dir": directory}


#: Remote code of the stand-in processor a multimodal launch copy gets (see :func:`write_tokenizer`).
STAND_IN_PROCESSOR = '''"""Stand-in multimodal processor written by bisect-spec for a launch-only copy of a config-only profile.

The real checkpoint ships its processor as remote code; the profile ships none. SGLang's
launcher only builds the processor before the first device step (it reads the tokenizer,
the image processor and ``media_processor.media_proc_cfg``); this class answers those and
refuses to process media.
"""

import json
import os

from transformers import AutoTokenizer
from transformers.image_processing_utils import BaseImageProcessor


class StandInImageProcessor(BaseImageProcessor):
    model_input_names = ["pixel_values"]

    def __init__(self, media_proc_cfg=None, **kwargs):
        super().__init__(**kwargs)
        self.media_proc_cfg = dict(media_proc_cfg or {})

    def preprocess(self, *args, **kwargs):
        raise NotImplementedError("bisect-spec stand-in processor: no media processing")


class StandInProcessor:
    attributes = ["image_processor", "tokenizer"]

    @classmethod
    def register_for_auto_class(cls, *args, **kwargs):
        return None

    def __init__(self, image_processor, tokenizer):
        self.image_processor = image_processor
        self.media_processor = image_processor
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, path, *args, **kwargs):
        with open(os.path.join(path, "preprocessor_config.json")) as handle:
            media = json.load(handle)["media_proc_cfg"]
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=kwargs.get("trust_remote_code", False))
        return cls(StandInImageProcessor(media_proc_cfg=media), tokenizer)

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("bisect-spec stand-in processor: no media processing")
'''


def _special_tokens(config: Mapping[str, Any]) -> dict[str, int]:
    """The special tokens a launch needs, at the ids the model config gives them."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, Mapping)

    def ids(key: str) -> list[int]:
        value = config.get(key, text.get(key))
        return [int(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)]

    tokens: dict[str, int] = {}
    for name, key in (("<s>", "bos_token_id"), ("<pad>", "pad_token_id"), ("<|media_pad|>", "media_placeholder_token_id")):
        found = ids(key)
        if found and found[0] not in tokens.values():
            tokens[name] = found[0]
    for number, eos in enumerate(ids("eos_token_id")):
        if eos not in tokens.values():
            tokens["</s>" if number == 0 else f"<|eos_{number}|>"] = eos
    return tokens


def write_tokenizer(directory: str, config: Mapping[str, Any]) -> list[str]:
    """Make ``directory`` a launch-only copy of a config-only model profile: the config plus
    a tiny tokenizer that loads offline (and, for a multimodal config, a stand-in processor).

    The tokenizer is word-level over 256 byte-like symbols, with the model's special
    tokens (bos, eos, pad, media placeholder) at the ids its config gives them, built with
    the ``tokenizers`` library of the release environment; ``tokenizer_config.json`` names
    ``PreTrainedTokenizerFast``. Deterministic: the same config gives the same files.

    :return: the files written.
    """
    import importlib

    tokenizers: Any = importlib.import_module("tokenizers")
    specials = _special_tokens(config)
    vocab: dict[str, int] = {"<unk>": 0, **{f"<0x{b:02X}>": b + 1 for b in range(256)}}
    for name, index in specials.items():
        vocab = {k: v for k, v in vocab.items() if v != index}
        vocab[name] = index
    vocab.setdefault("<s>", 257)
    vocab.setdefault("</s>", 258)
    vocab.setdefault("<pad>", 259)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(sorted(k for k in vocab if k.startswith("<") and not k.startswith("<0x")))
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, Mapping)
    files = {
        "tokenizer.json": tokenizer.to_str(),
        "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                                             "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                                             "model_max_length": int(text.get("max_position_embeddings") or 4096)},
                                            indent=2, sort_keys=True),
        "special_tokens_map.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                               "pad_token": "<pad>"}, indent=2, sort_keys=True),
        "config.json": json.dumps(dict(config), indent=2, sort_keys=True),
    }
    vision = config.get("vision_config")
    if isinstance(vision, Mapping):
        patch = int(vision.get("patch_size", 14))
        merge = vision.get("merge_kernel_size", [2, 2])
        media = {"patch_size": patch, "merge_kernel_size": merge, "in_patch_limit": 16384,
                 "patch_limit_on_one_side": 512, "fixed_output_tokens": None,
                 "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
        files["preprocessor_config.json"] = json.dumps(
            {"auto_map": {"AutoProcessor": "processing_bisect_spec.StandInProcessor"}, "media_proc_cfg": media},
            indent=2, sort_keys=True)
        files["processing_bisect_spec.py"] = STAND_IN_PROCESSOR
    os.makedirs(directory, exist_ok=True)
    for name, content in files.items():
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path) as handle:
                if handle.read() == content:
                    continue
        staging = f"{path}.{os.getpid()}.tmp"  # one per process: parallel workers may write one profile
        with open(staging, "w") as handle:
            handle.write(content)
        os.replace(staging, path)
    return sorted(files)


def _load_package() -> None:
    """``bisect_spec.inside`` without running ``bisect_spec/__init__.py`` (orchestrator dependencies)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for name, path in (("bisect_spec", os.path.dirname(here)), ("bisect_spec.inside", here)):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package


def _become_subreaper() -> bool:
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        return False


def main() -> int:
    """Zygote: ``python launch_oracle.py CONFIG_JSON``; JSON requests on stdin, replies on the original stdout.

    CONFIG: ``{"torchvision_shim", "hardware", "gpus", "preimport": true}``. Requests:
    ``{"op": "launch", "argv", "dir", "deadline"}``, ``{"op": "tokenizer", "dir", "config"}``,
    ``{"op": "exit"}``. The first reply says whether SGLang imported, with ``info``.
    """
    protocol_fd = os.dup(1)
    protocol = os.fdopen(protocol_fd, "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    config = json.loads(sys.argv[1])
    _load_package()
    started = time.perf_counter()
    info: dict[str, Any] = {"subreaper": _become_subreaper()}
    try:
        import importlib

        from bisect_spec.inside import launch_main

        launch_main.prepare(config)
        sys.meta_path.insert(0, _GpuPackageModules())
        install_stop_hooks()
        stubbed: list[str] = []
        if config.get("preimport", True):
            info["preimport_failed"] = preimport(stubbed)
        info.update(launch_path_imported=_STATE.get("imported", {}), hooked=hook_model_runner(),
                    stubbed_modules=stubbed, preimport=bool(config.get("preimport", True)))
        sglang = importlib.import_module("sglang")
        info.update(sglang_version=getattr(sglang, "__version__", "?"), import_seconds=round(time.perf_counter() - started, 2),
                    python=".".join(map(str, sys.version_info[:3])))
    except BaseException as exc:
        import traceback

        # The earlier failures in the chain name the cause: a launch-path module missing from the release
        # environment (ModuleNotFoundError) makes the CPU retry re-run half-imported modules, whose own
        # error (0.5.18+: msgspec's "unique `tag` values") is the one raised last and says nothing.
        handled: list[str] = []
        context = exc.__cause__ or exc.__context__
        while context is not None and len(handled) < 3:
            handled.append(f" (after {type(context).__name__}: {str(context)[:300]})")
            context = context.__cause__ or context.__context__
        traceback.print_exc()  # the whole chain, in the zygote's log
        protocol.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:1000]}{''.join(handled)}",
                                   "traceback": traceback.format_exc()[-3000:]}) + "\n")
        return 3
    protocol.write(json.dumps({"ok": True, "info": info}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "launch":
            reply = run_one(request["argv"], request["dir"], deadline=float(request.get("deadline", 120)),
                            protocol_fd=protocol_fd)
        elif op == "tokenizer":
            reply = {"files": write_tokenizer(request["dir"], request["config"])}
        elif op == "exit":
            return 0
        else:
            reply = {"error": f"unknown op {op!r}"}
        reply["id"] = request.get("id")
        protocol.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

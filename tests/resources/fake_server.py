"""A small real stand-in for ``python -m sglang.launch_server`` (used by the launch tests).

It takes SGLang's flags plus ``--fake-mode MODE`` and behaves as ``launch_server`` does in
each way that matters to the launcher:

ready             serves ``/health`` (503 while "starting", then 200) and ``/model_info`` on ``--port``
resolution-error  runs the REAL installed SGLang's ``prepare_server_args`` + ``resolve_once`` on the
                  flags (under ``--fake-hardware NAME`` simulated, as a worker does); the traceback is real
crash-later-oom   resolution passes; a "scheduler" child dies with CUDA OOM, the server exits 1
crash-later-nccl  the same with an NCCL error
crash-later       the same with a plain RuntimeError in the scheduler
hang              never ready, never exits
spawn-children    ready, with a child, a grandchild whose parent exited, one that left the session, and a daemon
                  (double fork and ``setsid``, an empty environment: no marker); 7 pids in all
ignore-sigterm    ready, and it and its child ignore SIGTERM (the root notes each SIGTERM in ``PIDFILE.signals``)
flaky             alternates ready / crash-later-oom across launches (state in ``--fake-state FILE``)

``--fake-pidfile FILE`` receives every pid it starts (one per line), so tests can check they are gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: an argument every sleeper carries (unused by it): its command line names this file, even for a daemon
#: that dropped its environment (``.ci/run``'s leftover check finds it by this checkout's path)
SLEEPER_TAG = ("--started-by", str(Path(__file__).resolve()))


def _option(argv: list[str], name: str, default: str | None = None) -> str | None:
    for i, token in enumerate(argv):
        if token == name and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(name + "="):
            return token.split("=", 1)[1]
    return default


def _strip_fake(argv: list[str]) -> list[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        if token.startswith("--fake-"):
            skip = "=" not in token
            continue
        out.append(token)
    return out


def _record(pidfile: str | None, *pids: int) -> None:
    if pidfile:
        with open(pidfile, "a") as handle:
            handle.writelines(f"{pid}\n" for pid in pids)


def _serve(port: int, delay: float) -> None:
    started = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                code = 200 if time.monotonic() - started >= delay else 503
                self.send_response(code)
                self.end_headers()
            elif self.path in ("/model_info", "/get_model_info"):
                body = json.dumps({"model_path": "fake", "is_generation": True}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    print(f"[fake] serving on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


def _sleeper(*, ignore_term: bool = False, new_session: bool = False) -> subprocess.Popen[bytes]:
    code = ("import signal,time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "time.sleep(3600)")
    return subprocess.Popen([sys.executable, "-c", code, *SLEEPER_TAG], start_new_session=new_session)


def _orphan(*, daemon: bool) -> tuple[int, int]:
    """A sleeper started by a process that exits at once: ``(that process, the sleeper)``.

    ``daemon``: the sleeper also leaves the session (``setsid``) and drops its whole
    environment (so no launch marker): a classic double-forked daemon.
    """
    options = "start_new_session=True, env={}" if daemon else "start_new_session=False"
    code = ("import subprocess, sys\n"
            f"g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)', *{SLEEPER_TAG!r}], "
            f"stdout=subprocess.DEVNULL, {options})\n"
            "print(g.pid, flush=True)\n")
    middle = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert middle.stdout is not None
    orphan = int(middle.stdout.readline())
    middle.wait()
    return middle.pid, orphan


def _resolve_for_real(flags: list[str], hardware: str | None) -> None:
    """SGLang's own resolution, uncaught: the traceback printed is SGLang's.

    The process is prepared as bisect-spec's launcher prepares a real launch
    (``launch_main.prepare``: torchvision shim, simulated hardware).
    """
    package = types.ModuleType("bisect_spec")
    package.__path__ = [str(REPO / "bisect_spec")]
    sys.modules["bisect_spec"] = package
    from bisect_spec.inside.launch_main import prepare

    profile = json.loads((REPO / "bisect_spec" / "data" / "hardware" / f"{hardware}.json").read_text()) if hardware else None
    prepare({"torchvision_shim": True, "hardware": profile, "gpus": 8})
    import sglang.srt.server_args as server_args

    args = server_args.prepare_server_args(flags)
    if hasattr(args, "resolve_once"):
        args.resolve_once()


def _crash_later(kind: str, pidfile: str | None) -> None:
    errors = {
        "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
               "of 95.00 GiB of which 1.10 GiB is free.",
        "nccl": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system "
                "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "plain": "RuntimeError: Not implemented for this speculative attention backend",
    }
    code = (
        "import sys, time\n"
        "time.sleep(0.3)\n"
        "print('[2026-11-30 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):', flush=True)\n"
        "print('  File \"/opt/sglang/python/sglang/srt/managers/scheduler.py\", line 3100, in run_scheduler_process')\n"
        "print('    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)', flush=True)\n"
        f"print({errors[kind]!r}, flush=True)\n"
        "print('', flush=True)\n"
        "sys.exit(1)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    _record(pidfile, child.pid)
    child.wait()
    print("[2026-11-30 10:00:01] Received sigquit from a child process. It usually means the child failed.", flush=True)
    sys.exit(1)


def main() -> None:
    argv = sys.argv[1:]
    mode = _option(argv, "--fake-mode", "ready") or "ready"
    pidfile = _option(argv, "--fake-pidfile")
    port = int(_option(argv, "--port", "30000") or 30000)
    delay = float(_option(argv, "--fake-delay", "0.5") or 0.5)
    _record(pidfile, os.getpid())
    print(f"[fake] launch_server mode={mode} argv={argv}", flush=True)
    if mode == "flaky":
        state = Path(_option(argv, "--fake-state") or "/tmp/fake-state")
        count = int(state.read_text()) if state.is_file() else 0
        state.write_text(str(count + 1))
        mode = "ready" if count % 2 == 0 else "crash-later-oom"
    if mode == "resolution-error":
        _resolve_for_real(_strip_fake(argv), _option(argv, "--fake-hardware"))
        print("[fake] resolution passed", flush=True)
        sys.exit(0)
    if mode.startswith("crash-later"):
        _crash_later({"crash-later-oom": "oom", "crash-later-nccl": "nccl"}.get(mode, "plain"), pidfile)
    if mode == "hang":
        time.sleep(3600)
    if mode == "spawn-children":
        child = _sleeper()
        middle, grandchild = _orphan(daemon=False)  # re-parented (to init, or to a subreaper) once middle exits
        escaped = _sleeper(new_session=True)
        parent, daemon = _orphan(daemon=True)
        _record(pidfile, child.pid, middle, grandchild, escaped.pid, parent, daemon)
    if mode == "ignore-sigterm":
        def note(signum: int, _frame: object) -> None:
            if pidfile:
                with open(pidfile + ".signals", "a") as handle:
                    handle.write(f"{os.getpid()} {signal.Signals(signum).name}\n")

        signal.signal(signal.SIGTERM, note)
        child = _sleeper(ignore_term=True)
        _record(pidfile, child.pid)
    threading.Thread(target=_serve, args=(port, delay), daemon=True).start()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()

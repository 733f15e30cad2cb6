"""Real server launches: classify how ``launch_server`` ended, in the in-process signature scheme.

The in-process verdict (``inside/evaluator.py``) stops after argument resolution; some failures
only show when the server really starts (a scheduler that dies, CUDA OOM, NCCL). This
module decides *what* to launch and *what the end means*; starting and stopping the
process tree is :func:`bisect_spec.launch.supervision.serve_until_ready`'s job (the module that
starts processes).

Classification of one launch (schema ``bisect-spec/launch/1``, see :class:`LaunchOutcome`):

``ready``              the health endpoint answered 200; ``seconds_to_ready`` says when
``resolution-failed``  the main process died in argument resolution (a traceback through
                       ``prepare_server_args`` / ``resolve_once`` / ``server_args.py`` /
                       ``arg_groups/``, or an argparse error); ``signature`` is built by the
                       same code as in-process (``statements.failure_from_block`` +
                       ``signature.signature_of``), so its id equals the in-process one
``failed-later``       it died after resolution; ``sub_kind``: ``cuda-oom``, ``nccl``,
                       ``scheduler`` (a scheduler/subprocess traceback) or ``other``
``timed-out``          neither ready nor dead before the deadline

Everything is plain data: :func:`launch_server` takes plain arguments and returns a
JSON-serialisable :class:`LaunchOutcome`, so it can run inside a Ray task.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.inside import statements
from bisect_spec.launch import supervision
from bisect_spec.model.signature import Signature, normalise_message, signature_of
from bisect_spec.runtime import processes, worker

SCHEMA = "bisect-spec/launch/1"

#: Env var naming the command that stands in for ``python -m sglang.launch_server`` (for
#: testing: ``{python}`` is replaced by the environment's interpreter), shlex-split.
SERVER_COMMAND_ENV = "BISECT_SPEC_SERVER_COMMAND"

READY = "ready"
RESOLUTION_FAILED = "resolution-failed"
FAILED_LATER = "failed-later"
TIMED_OUT = "timed-out"

#: Functions and files whose presence in the main traceback means "failed in resolution".
_RESOLUTION_FUNCTIONS = {"prepare_server_args", "resolve_once", "from_cli_args"}
_RESOLUTION_FILES = re.compile(r"^srt/(server_args\.py|arg_groups/)")
#: Tracebacks SGLang logs for a subprocess (``Scheduler hit an exception: Traceback ...``).
_SUBPROCESS = re.compile(r"(\w+) hit an exception|scheduler.*(dead|died)|Rank \d+ scheduler", re.IGNORECASE)
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation|CUDA error: out of memory"
                  r"|Not enough memory\. Please try to increase --mem-fraction-static")
_NCCL = re.compile(r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ProcessGroupNCCL|NCCL WARN"
                   r"|DistBackendError")
_ARGPARSE_ERROR = re.compile(r"^[\w.\-]+(?: \w+)?: error: (?P<message>.+)$", re.MULTILINE)


@dataclass
class LaunchOutcome:
    """How one real launch ended; ``to_dict`` is the documented JSON (schema ``bisect-spec/launch/1``).

    ``status``            ready | resolution-failed | failed-later | timed-out
    ``sub_kind``          failed-later only: scheduler | cuda-oom | nccl | other
    ``seconds_to_ready``  ready only: seconds from start to the first health 200
    ``seconds``           wall time of the whole launch, cleanup included
    ``exit``              how the root process ended (``exit(1)``, ``killed (SIGKILL)``, ``still running``)
    ``signature``         resolution-failed: the in-process signature record (same id)
    ``exception``         ``{"type", "message"}`` of the deciding traceback (or argparse error)
    ``frame``             innermost SGLang frame, as in-process (``file``, ``line``, ``function``, ``statement``, ...)
    ``error``             one line: the exception line or the last error line of the log
    ``traceback_tail``    the deciding traceback (last 4000 characters)
    ``log``               path of the captured stdout+stderr
    ``argv``/``command``  the flags given to SGLang / the whole command line run
    ``port``, ``port_freed``, ``pids`` (every process of the tree seen), ``leftover_pids`` (alive after cleanup: [])
    ``health``            ``{"endpoint", "info_endpoint", "model_info"}`` when ready
    """

    status: str
    seconds: float
    argv: list[str]
    command: list[str]
    log: str
    port: int
    sub_kind: str | None = None
    seconds_to_ready: float | None = None
    returncode: int | None = None
    exit: str = ""
    signature: Signature | None = None
    exception: dict[str, Any] = field(default_factory=dict)
    frame: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    traceback_tail: str = ""
    port_freed: bool = True
    pids: list[int] = field(default_factory=list)
    leftover_pids: list[int] = field(default_factory=list)
    health: dict[str, Any] = field(default_factory=dict)

    @property
    def classification(self) -> str:
        """``status`` with the sub-kind (``failed-later/cuda-oom``) and, for resolution, the signature id."""
        if self.status == FAILED_LATER:
            return f"{self.status}/{self.sub_kind}"
        if self.status == RESOLUTION_FAILED and self.signature is not None:
            return f"{self.status}/{self.signature.id}"
        return self.status

    @property
    def headline(self) -> str:
        if self.status == READY:
            return f"ready in {self.seconds_to_ready:.1f} s"
        if self.status == TIMED_OUT:
            return f"timed out after {self.seconds:.0f} s (no health 200, still running)"
        where = ""
        if self.frame.get("function"):
            where = f" ({self.frame.get('file')}:{self.frame.get('line')} in {self.frame.get('function')})"
        kind = self.status if self.status == RESOLUTION_FAILED else f"{self.status} [{self.sub_kind}]"
        return f"{kind}: {self.error or self.exit}{where}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["signature"] = self.signature.to_dict() if self.signature else None
        data["classification"] = self.classification
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchOutcome:
        names = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["signature"] = Signature.from_dict(data["signature"]) if data.get("signature") else None
        return cls(**kwargs)


def server_command_from_env() -> list[str] | None:
    """The testing override of the server command (``BISECT_SPEC_SERVER_COMMAND``), split."""
    value = os.environ.get(SERVER_COMMAND_ENV, "").strip()
    return shlex.split(value) if value else None


def gpus_present() -> bool:
    """Whether this machine has an NVIDIA GPU (device nodes; no process started, nothing imported)."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.environ.get("BISECT_SPEC_ASSUME_GPU") == "1"


def build_command(argv: Sequence[str], *, python: str, port: int, host: str = "127.0.0.1",
                  server_command: Sequence[str] | None = None, torchvision_shim: bool = False,
                  hardware: Mapping[str, Any] | None = None, gpus: int = 8) -> list[str]:
    """The command line of one launch: SGLang's flags with ``--host``/``--port`` set by the tool.

    A ``--host``/``--port`` in ``argv`` is replaced (readiness is polled on loopback, on a
    port the tool checked free).
    """
    flags = _without(argv, ("--host", "--port"))
    flags += ["--host", host, "--port", str(port)]
    if server_command:
        return [python if part == "{python}" else part for part in server_command] + flags
    if torchvision_shim or hardware:
        config = {"torchvision_shim": torchvision_shim, "hardware": dict(hardware) if hardware else None, "gpus": gpus}
        return [python, str(worker.WORKER_SCRIPT.with_name("launch_main.py")), json.dumps(config),
                "sglang.launch_server", "--", *flags]
    return [python, "-m", "sglang.launch_server", *flags]


def leftover_notes(argvs: Iterable[Sequence[str]]) -> list[str]:
    """One line per process in the way of these launches (see :func:`bisect_spec.launch.supervision.leftover_servers`).

    The ports looked at are the ``--port`` values in the flags: the launch itself runs on a
    free port the tool picks, but a real deployment of these flags wants that one.
    """
    ports: set[int] = set()
    for argv in argvs:
        flags = list(argv)
        for index, token in enumerate(flags):
            name, equals, inline = token.partition("=")
            value = inline if equals else (flags[index + 1] if index + 1 < len(flags) else "")
            if name == "--port" and value.isdigit():
                ports.add(int(value))
    return [leftover.line() for leftover in supervision.leftover_servers(sorted(ports))]


def _without(argv: Sequence[str], options: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in options:
            skip = "=" not in token
            continue
        out.append(token)
    return out


def launch_server(argv: Sequence[str], *, python: str, pythonpath: Sequence[str] = (),
                  env: Mapping[str, str] | None = None, deadline: float = 600.0, log_path: Path,
                  host: str = "127.0.0.1", port: int | None = None, server_command: Sequence[str] | None = None,
                  torchvision_shim: bool = False, hardware: Mapping[str, Any] | None = None, gpus: int = 8,
                  grace: float = 3.0) -> LaunchOutcome:
    """Launch SGLang's server with ``argv`` for real, wait until ready or dead, stop it, classify.

    :param python: interpreter of the release environment (or the user's own for ``current``).
    :param pythonpath: directories put first on the import path (a release overlay).
    :param env: the environment (default: this process's, without PYTHONPATH/PYTHONHOME).
    :param deadline: seconds before a launch that is neither ready nor dead counts as ``timed-out``.
    :param log_path: where the server's stdout and stderr go.
    :param port: the port to use (default: a free one the tool picks).
    :param server_command: stands in for ``python -m sglang.launch_server`` (tests; ``{python}`` is substituted);
        default: :data:`SERVER_COMMAND_ENV` if set.
    :param torchvision_shim: / :param hardware: prepare the process as an evaluation worker is
        (bisect-spec's CPU environments; a hardware profile simulated during resolution).
    :raises WorkerError: the command cannot be started.
    """
    port = port or supervision.free_port(host)
    command = build_command(argv, python=python, port=port, host=host,
                            server_command=server_command if server_command is not None else server_command_from_env(),
                            torchvision_shim=torchvision_shim, hardware=hardware, gpus=gpus)
    environment = dict(env) if env is not None else {k: v for k, v in os.environ.items()
                                                     if k not in ("PYTHONPATH", "PYTHONHOME")}
    if pythonpath:
        environment["PYTHONPATH"] = os.pathsep.join([*pythonpath, *filter(None, [environment.get("PYTHONPATH")])])
    environment.setdefault("PYTHONUNBUFFERED", "1")
    log_path = Path(log_path)
    run = supervision.serve_until_ready(command, env=environment, log_path=log_path, port=port, host=host,
                                   deadline=deadline, grace=grace)
    log_text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    outcome = LaunchOutcome(status=TIMED_OUT, seconds=run.seconds, argv=list(argv), command=command, log=str(log_path),
                            port=port, returncode=run.returncode,
                            exit=processes.describe_exit(run.returncode) if run.ended == "exited" else "still running",
                            port_freed=run.port_freed, pids=run.pids, leftover_pids=run.leftover_pids,
                            health=run.health)
    if run.ended == "ready":
        outcome.status, outcome.seconds_to_ready = READY, run.ready_seconds
    elif run.ended == "exited":
        classify_exit(outcome, log_text)
    return outcome


def classify_exit(outcome: LaunchOutcome, log_text: str) -> None:
    """Fill status, sub-kind, signature and error of a launch whose root process ended before ready."""
    blocks = statements.traceback_blocks(log_text)
    main_blocks = [b for b in blocks if not _SUBPROCESS.search(b["context"])]
    usage = _ARGPARSE_ERROR.findall(log_text) if outcome.returncode == 2 else []
    if usage and not blocks:
        message = usage[-1]
        outcome.status = RESOLUTION_FAILED
        outcome.exception = {"type": "SystemExit", "message": message}
        outcome.error = f"usage: {message}"
        outcome.signature = Signature("usage", "SystemExit", "", "", normalise_message(message))
        return
    deciding = main_blocks[-1] if main_blocks else (blocks[-1] if blocks else None)
    if deciding is not None and not (deciding in main_blocks and _in_resolution(deciding)):
        # after resolution the first subprocess traceback is the cause; the main one says "see above"
        subprocess_blocks = [b for b in blocks if b not in main_blocks]
        deciding = subprocess_blocks[0] if subprocess_blocks else deciding
    if deciding is not None:
        failure = statements.failure_from_block(deciding)
        outcome.exception = {k: v for k, v in failure["exception"].items() if k != "module"}
        outcome.frame = failure.get("frame", {})
        outcome.traceback_tail = failure["traceback_tail"]
        message = deciding["message"].splitlines()[0] if deciding["message"] else ""
        outcome.error = f"{deciding['type']}: {message}" if message else deciding["type"]
        if deciding in main_blocks and _in_resolution(deciding):
            outcome.status = RESOLUTION_FAILED
            outcome.signature = signature_of({"status": "failed", **failure})
            return
    else:
        errors = [line.strip() for line in log_text.splitlines() if re.search(r"error", line, re.IGNORECASE)]
        outcome.error = errors[-1][:300] if errors else outcome.exit
        outcome.traceback_tail = "\n".join(log_text.splitlines()[-40:])[-4000:]
    outcome.status = FAILED_LATER
    outcome.sub_kind = later_kind(log_text, subprocess_traceback=len(main_blocks) < len(blocks))


def _in_resolution(block: dict[str, Any]) -> bool:
    for frame in block["frames"]:
        if frame["function"] in _RESOLUTION_FUNCTIONS:
            return True
        root = statements.sglang_package_root(frame["file"])
        if root is not None and _RESOLUTION_FILES.match(os.path.relpath(frame["file"], root).replace(os.sep, "/")):
            return True
    return False


def later_kind(log_text: str, *, subprocess_traceback: bool) -> str:
    """Sub-kind of a failure after resolution: cuda-oom, nccl, scheduler or other (first match wins)."""
    if _OOM.search(log_text):
        return "cuda-oom"
    if _NCCL.search(log_text):
        return "nccl"
    if subprocess_traceback or re.search(r"Scheduler hit an exception|scheduler.*(died|dead)", log_text, re.IGNORECASE):
        return "scheduler"
    return "other"


def flakiness(outcomes: Sequence[LaunchOutcome]) -> dict[str, Any]:
    """Whether repeated launches of one configuration ended differently, and how often each way."""
    counts = Counter(o.classification for o in outcomes)
    return {"flaky": len(counts) > 1, "classifications": dict(sorted(counts.items()))}


def compare(in_process: dict[str, Any], launched: LaunchOutcome) -> dict[str, Any]:
    """Do the in-process verdict (an ``Outcome.to_dict()``) and a launch agree about resolution?

    Agreement: in-process passes and the launch got past resolution (``ready``, or
    ``failed-later``: then ``note`` says so), or both fail in resolution with one signature id, or the
    in-process failure is after the weights (``after_weights``) and the launch fails later with the same
    exception type and message.
    """
    status = in_process.get("status")
    signature = (in_process.get("signature") or {}).get("id")
    if status == "passed":
        if launched.status in (READY, FAILED_LATER, TIMED_OUT):
            note = {READY: "", FAILED_LATER: f"resolves, then fails later ({launched.sub_kind})",
                    TIMED_OUT: "resolves, then never became ready"}[launched.status]
            return {"agree": True, "kind": "agree", "note": note}
        return {"agree": False, "kind": "launch-fails-resolution",
                "note": f"in-process passes; the launch fails in resolution: {launched.error}"}
    if in_process.get("after_weights") and launched.status != RESOLUTION_FAILED:
        # a stage after the weights: the launch must get past resolution and fail later with SGLang's same words
        exc, seen = in_process.get("exception") or {}, launched.exception or {}
        same = (seen.get("type"), seen.get("message")) == (exc.get("type"), exc.get("message"))
        if launched.status == FAILED_LATER and same:
            return {"agree": True, "kind": "agree", "note": "both fail after the weights load"}
        return {"agree": False, "kind": "launch-passes-after-weights",
                "note": f"in-process fails after the weights load (stage {in_process.get('stage')}: "
                        f"{exc.get('type')}: {exc.get('message')}); the launch: {launched.classification}"}
    if launched.status == RESOLUTION_FAILED:
        if launched.signature is not None and launched.signature.id == signature:
            return {"agree": True, "kind": "agree", "note": ""}
        return {"agree": False, "kind": "different-signature",
                "note": f"in-process {signature}, launch {launched.signature.id if launched.signature else '?'}: "
                        f"{launched.error}"}
    return {"agree": False, "kind": "launch-passes-resolution",
            "note": f"in-process fails ({signature}); the launch got past resolution: {launched.classification}"}

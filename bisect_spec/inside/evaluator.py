"""Construct SGLang's real ``ServerArgs`` in-process, exactly as ``launch_server`` does.

This module runs inside an evaluation worker (see ``worker.py``), under the Python of a
per-release environment. It is, with ``simulated_gpu.py``, the only code that imports
SGLang, so it may use the standard library and what SGLang's environment has — never
click or hypothesis.

Invariants:

* **Official path.** ``prepare_server_args(argv)`` is called for real; the only change
  is that the argparse parser it builds is handed a parser built once (rebuilding it is
  ~85% of the call). From releases that have it (found by feature: ``resolve_once``),
  ``resolve_once()`` follows, as ``launch_server`` does.
* **Independence.** Each evaluation starts from the same process state: ``os.environ``
  is restored, logging handlers are restored, every ``lru_cache`` in SGLang is cleared
  and the platform singleton reset. Evaluating A then B gives B's result as if alone.
* **Config files the release's way.** ``--config FILE`` is merged by the release itself:
  :meth:`Evaluator.merged_argv` runs ``prepare_server_args`` up to its ``parse_args`` call
  and returns the argv that call receives (the file's options, then the command line's),
  so the orchestrator evaluates, shrinks and reports explicit flags.
* **Facts, not judgements.** The result is a plain dict of what happened (exception,
  innermost SGLang frame, failing statement with its guard, resolved values). Signatures
  and findings are computed by the orchestrator, which can be upgraded without
  rebuilding environments.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import gc
import importlib
import inspect
import io
import linecache
import logging
import os
import re
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from bisect_spec.inside import data_flow, launch
from bisect_spec.inside.launch.process_state import environment_now, environment_put_back
from bisect_spec.inside.statements import _failing_expression, block_at, describe_frame, sglang_traceback

T = TypeVar("T")

#: Fields reported for passing configurations when present in the release.
RESOLVED_FIELDS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "speculative_attention_mode",
    "speculative_draft_attention_backend",
    "page_size",
    "tp_size",
    "dp_size",
    "pp_size",
    "enable_dp_attention",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "disable_overlap_schedule",
    "kv_cache_dtype",
    "quantization",
    "moe_a2a_backend",
    "moe_runner_backend",
    "grammar_backend",
    "enable_mixed_chunk",
    "device",
)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value) if not hasattr(value, "value") else _jsonable(value.value)


def _canonical_option(action: argparse.Action) -> str:
    """One spelling per flag: the one matching the ServerArgs field, else the shortest long option."""
    spelled = "--" + action.dest.replace("_", "-")
    if spelled in action.option_strings:
        return spelled
    return min((o for o in action.option_strings if o.startswith("--")), key=len, default=action.option_strings[0])


class _RecordingParser:
    """The parser built once, lending itself to ``prepare_server_args`` for one call.

    It records the namespace ``parse_args`` returns, so the flags the user gave can be
    reported as SGLang parsed them without parsing twice.
    """

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self._parser = parser
        self.namespace: argparse.Namespace | None = None

    def parse_args(self, *args: Any, **kwargs: Any) -> argparse.Namespace:
        self.namespace = self._parser.parse_args(*args, **kwargs)
        return self.namespace

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


class _ArgvReached(Exception):
    """Raised by :class:`_ArgvRecorder` with the argv ``prepare_server_args`` was about to parse."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__("argv reached parse_args")
        self.argv = argv


class _ArgvRecorder(_RecordingParser):
    """Stops ``prepare_server_args`` at its ``parse_args`` call, handing back the argv it was given."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        raise _ArgvReached([str(a) for a in (sys.argv[1:] if args is None else args)])


class _ParserFactory:
    """Stands in for the ``argparse`` module inside ``server_args`` for one call."""

    def __init__(self, parser: _RecordingParser) -> None:
        self._parser = parser

    def ArgumentParser(self, *args: Any, **kwargs: Any) -> _RecordingParser:
        return self._parser

    def __getattr__(self, name: str) -> Any:
        return getattr(argparse, name)


class _EnvReadTracer:
    """Learns which of SGLang's memoised functions read ``os.environ``.

    Every environment read asks which ``lru_cache``d functions are on the Python stack; each marks that cache as
    environment-dependent. A build on ``meta`` reads the environment thousands of times from deep stacks (Kimi-K2.6:
    one read per layer's flags), so what the frames above a frame hold is kept by frame (:meth:`_owners_above`): a
    read walks only the frames entered since the last read. Hand-written: no library traces environment reads.
    """

    #: Code flags of frames that may be suspended and resumed under another caller: never kept (their callers change)
    _RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    #: Frames kept at most (each holds its locals alive until forgotten)
    _KEPT_FRAMES = 20_000

    def __init__(self, caches: Callable[[], list[Any]]) -> None:
        self._caches = caches
        self._codes: dict[Any, int] = {}
        self._modules_seen = -1
        #: id(frame) -> (frame, the caches of this frame and every frame above it)
        self._frames: dict[int, tuple[types.FrameType, frozenset[int]]] = {}
        self.readers: set[int] = set()
        tracer = self
        original = os._Environ.__getitem__

        def traced_getitem(environ: Any, key: Any) -> Any:
            tracer.saw_read()
            return original(environ, key)

        os._Environ.__getitem__ = traced_getitem  # type: ignore[method-assign]

    def forget_frames(self) -> None:
        """Drop the frames kept (an evaluation ended: they are gone from every stack)."""
        self._frames.clear()

    def saw_read(self) -> None:
        if len(sys.modules) != self._modules_seen:
            self._modules_seen = len(sys.modules)
            self._codes = {}
            self._frames.clear()
            for cached in self._caches():
                code = getattr(getattr(cached, "__wrapped__", None), "__code__", None)
                if code is not None:
                    self._codes[code] = id(cached)
        self.readers.update(self._owners_above(sys._getframe(2)))

    def _owners_above(self, frame: types.FrameType | None) -> frozenset[int]:
        """The caches whose functions run in ``frame`` or any frame above it. A frame that is not resumable has one
        caller chain while it runs, and runs only once: what was found above it holds whenever it is on the stack
        again (kept with the frame itself, so its id is not reused). Generator and coroutine frames are walked
        through, never kept."""
        entered: list[types.FrameType] = []
        owners: frozenset[int] = frozenset()
        while frame is not None:
            kept = self._frames.get(id(frame))
            if kept is not None and kept[0] is frame:
                owners = kept[1]
                break
            entered.append(frame)
            frame = frame.f_back
        if len(self._frames) > self._KEPT_FRAMES:
            self._frames.clear()
        for walked in reversed(entered):
            owner = self._codes.get(walked.f_code)
            if owner is not None and owner not in owners:
                owners = owners | {owner}
            if not walked.f_code.co_flags & self._RESUMABLE:
                self._frames[id(walked)] = (walked, owners)
        return owners


class _ProcessState:
    """Undo what resolution writes into the process: environment, logging, argv.

    ``dirty`` tells afterwards whether the evaluation had changed the environment; then
    SGLang's memoised answers may have been computed from that changed state and are
    cleared too (see :meth:`Evaluator.evaluate`). Logging is reset by every
    ``prepare_server_args`` call and feeds no cache, so it is restored but not "dirty".
    """

    def __init__(self) -> None:
        self.dirty = False

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        environ = environment_now()
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        argv = list(sys.argv)
        try:
            yield
        finally:
            self.dirty = environment_put_back(environ)
            root.handlers[:] = handlers
            if root.level != level:
                root.setLevel(level)
            sys.argv[:] = argv


def _gpu_without_kernels(hardware: dict[str, Any] | None) -> bool:
    """This machine has a GPU torch can see, but ``sgl_kernel`` is not installed.

    Then SGLang is imported with the GPU hidden (:func:`simulated_gpu.gpu_hidden`), as it
    is on a CPU machine, whether the real GPUs or a simulated box answer afterwards:
    importing with CUDA visible makes modules reach for ``sgl_kernel``. With
    ``sgl_kernel`` installed (a real SGLang box), or ``BISECT_SPEC_GPU_AT_IMPORT=visible``,
    the import is left alone.
    """
    if hardware is None or os.environ.get("BISECT_SPEC_GPU_AT_IMPORT") == "visible":
        return False
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return False
    try:
        return importlib.util.find_spec("sgl_kernel") is None
    except (ImportError, ValueError):
        return True


#: Modules resolution imports lazily: imported on the CPU first (else they reach for sgl_kernel).
LAZY_MODULES = ("sglang.srt.configs.model_config", "sglang.srt.arg_groups.pipeline",
                "sglang.srt.arg_groups.overrides", "sglang.srt.utils.hf_transformers_utils",
                # the launch path's later stages (launch/): launcher and scheduler modules
                "sglang.srt.managers.tokenizer_manager", "sglang.srt.speculative.spec_info",
                "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state")


def _applied_shims() -> list[str]:
    shims = sys.modules.get("bisect_spec.inside.version_shims")
    return list(getattr(shims, "APPLIED", []))


def _struct_fields_once_per_class() -> None:
    """msgspec's ``structs.fields`` answered once per class. SGLang 0.5.18+ asks it for ``ServerArgs``' fields
    several times per evaluation (``arg_utils.record_fields``, under ``functools.cache`` memos every evaluation
    clears), and msgspec evaluates every field's annotation again each time: 7 % of a worker's time in the main
    job. Its answer depends on the class alone (the annotations resolve once the modules are imported); a generic
    alias or another argument is passed through."""
    try:
        structs = importlib.import_module("msgspec.structs")
    except ImportError:
        return
    original = structs.fields
    if getattr(original, "_bisect_spec_once", False):
        return
    answers: dict[type, Any] = {}

    def fields(type_or_instance: Any) -> Any:
        if not isinstance(type_or_instance, type):  # an instance, a generic alias: as msgspec answers it
            return original(type_or_instance)
        found = answers.get(type_or_instance)
        if found is None:
            found = answers[type_or_instance] = original(type_or_instance)
        return found

    fields._bisect_spec_once = True  # type: ignore[attr-defined]
    functools.update_wrapper(fields, original)
    setattr(structs, "fields", fields)  # noqa: B010 - a module mypy cannot see


def _import_sglang(stubbed: list[str]) -> tuple[Any, types.ModuleType]:
    """Import SGLang and its ``server_args`` honestly on the CPU, with the version-skew shims.

    :param stubbed: GPU-only packages stubbed so far; grows as needed (see :func:`with_stubs`).
    """
    from bisect_spec.inside import version_shims

    version_shims.apply()

    def load() -> tuple[Any, types.ModuleType]:
        import sglang
        import sglang.srt.server_args as server_args_module

        for lazy in LAZY_MODULES:
            with contextlib.suppress(Exception):
                # a launcher/scheduler module may reach for a GPU-only package (0.5.9's tokenizer
                # manager imports sgl_kernel): stubbed only after that exact import failed
                with_stubs(functools.partial(__import__, lazy), stubbed, forget=lazy)
        return sglang, server_args_module

    return with_stubs(load, stubbed, forget="sglang")


def with_stubs(action: Callable[[], T], stubbed: list[str], *, forget: str | None = None) -> T:
    """Run an import ``action``; if it fails only because a GPU-only package is absent
    (``vllm``, ``sgl_kernel``: see :mod:`version_shims`), stub that package and run it again.

    Each package is stubbed at most once and only after its absence failed an import, so
    a release that imports without it is imported exactly as before. Every other failure
    propagates.
    """
    from bisect_spec.inside import version_shims

    while True:
        try:
            with version_shims.import_window(stubbed):
                return action()
        except ImportError as exc:
            missing = [m for m in version_shims.missing_gpu_modules(exc) if m not in stubbed]
            if not missing:
                raise
            stubbed.extend(missing)
            if forget:
                version_shims.forget_partial_import(forget)


#: The same modules, under the name launches use.
LAZY_RESOLUTION_MODULES = LAZY_MODULES


def import_for_resolution() -> types.ModuleType:
    """Import ``sglang.srt.server_args`` and the modules resolution imports lazily, honestly on the CPU,
    with the version-skew shims. Done before a hardware simulation is installed, by workers and by
    launches alike."""
    _sglang, module = _import_sglang([])
    result: types.ModuleType = module
    return result


def _record_tool_fault(record: dict[str, Any], fault: str, exc: BaseException) -> None:
    """Record ``exc`` as a fault of the emulation (``fault`` says where), never as a verdict on SGLang."""
    record["status"] = "crashed"
    record["tool_fault"] = fault
    record["crash"] = (f"tool fault in {fault}: {type(exc).__name__}: {str(exc)[:200]} "
                       "(bisect-spec's own emulation failed, not SGLang: please report it "
                       "against bisect-spec with this command and --debug)")


class Evaluator:
    """One imported SGLang release, ready to resolve configurations on request.

    :param hardware: a hardware profile record, or None for the honest CPU machine.
    :param gpus: number of simulated GPUs.
    """

    def __init__(self, hardware: dict[str, Any] | None, gpus: int) -> None:
        started = time.perf_counter()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        self.gpu_hidden_at_import = _gpu_without_kernels(hardware)
        if self.gpu_hidden_at_import:
            from bisect_spec.inside import simulated_gpu as hiding

            hiding.hide_gpu_for_lazy_imports()
            importing: contextlib.AbstractContextManager[None] = hiding.gpu_hidden()
        else:
            importing = contextlib.nullcontext()
        with contextlib.redirect_stdout(sys.stderr), importing:
            self.stubbed: list[str] = []
            sglang, server_args_module = _import_sglang(self.stubbed)
        self.import_seconds = time.perf_counter() - started
        _struct_fields_once_per_class()
        self.sglang_version: str = getattr(sglang, "__version__", "unknown")
        self.package_root = os.path.dirname(os.path.abspath(sglang.__file__))
        self.module: types.ModuleType = server_args_module
        self.server_args_cls: Any = server_args_module.ServerArgs
        self.has_resolve_once = hasattr(self.server_args_cls, "resolve_once")
        overrides = sys.modules.get("sglang.srt.arg_groups.overrides")
        self._resolving_view = getattr(overrides, "resolving_view", None)
        self.parser = argparse.ArgumentParser(prog="sglang serve")
        self.server_args_cls.add_cli_args(self.parser)
        self.hardware_mode = "cpu"
        if hardware is not None:
            import torch

            if hardware.get("name") == "real" or (hardware.get("auto") and torch.cuda.is_available()):
                self.hardware_mode = "real" if torch.cuda.is_available() else "cpu"
            else:
                from bisect_spec.inside import simulated_gpu

                simulated_gpu.install(hardware, gpus)
                self.hardware_mode = f"simulated:{hardware['name']}x{gpus}"
        self.hardware = hardware
        self.gpus = gpus
        from bisect_spec.inside import simulated_gpu as memo

        self._memo = memo
        self._caches = memo.sglang_caches()
        self._file_caches = memo.sglang_file_caches()
        self._file_stamps: dict[str, tuple[Any, ...]] = {}
        self._modules_seen = len(sys.modules)
        self._tracer = _EnvReadTracer(lambda: [*self._caches, *self._file_caches])
        self._option_dest = {
            option: action.dest for action in self.parser._actions for option in action.option_strings
        }
        self.cpu_imports: list[str] = []
        self.forgotten = 0
        self._frozen_at = -1
        #: BISECT_SPEC_PARANOID=1 clears every SGLang cache before every evaluation; a test
        #: checks that the default policy gives the same results.
        self.paranoid = os.environ.get("BISECT_SPEC_PARANOID") == "1"
        self.plugin: Any = None
        plugin_path = os.environ.get("BISECT_SPEC_WORKER_PLUGIN")
        if plugin_path:
            import importlib.util

            spec = importlib.util.spec_from_file_location("bisect_spec_worker_plugin", plugin_path)
            assert spec is not None and spec.loader is not None
            self.plugin = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(self.plugin)

    def use_gpus(self, gpus: int) -> None:
        """Serve a box of ``gpus`` GPUs of the same kind from now on (a warm worker serves every count of its box);
        on the honest CPU or real GPUs the count is the machine's and nothing changes."""
        if gpus == self.gpus or not self.hardware_mode.startswith("simulated:"):
            return
        assert self.hardware is not None
        self._refresh_caches()  # the memos it clears: the list this evaluator keeps, not a scan of every module
        self._memo.set_count(gpus, self._caches)
        self.gpus = gpus
        self.hardware_mode = f"simulated:{self.hardware['name']}x{gpus}"

    def info(self) -> dict[str, Any]:
        """What this worker is: release, python, features, hardware."""
        return {
            "sglang_version": self.sglang_version,
            "python": ".".join(map(str, sys.version_info[:3])),
            "has_resolve_once": self.has_resolve_once,
            "has_resolving_view": self._resolving_view is not None,
            "hardware": self.hardware_mode,
            "import_seconds": round(self.import_seconds, 3),
            "caches": len(self._caches),
            "cpu_imports": list(self.cpu_imports),
            "gpu_hidden_at_import": self.gpu_hidden_at_import,
            "paranoid": self.paranoid,
            "version_shims": list(_applied_shims()),
            "stubbed_modules": list(self.stubbed),
        }

    def flags(self) -> list[dict[str, Any]]:
        """The release's CLI flags, read from its own parser, and the environment variables its
        speculative code reads (``kind: env``), for building sweep spaces."""
        out = []
        for action in self.parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            switch = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)) or action.nargs == 0
            kind = "bool" if switch else "value"
            type_name = getattr(action.type, "__name__", None) if action.type else None
            out.append({
                "option": _canonical_option(action),
                "aliases": list(action.option_strings),
                "dest": action.dest,
                "kind": kind,
                "type": type_name,
                "choices": [_jsonable(c) for c in action.choices] if action.choices else None,
                "default": _jsonable(action.default),
                "nargs": action.nargs if isinstance(action.nargs, (int, str, type(None))) else str(action.nargs),
                "help": (action.help or "")[:300],
            })
        # data flow: which of these fields the speculative checks read, and the constants their branches test
        # (the algorithm's values: every name the release accepts, then those its branches compare)
        reads = data_flow.speculative_reads(self.package_root, [entry["dest"] for entry in out])
        algorithms = data_flow.known_algorithms(self.package_root)
        for entry in out:
            values = reads.get(entry["dest"])
            if entry["dest"] == "speculative_algorithm":
                values = [*algorithms, *(v for v in values or [] if v not in algorithms)]
            if values is not None:
                entry["speculative_read"] = True
                entry["branch_values"] = [_jsonable(v) for v in values]
            if entry["dest"] == "speculative_algorithm":  # the switch-and-algorithm branches (3-way)
                entry["branch_contexts"] = [
                    {**context, "algorithms": [_jsonable(a) for a in context["algorithms"]]}
                    for context in data_flow.branch_contexts(self.package_root, [e["dest"] for e in out])]
        # environment variables the speculative code reads, and those its checks read (data flow, marked so):
        # swept like flags (kind "env")
        checked = {name for name in reads if launch.ENV_READ.fullmatch(f"envs.{name}")}
        for variable in launch.speculative_env_vars(self.package_root, also=checked):
            out.append({"option": variable["name"], "aliases": [variable["name"]], "kind": "env",
                        "type": variable["kind"], "default": variable["default"], "choices": None, "nargs": None,
                        "help": "environment variable read by the speculative code paths",
                        **({"speculative_read": True, "branch_values": []} if variable["name"] in checked else {})})
        return out

    def knows_architecture(self, architecture: str) -> dict[str, Any]:
        """Whether this release defines a model class named ``architecture``.

        Read from the source of ``sglang/srt/models`` (a class statement), not by importing
        the model registry: that imports every model module, some of which reach for
        CUDA-only packages.
        """
        pattern = re.compile(rf"^class {re.escape(architecture)}\b", re.MULTILINE)
        models = os.path.join(self.package_root, "srt", "models")
        for folder, _dirs, files in os.walk(models):
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    if pattern.search(handle.read()):
                        return {"architecture": architecture, "known": True,
                                "file": os.path.relpath(path, self.package_root).replace(os.sep, "/")}
        return {"architecture": architecture, "known": False, "file": None}

    def source_of(self, relative_file: str, function: str) -> dict[str, Any]:
        """Source text of ``function`` in ``relative_file`` (for cross-release diffs)."""
        path = os.path.join(self.package_root, relative_file)
        text = "".join(linecache.getlines(path))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
                lines = text.splitlines()[node.lineno - 1 : node.end_lineno]
                return {"file": relative_file, "line": node.lineno, "source": "\n".join(lines)}
        return {"file": relative_file, "line": None, "source": None}

    def block_at(self, relative_file: str, line: int) -> dict[str, Any]:
        """The code around ``line`` for a cross-release diff: see :func:`block_at`."""
        return block_at(os.path.join(self.package_root, relative_file), relative_file, line)

    def merged_argv(self, argv: list[str]) -> dict[str, Any]:
        """The argv this release's ``prepare_server_args`` parses for ``argv``: with ``--config
        FILE``, the file's options merged by the release's own code. ``{"argv": [...]}`` or
        ``{"error": "one line"}`` (the release refused the file)."""
        output = io.StringIO()
        try:
            with contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
                self._construct(list(argv), _ArgvRecorder(self.parser))
        except _ArgvReached as reached:
            return {"argv": reached.argv}
        except SystemExit as exc:
            errors = [ln.split("error:", 1)[1].strip() for ln in output.getvalue().splitlines() if "error:" in ln]
            return {"error": errors[-1] if errors else f"sys.exit({exc.code!r})"}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"error": "prepare_server_args returned without parsing the flags"}

    def find_code(self, pattern: str, limit: int = 20) -> dict[str, Any]:
        """Where a regular expression matches SGLang's ``srt`` sources (for "where was this before?")."""
        compiled = re.compile(pattern)
        found: list[dict[str, Any]] = []
        root = os.path.join(self.package_root, "srt")
        for directory, _dirs, files in sorted(os.walk(root)):
            for name in sorted(files):
                if not name.endswith(".py") or len(found) >= limit:
                    continue
                path = os.path.join(directory, name)
                for number, text in enumerate(linecache.getlines(path), 1):
                    if compiled.search(text):
                        relative = os.path.relpath(path, self.package_root).replace(os.sep, "/")
                        found.append({"file": relative, "line": number, "text": text.strip()})
        return {"matches": found[:limit]}

    def _given(self, argv: list[str], namespace: argparse.Namespace | None) -> dict[str, Any]:
        """dest -> parsed value, for the flags the user wrote explicitly."""
        if namespace is None:
            return {}
        dests = {self._option_dest[t.split("=", 1)[0]] for t in argv
                 if t.startswith("--") and t.split("=", 1)[0] in self._option_dest}
        return {d: _jsonable(getattr(namespace, d, None)) for d in sorted(dests)}

    def _lazy_module(self, exc: BaseException) -> str | None:
        """The outermost SGLang module whose lazy import failed on a CUDA-only dependency."""
        if not isinstance(exc, ImportError) or self.hardware_mode.startswith("cpu"):
            return None
        for frame in traceback.extract_tb(exc.__traceback__):
            path = os.path.abspath(frame.filename)
            if frame.name == "<module>" and path.startswith(self.package_root + os.sep):
                relative = os.path.relpath(path, os.path.dirname(self.package_root))
                return relative.removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")
        return None

    def evaluate(self, argv: list[str], _retries: int = 0) -> dict[str, Any]:
        """Run ``argv`` along ``launch_server``'s path up to weight loading; return what happened.

        Leading ``VAR=value`` tokens are environment assignments, applied for this
        evaluation only (and recorded as ``env``), as a shell prefix would apply them.
        """
        record: dict[str, Any] = {"argv": list(argv)}
        env, argv = launch.split_env(argv)
        started = time.perf_counter()
        stderr = io.StringIO()
        state = _ProcessState()
        parser = _RecordingParser(self.parser)
        progress = launch.Progress()
        files_changed = self._files_changed(argv)
        if self.paranoid or env or files_changed:
            # memoised answers computed under the worker's own environment may not hold under
            # this one: start clean (and end clean: see ``state.dirty`` below); nor those read from a local
            # model or draft whose files changed since (SGLang reads a config.json once per path). SGLang's own
            # per-path memos (``get_config``) are cleared for an environment only where they read it: clearing them
            # for every evaluation with an environment doubled the cost of a refusal at resolution (Kimi-K2.6's
            # config.json parsed again each time)
            self._refresh_caches()
            for cached in self._caches:
                cached.cache_clear()
            for cached in self._file_caches:
                if self.paranoid or files_changed or id(cached) in self._tracer.readers:
                    cached.cache_clear()
        misses = {id(c): c.cache_info().misses for c in self._caches}
        retry = False
        with state.restored():
            os.environ.update(env)
            if env:
                record["env"] = dict(sorted(env.items()))
            try:
                if self.plugin is not None and hasattr(self.plugin, "before_evaluate"):
                    argv = list(self.plugin.before_evaluate(argv))
                with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stderr):
                    args = self._construct(argv, parser, progress)
                    view = self._resolving_view(args) if self._resolving_view is not None else args
                    resolved = {f: _jsonable(getattr(view, f)) for f in RESOLVED_FIELDS if hasattr(view, f)}
                    launch.run_after_resolution(args, progress)
                record["status"] = "passed"
                record["resolved"] = resolved
            except SystemExit as exc:
                record.update(self._failure(exc, stderr.getvalue()))
                errors = [ln for ln in stderr.getvalue().splitlines() if "error:" in ln]
                if errors:
                    record["exception"]["message"] = errors[-1].split("error:", 1)[1].strip()
                record["status"] = "usage" if exc.code == 2 else "crashed"
                if exc.code == 2:
                    progress.back_to(launch.PARSE.name)
                record["crash"] = f"sys.exit({exc.code!r})"
            except MemoryError as exc:
                record.update(self._failure(exc, stderr.getvalue()))
                record["status"] = "crashed"
                record["crash"] = "MemoryError"
            except launch.WillNotStart as exc:
                # the box cannot hold what SGLang built (out of memory) or place its ranks: a verdict of its own,
                # from the tool's sizing of SGLang's build, never shown as SGLang's statement
                record.update(will_not_start_record(exc, progress.stage))
            except launch.NotLoaded as exc:
                # a stand-in of the emulation read outside the stage that would stop on it: our fault, recorded as
                # one; the worker lives on (a BaseException, it would otherwise end the worker process)
                record.update(self._failure(exc, stderr.getvalue()))
                _record_tool_fault(record, f"a stand-in read outside its stage ({str(exc)[:160]})", exc)
            except Exception as exc:
                lazy = self._lazy_module(exc)
                if lazy is not None and lazy not in self.cpu_imports and _retries < 8:
                    self.cpu_imports.append(lazy)
                    # evaluated again either way: where the CPU import failed too, a stage after the
                    # weights records the import as a stop the second time (launch.device_stops._import_retried_first)
                    with contextlib.suppress(Exception):
                        with_stubs(functools.partial(self._memo.import_on_cpu, lazy), self.stubbed)
                    retry = True
                if not retry:
                    record.update(self._failure(exc, stderr.getvalue()))
                    record["status"] = "failed"
                    gpu_code = isinstance(exc, ModuleNotFoundError) and bool(self._memo.packages_needed())
                    fault = None if gpu_code else launch.tool_fault(exc, progress)
                    if fault is not None:  # the emulation's fault: never a verdict on SGLang
                        _record_tool_fault(record, fault, exc)
            if retry:  # outside the handler: the retry's own failure must not chain onto this ImportError
                return self.evaluate(record["argv"], _retries=_retries + 1)
            record["given"] = self._given(argv, parser.namespace)
            record.update(progress.to_record(passed=record.get("status") == "passed"))
            needed = self._memo.packages_needed()
            if needed and record["status"] == "failed" and record["exception"]["type"] == "ModuleNotFoundError":
                # the simulated box has these packages, but their GPU code never runs here. (Guarded
                # imports that fall back are not recorded: whether one happens in this evaluation or
                # an earlier one of the same worker depends on the order, and records must not.)
                record["gpu_code_refused"] = needed
                record["status"] = "crashed"
                record["crash"] = f"needs the GPU code of {', '.join(needed)}: only a real GPU install can answer"
        self._tracer.forget_frames()  # before the heap is frozen: they hold this evaluation's objects
        if state.dirty:
            self._forget_answers_since(misses)
        self._settle_heap()
        record["seconds"] = round(time.perf_counter() - started, 6)
        return record

    def _settle_heap(self) -> None:
        """Once an evaluation has imported modules, collect the garbage and freeze what is left (``gc.freeze``).

        What is alive then is SGLang's modules, torch and this evaluator: it lives as long as the worker. Frozen,
        the collector no longer walks it; a build of the stages after the weights makes hundreds of thousands of
        objects (DeepSeek-V3 on ``meta``), and each full collection used to walk the whole imported heap with
        them (measured: 207 → 157 ms per configuration, ``scripts/bench_eval.py --model deepseek-v3 --release
        0.5.9``). Nothing of an evaluation is frozen: it is collected first, and later evaluations import nothing
        new, so this runs a few times per worker."""
        if len(sys.modules) != self._frozen_at:
            gc.collect()
            gc.freeze()
            self._frozen_at = len(sys.modules)

    def _files_changed(self, argv: list[str]) -> bool:
        """Whether a local file or directory the command names (a model, a draft, a tokenizer) changed since this
        worker last evaluated a command naming it: its files' sizes and modification times, read at every
        evaluation (a directory's own files, not its subdirectories)."""
        changed = False
        for token in argv:
            if not token.startswith(("/", ".")) or not os.path.exists(token):
                continue
            try:
                if os.path.isdir(token):
                    stamp: tuple[Any, ...] = tuple(sorted(
                        (entry.name, entry.stat().st_mtime_ns, entry.stat().st_size)
                        for entry in os.scandir(token) if entry.is_file()))
                else:
                    status = os.stat(token)
                    stamp = (status.st_mtime_ns, status.st_size)
            except OSError:
                continue
            before = self._file_stamps.get(token)
            self._file_stamps[token] = stamp
            changed = changed or (before is not None and before != stamp)
        return changed

    def _refresh_caches(self) -> None:
        if len(sys.modules) != self._modules_seen:
            self._caches = self._memo.sglang_caches()
            self._file_caches = self._memo.sglang_file_caches()
            self._modules_seen = len(sys.modules)

    def _forget_answers_since(self, misses: dict[int, int]) -> None:
        """After an evaluation that changed the environment, clear what may depend on it.

        Invariant kept: every memoised answer present when an evaluation starts was
        computed under the worker's clean environment. A cache is cleared when it
        computed something during this evaluation (its miss count moved, or it is new)
        *and* it is known to read the environment (:class:`_EnvReadTracer`). Caches of
        pure functions (field introspection of classes) keep their answers: clearing
        them would make every evaluation pay to recompute them.
        """
        self._refresh_caches()
        self.forgotten = 0
        env_readers = self._tracer.readers
        for cached in self._caches:
            before = misses.get(id(cached))
            computed = before is None or cached.cache_info().misses != before
            if computed and (id(cached) in env_readers or before is None):
                cached.cache_clear()
                self.forgotten += 1
        for cached in self._file_caches:  # SGLang's per-path memos keep no counts: an environment reader is cleared
            if id(cached) in env_readers:
                cached.cache_clear()
                self.forgotten += 1

    def _construct(self, argv: list[str], parser: _RecordingParser | None = None,
                   progress: launch.Progress | None = None) -> Any:
        module, cls = self.module, self.server_args_cls
        original_argparse = getattr(module, "argparse")  # noqa: B009 - the module's own import
        original_add = cls.__dict__["add_cli_args"]
        setattr(module, "argparse", _ParserFactory(parser or _RecordingParser(self.parser)))  # noqa: B010
        cls.add_cli_args = staticmethod(lambda parser: None)
        if progress is not None:
            progress.enter(launch.RESOLVE.name)
        try:
            args = module.prepare_server_args(list(argv))
        finally:
            setattr(module, "argparse", original_argparse)  # noqa: B010
            cls.add_cli_args = original_add
        if self.has_resolve_once:
            args.resolve_once()
        return args

    def _failure(self, exc: BaseException, stderr: str) -> dict[str, Any]:
        frames = traceback.extract_tb(exc.__traceback__)
        inner = None
        for frame in frames:
            if os.path.abspath(frame.filename).startswith(self.package_root + os.sep):
                inner = frame
        failure: dict[str, Any] = {
            "exception": {
                "type": type(exc).__name__,
                "module": type(exc).__module__,
                "message": str(exc),
            },
            "traceback_tail": sglang_traceback(exc, self.package_root),
            "stderr_tail": stderr[-2000:],
        }
        if inner is not None and inner.lineno is not None:
            described = describe_frame(os.path.abspath(inner.filename), inner.lineno, inner.name, self.package_root)
            expression = _failing_expression(inner)
            if expression:
                described["expression"] = expression
            failure["frame"] = described
        elif frames:
            last = frames[-1]
            failure["frame"] = {"file": last.filename, "line": last.lineno, "function": last.name,
                                "statement": (last.line or "").strip(), "outside_sglang": True}
        return failure


def will_not_start_record(exc: launch.WillNotStart, stage: str) -> dict[str, Any]:
    """A record's fields for a configuration that will not start (:class:`launch.WillNotStart`): status failed,
    in torch's exception type (what a real launch dies of), the figures, and no SGLang frame or traceback: no
    statement of SGLang's refused it."""
    out_of_memory = exc.cause in ("weights", "draft")
    exc_type, module = ("OutOfMemoryError", "torch") if out_of_memory else ("RuntimeError", "builtins")
    return {"status": "failed", "exception": {"type": exc_type, "module": module, "message": exc.words},
            "will_not_start": {**exc.figures, "stage": stage}, "traceback_tail": "", "stderr_tail": ""}

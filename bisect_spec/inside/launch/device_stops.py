"""Where a stage meets what only a GPU (or a loaded server) answers: the stop is recorded and the stage ends
there; kernel choices on the way to the sizes are declined.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from .sglang_lookup import _attribute, _instead_of, _replaced
from .siblings import meta_device, model_classes
from .stage import Progress, _NotLoaded


def _no_fused_kernel(_original: Callable[..., Any], *_args: Any, **_kwargs: Any) -> None:
    """A layer's fused-kernel choice, declined: SGLang's own answer where the kernel is not used (None)."""
    return None


def _kv_copy_up_to_the_device(original: Callable[..., Any], pool: Any) -> None:
    """The KV pool's copy-kernel set-up, SGLang's own, up to its first device value, then declined as SGLang's own
    NPU pool declines it (``MHATokenToKVPool._init_kv_copy_and_warmup`` there: ``self._kv_copy_config = None``).
    Its checks before that run (0.5.22+: ``assert buf.is_contiguous()`` on the pool's buffers, a property of
    their layout, which ``meta`` keeps) and refuse in SGLang's words; the tiling read back from the device and
    the warm-up launch after it are what is declined: only a read of a device value or a device call ends it
    quietly (every release 0.5.3.post1 … 0.5.23 stops at ``self.data_strides[0].item()``)."""
    try:
        original(pool)
    except Exception as exc:
        if not (meta_device.reads_a_value(exc) or _device_step(exc)):
            raise  # SGLang's own refusal (0.5.22+'s assert), or anything else: not declined silently
        pool._kv_copy_config = None


#: Device work on the way to the sizes that sizes nothing: (module, class, method, what runs instead, called with
#: SGLang's own method first).
#:
#: * a layer's choice of a fused kernel, made while the model is built (0.5.23's ``DualGemm._select_mode``): on a
#:   GPU install it imports the kernel's GPU libraries (CuTe DSL, ``cuda.bindings``), which this machine lacks; it
#:   sizes no tensor (a dispatch at run time), so it is declined, as a box without the kernel declines it;
#: * the KV pool's copy kernel for speculative decoding (``_init_kv_copy_and_warmup``: a tiling chosen from the
#:   buffers' strides read back from the device, then a kernel launch): every speculative configuration on an MHA
#:   pool meets it while the pools are built (0.5.3.post1+); it sizes nothing, and SGLang's NPU pool declines it.
_KERNEL_CHOICES: tuple[tuple[str, str, str, Callable[..., None]], ...] = (
    ("sglang.srt.layers.dual_gemm", "DualGemm", "_select_mode", _no_fused_kernel),
    ("sglang.srt.mem_cache.memory_pool", "MHATokenToKVPool", "_init_kv_copy_and_warmup", _kv_copy_up_to_the_device))


@contextlib.contextmanager
def _kernel_choices_declined() -> Iterator[None]:
    """Each of :data:`_KERNEL_CHOICES` the release has runs its stand-in while it lasts."""
    with contextlib.ExitStack() as stack:
        for module_name, class_name, method, instead in _KERNEL_CHOICES:
            owner = _attribute((module_name,), class_name)  # imported now if need be: a model's import of it comes later
            if isinstance(owner, type) and method in vars(owner):
                stack.enter_context(_replaced(owner, method, _instead_of(instead, vars(owner)[method])))
        yield


#: SGLang modules whose import failed on GPU code once: the evaluator then imports each on the CPU
#: (GPU hidden, as at start-up) and evaluates again; a second failure is a stop, not a retry.
_IMPORTS_RETRIED: set[str] = set()


def _import_retried_first(exc: BaseException) -> bool:
    """True the first time a module-level import of SGLang's fails on GPU code: raise it, so the evaluator
    imports that module on the CPU and evaluates again (as for every lazy import of SGLang's)."""
    if not isinstance(exc, ImportError):
        return False
    modules = [f.filename for f in traceback.extract_tb(exc.__traceback__)
               if f.name == "<module>" and "/sglang/" in f.filename.replace(os.sep, "/")]
    if not modules or modules[0] in _IMPORTS_RETRIED:
        return False
    _IMPORTS_RETRIED.add(modules[0])
    return True


_UNWRITTEN = re.compile(r"has not been written|not published|not been built|is not initialized", re.I)


#: SGLang's modules that hold what ``init_torch_distributed`` builds (the parallel groups).
_DEVICE_STATE_FILES = ("runtime_context.py", "parallel_state.py")


def _unwritten_context(exc: BaseException) -> str | None:
    """A read of process state the device steps would have built (the parallel groups
    ``init_torch_distributed`` creates), refused by SGLang's module that holds it; or None."""
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        if frames and os.path.basename(frames[-1].filename) in _DEVICE_STATE_FILES and _UNWRITTEN.search(str(link)):
            return f"reads what the device steps build ({str(link)[:160]})"
    return None


def _set_in_a_later_step(exc: BaseException, progress: Progress) -> str | None:
    """A read of an attribute that an object this module built by hand (the target's runner) lacks only
    because SGLang sets it in a step not run here (``init_memory_pool``'s ``token_to_kv_pool``, after the
    weights): the stage stops there, naming that step; or None."""
    for link in _chain(exc):
        owner, name = getattr(link, "obj", None), getattr(link, "name", None)
        if not isinstance(link, AttributeError) or owner is None or not name or id(owner) not in progress.built:
            continue
        owner_type: type = type(owner)
        method = model_classes.assigning_method(owner_type, str(name))
        if method is not None:
            return f"reads {owner_type.__name__}.{name}, which {method}() sets on a real box: not run here"
    return None


def _stop_words(exc: BaseException) -> str:
    """``exc`` in a stop's words: SGLang's statement where one is named, else the exception and where it rose."""
    where = _device_step(exc) or _meta_value(exc)
    if where is None:
        frame = _sglang_frame(traceback.extract_tb(exc.__traceback__))
        where = f"{type(exc).__name__}: {str(exc)[:120]}" + (f" ({_where(frame)})" if frame is not None else "")
    return where


#: A kernel torch's CPU build has no CUDA implementation of (a tensor made on the device).
_CUDA_KERNEL = re.compile(r"with arguments from the 'CUDA' backend|Torch not compiled with CUDA|no NVIDIA driver"
                          r"|SGLang's JIT kernel \S+ needs a CUDA device")


#: The simulated box's refusal to import a GPU package's code (``simulated_gpu``).
_GPU_CODE = re.compile(r"on the simulated box but bisect-spec never imports GPU code")


#: The simulated box's refusal to build GPU code (``simulated_gpu.BUILD_REFUSED``: a kernel's JIT build).
_GPU_BUILD = re.compile(r"on the simulated box but bisect-spec never builds GPU code")


def _device_step(exc: BaseException) -> str | None:
    """The device call that stopped a stage after the weights (torch's CPU build raised it), or None."""
    torch = sys.modules.get("torch")
    root = os.path.dirname(getattr(torch, "__file__", None) or "\0") + os.sep
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        if not frames:
            continue
        stub = _kernel_stub(link) or _unbound_on_this_cpu(link)
        if stub is not None:
            return stub
        if isinstance(link, ModuleNotFoundError) and _GPU_CODE.search(str(link)):
            caller = _sglang_frame(frames) or frames[-1]
            return f"imports the GPU code of {link.name or link} ({_where(caller)}): needs a GPU install"
        if _GPU_BUILD.search(str(link)):
            caller = _sglang_frame(frames) or frames[-1]
            return f"builds SGLang's GPU kernels ({_where(caller)}): needs a GPU install"
        in_torch = os.path.abspath(frames[-1].filename).startswith(root)
        if not (in_torch and re.search(r"cuda|CUDA|device|driver|not compiled", str(link))) \
                and not _CUDA_KERNEL.search(str(link)):
            continue
        caller = next((f for f in reversed(frames) if not os.path.abspath(f.filename).startswith(root)), frames[-1])
        return f"{caller.line or caller.name} ({_where(caller)}) needs a GPU"
    return None


def _unbound_on_this_cpu(exc: BaseException) -> str | None:
    """A ``NameError`` for a module-level name that SGLang's module binds only under a condition its import
    decided on this CPU (``if _is_cuda: import deep_gemm`` in 0.5.12's ``nsa_indexer.py``): the statement that uses
    it runs where the box answers as a GPU install does, whose import binds the name (a GPU package's code); None
    for anything else: a name the module never binds, or binds only ``if TYPE_CHECKING`` (sglang#23871's
    ``ModelRunner`` in ``multi_layer_eagle_worker.py``), is SGLang's own crash on every install."""
    if not isinstance(exc, NameError) or isinstance(exc, UnboundLocalError) or not getattr(exc, "name", None):
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or "/sglang/" not in tb.tb_frame.f_code.co_filename.replace(os.sep, "/"):
        return None
    name = str(exc.name)
    module = sys.modules.get(str(tb.tb_frame.f_globals.get("__name__")))
    import ast

    try:
        tree = ast.parse(inspect.getsource(module) if module is not None else "")
    except (OSError, TypeError, SyntaxError):  # no source to read: not known to be bound only on a GPU install
        return None
    for statement in tree.body:  # bound at the module's top level only inside a conditional block
        if not isinstance(statement, (ast.If, ast.Try)) or (isinstance(statement, ast.If) and "TYPE_CHECKING" in {
                getattr(node, "id", getattr(node, "attr", None)) for node in ast.walk(statement.test)}):
            continue  # a name imported for annotations only is unbound on every install: SGLang's own crash
        for node in ast.walk(statement):
            bound = ([(alias.asname or alias.name).split(".")[0] for alias in node.names]
                     if isinstance(node, (ast.Import, ast.ImportFrom)) else
                     [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)])
            if name in bound:
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                return (f"uses {name} ({_where(frame)}), which its module binds only where its import found a GPU "
                        f"install (line {statement.lineno}): needs a GPU install")
    return None


def _kernel_stub(exc: BaseException) -> str | None:
    """SGLang's stand-in for a kernel that did not import on this machine, raising: a function of SGLang's that takes
    only ``*args, **kwargs`` (it reads no argument, no configuration) and raises at once, bound where the kernel's
    import failed (0.5.18's ``gptq_kernels._unsupported_kernel``: "GPTQ CUDA kernels are unavailable on the current
    platform"). A GPU install has the kernel; None for anything else."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    code = tb.tb_frame.f_code
    if "/sglang/" not in code.co_filename.replace(os.sep, "/") or code.co_argcount or code.co_kwonlyargcount \
            or not (code.co_flags & inspect.CO_VARARGS and code.co_flags & inspect.CO_VARKEYWORDS):
        return None
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    if not (frame.line or "").lstrip().startswith("raise "):
        return None
    return f"calls {code.co_name} ({_where(frame)}), SGLang's stand-in for a GPU kernel that does not import here"


def _refusing_statement(exc: BaseException) -> traceback.FrameSummary | None:
    """The frame whose own ``raise`` or ``assert`` statement raised ``exc``, unchained (a check refusing, not a
    failure on the way to one); None otherwise. Whose check it is, each caller decides from the frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or exc.__cause__ is not None or exc.__context__ is not None:
        return None
    return frames[-1] if (frames[-1].line or "").lstrip().startswith(("raise", "assert")) else None


def _meta_value(exc: BaseException) -> str | None:
    """A statement that read a value of a tensor the GPU would hold (made on ``meta`` here), or checked such
    a tensor's placement: it stops the stage (:mod:`meta_device`); or None. An unchained ``raise``/``assert`` of
    SGLang's that ran to its end read no tensor's value (torch raises first), whatever its message says (0.5.23's
    ``UnsupportedQuantForIPCError`` names "the meta-initialized client")."""
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        caller = _sglang_frame(frames)
        if caller is None:
            continue
        refusing = _refusing_statement(link)
        own = refusing is not None and "/sglang/" in refusing.filename.replace(os.sep, "/")  # not torch's raise
        if meta_device.reads_a_value(link) and not own:
            return f"{caller.line or caller.name} ({_where(caller)}) reads a value the GPU holds"
        try:
            name = meta_device.names_a_meta_tensor(link)
        except (Exception, _NotLoaded):  # reading the failing frame must never end the worker
            name = None
        if name is not None:
            return f"{caller.line or caller.name} ({_where(caller)}) checks {name}, a tensor the GPU holds"
    return None


_UNREGISTERED = re.compile(r"is not a registered model|are not supported for now|failed to be inspected")


def _unregistered_here(exc: BaseException) -> str | None:
    """SGLang's model registry refusing an architecture that a module of ``sglang.srt.models`` defines: on a
    GPU box that module imports and registers it; here its import failed (the registry ignores such
    failures and says the architecture is unknown): a stop naming the module, never a verdict; or None."""
    for link in _chain(exc):
        if not isinstance(link, ValueError) or not _UNREGISTERED.search(str(link)):
            continue
        defined = model_classes.defining_modules()
        for name in re.findall(r"'(\w+)'", str(link)):
            if name in defined:
                return (f"the model registry has no {name} here: {', '.join(defined[name])} does not import on this "
                        "machine (it registers the class on a GPU install)")
    return None


def _sglang_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost of ``frames`` in SGLang's own code (the statement a stop or a verdict names), or None."""
    return next((f for f in reversed(frames) if "/sglang/" in f.filename.replace(os.sep, "/")), None)


def _where(frame: traceback.FrameSummary) -> str:
    """``file:line`` of a frame, the file relative to the ``sglang`` package where it is SGLang's."""
    path = frame.filename.replace(os.sep, "/")
    return f"{path.rpartition('/sglang/')[2] or os.path.basename(frame.filename)}:{frame.lineno}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _statement_calling(code: Any, method: str, after_line: int) -> int | None:
    """The line of the first statement of the function compiled as ``code`` that comes after ``after_line`` and
    calls a function or method named ``method`` (a statement of the function's top level, in source order), or
    None."""
    return next((line for line in _statements_calling(code, method) if line > after_line), None)


@functools.cache
def _statements_calling(code: Any, method: str) -> tuple[int, ...]:
    """The lines of the top-level statements of the function compiled as ``code`` that call ``method``, read from its
    source once per worker (the graph runner's ``__init__`` is asked at every evaluation that sizes its graphs)."""
    import ast
    import textwrap

    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return ()
    function = tree.body[0] if tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if function is None:
        return ()
    return tuple(first + statement.lineno - 1 for statement in function.body if any(
        isinstance(node, ast.Call) and method in (getattr(node.func, "attr", None), getattr(node.func, "id", None))
        for node in ast.walk(statement)))


@contextlib.contextmanager
def _tracing_allowed() -> Iterator[None]:
    """Line events reach a frame's own trace function (``frame.f_trace``) only while a thread trace function is
    set: one that traces no new call is set for the block, and the one before it put back afterwards."""
    before = sys.gettrace()
    if before is None:
        sys.settrace(lambda *_args: None)
    try:
        yield
    finally:
        sys.settrace(before)


def _run_to(frame: Any, line: int, stop: BaseException) -> None:
    """Let the function running in ``frame`` go on, statement by statement, and raise ``stop`` in it as it reaches
    ``line`` (within :func:`_tracing_allowed`): SGLang's own statements up to that one run as written."""

    def trace(traced: Any, event: str, _arg: Any) -> Any:
        if event == "line" and traced.f_lineno >= line:
            traced.f_trace = None
            raise stop
        return trace

    frame.f_trace_lines = True
    frame.f_trace = trace

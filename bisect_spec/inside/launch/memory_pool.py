"""The target's memory pool, sized by SGLang's own runner code against the simulated box's memory
(``memory_pool`` stage; mirrors ``ModelRunner.init_memory_pool`` and ``mem_cache/``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import traceback
import types
from collections.abc import Iterator
from typing import Any

from .device_stops import _device_step, _meta_value, _refusing_statement, _stop_words
from .draft_memory import DRAFT_WEIGHTS
from .faults import sglang_verdict
from .model_build import (
    _GIB,
    _device_bytes,
    _dummy_load_format,
    _loaded_on_meta,
    _model_unchanged,
    _no_values,
    _platform_flags_of_the_box,
    _post_load_not_run,
    _with_tolerant_processing,
)
from .parallel_groups import _groups_on_runner
from .process_state import _process_state_kept
from .runner_checks import on_a_stopped_pool
from .sglang_lookup import _attribute, _replaced, _view
from .siblings import model_classes, version_shims
from .stage import Progress, Stage, _NotLoaded
from .standins import _Unloaded
from .target_model import _target_architectures
from .target_worker import _request_slots


@contextlib.contextmanager
def _memory_pool(args: Any, target: Any, runner: Any, progress: Progress,
                 refusals: list[BaseException]) -> Iterator[bool]:
    """The target's memory pool, sized by SGLang's own runner code against the simulated box's memory, where the
    runner sizes it in the method that loads the weights (0.4.6 … 0.5.13: :func:`model_classes.memory_pool_statements`).

    SGLang's statements of ``initialize`` from ``self.load_model()`` to ``self.init_memory_pool(...)`` run as
    written on the runner, with these stood in for:

    * the weights: ``--load-format dummy``, SGLang's own dummy loader, builds the class on ``meta`` (real shapes
      and dtypes, no storage). Its random values are not drawn. The model's ``post_load_weights`` is not run (it
      derives tensors from the weights' values: DeepSeek's absorbed MLA matrices, FP8 requantisation; minutes of
      decomposed arithmetic on ``meta``); it only adds bytes. A quantisation method's post-load processing that
      reads values is skipped and named (:func:`_with_tolerant_processing`). The barrier after the load returns;
    * the registry's answer: the class :mod:`model_classes` found, as the draft build does;
    * the device's free memory: ``get_available_gpu_memory`` answers the simulated GPU's whole memory less the
      bytes of the built model's tensors, and ``initialize``'s ``min_per_gpu_memory`` is the whole memory.

    A failure of the load is SGLang's verdict only where the model class or ``load_model`` itself refuses
    (:func:`_loaded_on_meta`); else the stage stops, named. Sound in one direction only: a real box has less
    free memory (the CUDA context, communication buffers, what ``post_load_weights`` adds), so what the
    simulation leaves for the KV cache is an upper bound, and SGLang's "Not enough memory" here means not enough
    there. A pool sized here is not a promise; the outcome records the figures (``memory_pool``). Where SGLang
    sized it (also where building the pools stopped after the sizing, at a value only the device holds), this
    context manager yields True: the stages the order runs on the sized pool (``MEMORY_POOL.on_it``: the CUDA
    graphs' batch sizes and the target worker's check on its runner) read the sizes inside it, as a launch does
    next; it yields False where the stage stopped before (or sized with processing not run). The runner's own
    attributes are put back when the window closes, so the stages after it see the runner they saw before; what
    the sizing wrote into the server arguments (the draft's cache size) stays, as on a real box. ``refusals``:
    the load's failures that are SGLang's verdict, and those the stages on the sized pool return.
    """
    runner_cls: Any = type(runner).__mro__[1]
    statements = model_classes.memory_pool_statements(runner_cls)
    if statements is None:
        yield False
        return
    progress.enter(MEMORY_POOL.name)
    architectures = _target_architectures(progress, target)
    cls = model_classes.model_class(architectures)
    view = _view(args)
    unsimulated = _unsimulated_memory(view)
    if unsimulated is not None:
        progress.needs_gpu[MEMORY_POOL.name] = unsimulated
        yield False
        return
    if cls is None or model_classes.FROM_SOURCE in vars(cls):
        what = "does not import here" if cls is not None else "defines none of them"
        progress.needs_gpu[MEMORY_POOL.name] = (f"building {', '.join(architectures) or 'the target'} on meta: its "
                                             f"module of sglang.srt.models {what}")
        yield False
        return
    import torch

    total = int(torch.cuda.get_device_properties(getattr(runner, "gpu_id", 0) or 0).total_memory)

    apart = model_classes.pools_sized_apart(runner_cls)
    # 0.5.14+ sizes the pools once the draft worker has loaded the draft's weights (:mod:`draft_memory`)
    draft_weights = int(progress.held.get(DRAFT_WEIGHTS, 0) or 0) if apart else 0

    def available(*_args: Any, **_kwargs: Any) -> float:  # the simulated GPU's free memory, in GiB, now
        return (total - _device_bytes(vars(runner).get("model")) - draft_weights) / _GIB

    if apart:  # what the device step sets that the sizing reads: the memory free before the load, the groups
        vars(runner).setdefault("pre_model_load_memory", total / _GIB)
        device_step = model_classes.device_step_assignments(runner_cls)
        if device_step is not None:  # from the parallel state, whose groups are stood in for (:func:`_groups_built`)
            model_classes.run(device_step, self=runner)
        _groups_on_runner(runner, runner_cls)
        vars(runner).setdefault("forward_stream", _Unloaded("the runner's forward stream (a CUDA stream)"))
    loader = sys.modules.get("sglang.srt.model_loader.loader")
    served = (lambda *_args, **_kwargs: (cls, cls.__name__))  # noqa: E731 - the registry's answer
    saved = dict(vars(runner))
    skipped: list[tuple[str, bool]] = []  # quantisation methods whose post-load processing read values (not run)
    post_load: list[str] = []  # the model's own post_load_weights, not run
    # refusals: the load's failures that are SGLang's verdict (:func:`_loaded_on_meta`), and those of the stages on
    # the sized pool
    runner.load_model = functools.partial(_loaded_on_meta, runner, runner_cls, cls, refusals, total,
                                          _platform_flags_of_the_box(torch), draft_weights)
    verdict = True
    try:
        with contextlib.ExitStack() as stack:
            for module in [m for name, m in list(sys.modules.items()) if m is not None and name.startswith(
                    ("sglang.srt.model_executor", "sglang.srt.mem_cache"))]:
                stack.enter_context(_replaced(module, "get_available_gpu_memory", available))
            stack.enter_context(_replaced(loader, "get_model_architecture", served))
            stack.enter_context(_replaced(loader, "initialize_dummy_weights", _no_values))
            for name in ("post_load_weights", "_post_load_weights"):  # the loader's call of the model's own (0.5.12+: _)
                stack.enter_context(_replaced(loader, name, functools.partial(_post_load_not_run, post_load)))
            initialize = getattr(loader, "_initialize_model", None)
            if initialize is not None:
                stack.enter_context(_replaced(loader, "_initialize_model",
                                              functools.partial(_with_tolerant_processing, initialize, skipped)))
            derived: list[Any] = []  # the pool sizes SGLang derived (0.5.16+'s KVCacheConfigurator), as they come
            stack.enter_context(_derived_sizes_kept(derived))
            # SGLang collects garbage before it reads the free memory (0.5.18+: weight-loading temporaries hold device
            # blocks); the simulated free memory is the built model's bytes, which no collection changes: a full
            # collection of the build's objects cost 6 % of a Kimi-K2.6 evaluation
            stack.enter_context(_replaced(gc, "collect", _no_values))
            for barrier in ("barrier", "monitored_barrier"):  # every simulated rank finishes its load
                stack.enter_context(_replaced(torch.distributed, barrier, _no_values))
            stack.enter_context(_replaced(_batch_invariant_ops(view), "enable_batch_invariant_mode", _no_values))
            if not getattr(view, "torchao_config", None):  # SGLang's answer without one, past its import
                stack.enter_context(_replaced(sys.modules.get(runner_cls.__module__), "apply_torchao_config_to_model",
                                              _model_unchanged))
            stack.enter_context(_dummy_load_format(args))
            stack.enter_context(_process_state_kept(torch))
            stack.enter_context(version_shims.import_window(["vllm._custom_ops"]))
            failure: Exception | None = None
            stop: BaseException | None = None  # a stop (:class:`_NotLoaded`), raised once the checks ran
            try:
                model_classes.run(statements, self=runner, **{p: total / _GIB for p in statements.parameters})
                if apart:  # what the target worker's alloc_memory_pool asks its runner, after the draft's load
                    runner_cls.alloc_memory_pool(runner)
            except _NotLoaded as stopped:
                verdict = False  # a stop: nothing SGLang sized is recorded
                stop = stopped
            except Exception as exc:
                if any(link is exc for link in refusals):
                    raise
                failure = exc
            if stop is not None:  # outside the handler: a refusal of the checks is not raised "while handling" it
                on_a_stopped_pool(runner, progress, refusals)  # a GPU goes on to the runner's own checks
                raise stop
            unsized = sorted({name for name, neutral in skipped if not neutral})
            in_sizing = failure is not None and not unsized and _sized_by_sglang(failure, statements)
            device = (_device_step(failure) or _meta_value(failure)) if failure is not None else None
            if failure is not None and not (in_sizing and device):
                # SGLang's refusal or crash on the way (not its sizing's, on bytes not known to be its own)
                if in_sizing or (sglang_verdict(failure) and not (unsized and _sized_by_sglang(failure, statements))):
                    raise failure  # SGLang's own refusal in the sizing ("Not enough memory"), or on the way to it
                verdict = False
                on_a_stopped_pool(runner, progress, refusals)
                if unsized:  # the weights' bytes are not the ones SGLang would have counted: not a verdict
                    raise _NotLoaded(f"sizing with the post-load processing of {', '.join(unsized)} not run (it "
                                     "reads the weights' values)") from None
                raise _NotLoaded(f"the statements after the load stopped at {_stop_words(failure)}") from None
            if device:  # building the pools stopped past the sizing, at what only the device holds: a GPU goes on
                progress.needs_gpu[MEMORY_POOL.name] = device
                _sizes_on_runner(runner, derived)
            elif unsized:  # sized, but on weights whose post-load processing did not run: figures, not a check
                on_a_stopped_pool(runner, progress, refusals)
                progress.needs_gpu[MEMORY_POOL.name] = (f"sized without the post-load processing of {', '.join(unsized)} "
                                                     "(it reads the weights' values or builds GPU kernels), which can "
                                                     "change the weights' bytes")
            # what SGLang sized, as the steps after the pool read it on the way to serving: the stages the order runs
            # on the sized pool (:data:`MEMORY_POOL`'s ``on_it``) run now, inside this window, unless the sizes are
            # not SGLang's own (post-load processing not run)
            yield not unsized
    finally:  # what SGLang sized, also where building the pools stopped after the sizing (a warm-up on the device)
        sized = vars(runner).get("max_total_num_tokens")  # unset where SGLang refused before it (0.5.10+)
        if vars(runner).get("model") is not None and verdict:
            progress.memory_pool = {"total_bytes": total, "weights_bytes": _device_bytes(vars(runner).get("model")),
                                    "mem_fraction_static": getattr(runner, "mem_fraction_static", None),
                                    "max_total_num_tokens": sized if isinstance(sized, int) else None,
                                    "request_slots": _request_slots(runner, args)}
            pool_bytes = _kv_pool_bytes(vars(runner).get("token_to_kv_pool"))
            if pool_bytes:
                progress.memory_pool["kv_pool_bytes"] = pool_bytes
            if draft_weights:
                progress.memory_pool["draft_weights_bytes"] = draft_weights
            running = vars(runner).get("max_running_requests")  # SGLang's own figure, where it set one
            if isinstance(running, int) and not isinstance(running, bool):
                progress.memory_pool["max_running_requests"] = running
            if skipped or post_load:
                progress.memory_pool["processing_skipped"] = sorted({name for name, _ in skipped} | set(post_load))
        vars(runner).clear()
        vars(runner).update(saved)


def _kv_pool_bytes(pool: Any) -> int:
    """The bytes of the KV pool SGLang built (its buffers on ``meta``, each once); 0 where none was built."""
    import torch

    seen: set[int] = set()
    total = 0
    stack: list[Any] = [pool]
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            if item.device.type == "meta":
                total += item.numel() * item.element_size()
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "__dict__") and type(item).__module__.startswith("sglang."):
            stack.extend(value for value in vars(item).values()
                         if isinstance(value, (torch.Tensor, list, tuple)) or hasattr(value, "__dict__"))
    return total


@contextlib.contextmanager
def _derived_sizes_kept(derived: list[Any]) -> Iterator[None]:
    """Each pool sizing SGLang derives while it lasts, appended to ``derived``: 0.5.16+'s
    ``KVCacheConfigurator._derive_pool_sizes``, whose result the runner takes only once every pool is built
    (:func:`_sizes_on_runner`)."""
    configurator = _attribute(("sglang.srt.mem_cache.kv_cache_configurator",), "KVCacheConfigurator")
    derive = vars(configurator).get("_derive_pool_sizes") if isinstance(configurator, type) else None
    if derive is None:
        yield
        return

    def kept(self: Any, *args: Any, **kwargs: Any) -> Any:
        sizes = derive(self, *args, **kwargs)
        derived.append(sizes)
        return sizes

    with _replaced(configurator, "_derive_pool_sizes", kept):
        yield


#: What the runner's ``alloc_memory_pool`` takes from the configurator's sizes once the pools are built (0.5.16+).
_SIZES_TAKEN = ("max_total_num_tokens", "max_running_requests")


def _sizes_on_runner(runner: Any, derived: list[Any]) -> None:
    """Where building the pools stopped at a device value after SGLang derived their sizes (0.5.16+), the runner's
    figures as ``alloc_memory_pool`` takes them from the sizes (:data:`_SIZES_TAKEN`): the steps after it read
    them on a GPU, which goes on."""
    if not derived:
        return
    for name in _SIZES_TAKEN:
        value = getattr(derived[-1], name, None)
        if name not in vars(runner) and isinstance(value, int) and not isinstance(value, bool):
            setattr(runner, name, value)


def _unsimulated_memory(view: Any) -> str | None:
    """What moves the weights' memory in a way the simulated box does not follow, named; None when nothing does.
    Another device than CUDA (``--device cpu``: the build would allocate every weight for real on this machine;
    Kimi-K2.6's is 600 GB). CPU offload: the offloader the device step would set (``set_offloader``, after
    ``init_torch_distributed``) is not set here, so every weight would count as on the GPU; a model implementation
    other than SGLang's own: the class built here is SGLang's."""
    device = str(getattr(view, "device", None) or "cuda").lower()
    if not device.startswith("cuda"):  # the model would be built for real, in this machine's memory
        return f"--device {device}: the pool is sized against that device's memory, not the simulated GPU's"
    if (getattr(view, "cpu_offload_gb", 0) or 0) > 0 or (getattr(view, "offload_group_size", -1) or -1) > 0:
        return "CPU offload (--cpu-offload-gb, --offload-group-size): the offloader the device step sets is not set here"
    impl = str(getattr(view, "model_impl", None) or "auto").lower()
    if impl not in ("auto", "sglang"):
        return f"--model-impl {impl}: the class built here is SGLang's own"
    return None


def _batch_invariant_ops(view: Any) -> types.ModuleType | None:
    """SGLang's batch-invariant kernels' module, where ``--enable-deterministic-inference`` has ``initialize`` switch
    them on: it replaces torch's own operators process-wide (kernel choice; it sizes nothing), so the switch is not
    run here. None where the flag is off or the module does not import."""
    if not getattr(view, "enable_deterministic_inference", False):
        return None
    try:
        return importlib.import_module("sglang.srt.batch_invariant_ops")
    except Exception:
        return None


#: Where SGLang sizes the pool (the functions a sizing failure is raised under).
_SIZING_FUNCTIONS = frozenset({"init_memory_pool", "profile_max_num_token", "handle_max_mamba_cache",
                               "_resolve_memory_pool_config", "_profile_available_bytes", "_init_pools"})


def _sized_by_sglang(exc: BaseException, statements: Any) -> bool:
    """True for SGLang's own refusal in the sizing: an unchained ``raise``/``assert`` (never an import) in the
    pool's sizing functions or their callees (``MemoryPoolConfig``), or in the statements of ``initialize`` run
    here ("PP is not compatible with MTP models."). What else fails between the load and the pool (a package this
    machine lacks: ``torch_memory_saver``, ``torchao``; a LoRA adapter's files) is not the box's answer."""
    last = _refusing_statement(exc)
    if last is None or isinstance(exc, ImportError):
        return False
    own = last.name == statements.function and os.path.abspath(last.filename) == os.path.abspath(statements.filename)
    return own or any(frame.name in _SIZING_FUNCTIONS for frame in traceback.extract_tb(exc.__traceback__))


MEMORY_POOL = Stage("memory_pool", "the target's memory pool, sized against the simulated box's memory",
                    "ModelRunner.initialize from load_model() to init_memory_pool() (model_executor/model_runner.py, "
                    "mem_cache/)",
                    window=lambda launch: _memory_pool(launch.args, launch.target, launch.runner, launch.progress,
                                                       launch.refusals))

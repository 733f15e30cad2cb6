"""The target built on ``meta`` with SGLang's own dummy loader (mirrors ``model_loader/``), within the
simulated GPU's memory.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .device_stops import _device_step, _meta_value, _refusing_statement, _stop_words
from .faults import _refused_by_the_model, sglang_verdict
from .post_load import effect_of, jit_kernels_on_meta, layer_tensors, objects_of, processing_key, replay
from .sglang_lookup import _attribute, _attribute_set
from .siblings import meta_device
from .stage import WillNotStart, _NotLoaded
from .standins import _OverTheGpu

#: Bytes in a GiB, as SGLang's ``get_available_gpu_memory`` counts them.
_GIB = 1 << 30


#: What a GPU takes before any weight: the CUDA context and the allocator's first blocks (about 0.5–1 GiB seen on
#: H100/H200). Weights within this of the whole memory may run out of memory while they load, on a real box.
_CONTEXT_BYTES = 2 << 30


def _model_unchanged(model: Any, *_args: Any, **_kwargs: Any) -> Any:
    """``apply_torchao_config_to_model`` without a torchao config: SGLang returns the model as it is (0.5.8 imports
    ``torchao`` first, a dependency a GPU install has and this machine lacks)."""
    return model


@contextlib.contextmanager
def _platform_flags_of_the_box_now(torch: Any) -> Iterator[None]:
    """SGLang modules' ``_is_cuda`` as the simulated box answers it (True) while it lasts, where the module holds
    False: a module imported on the CPU (the evaluator imports a module whose import needs GPU code with the GPU
    hidden, :data:`_IMPORTS_RETRIED`) computed its flag then, and a layer's own platform check reads it when the
    model is built (0.5.23's ``VisionFlash3Attention``: "only available for cuda or musa"; a GPU box builds it).
    What the module skipped at its import (a kernel imported under the flag) stays absent: a build that reaches it
    stops there, named. Put back afterwards."""
    flipped = []
    if torch.cuda.is_available() and torch.version.cuda is not None:
        flipped = [module for module in _modules_with_a_cuda_flag() if vars(module).get("_is_cuda") is False]
    for module in flipped:
        vars(module)["_is_cuda"] = True
    try:
        yield
    finally:
        for module in flipped:
            vars(module)["_is_cuda"] = False


_CUDA_FLAGS: tuple[tuple[int, str | None], list[Any]] = ((-1, None), [])


def _modules_with_a_cuda_flag() -> list[Any]:
    """SGLang's modules that hold an ``_is_cuda`` flag (set at their import), looked for again once ``sys.modules``
    changed: its size or its newest entry (a module imported since, even where another was dropped), or one found is
    no longer the module of its name. Every build asked all of ``sys.modules`` before: 1-2 % of a worker's time."""
    global _CUDA_FLAGS
    seen, found = _CUDA_FLAGS
    now = (len(sys.modules), next(reversed(sys.modules), None))
    if seen != now or any(sys.modules.get(module.__name__) is not module for module in found):
        found = [module for name, module in list(sys.modules.items())
                 if module is not None and name.startswith("sglang.") and "_is_cuda" in vars(module)]
        _CUDA_FLAGS = (now, found)
    return found


def _platform_flags_of_the_box(torch: Any) -> Callable[[], Any]:
    return functools.partial(_platform_flags_of_the_box_now, torch)


@contextlib.contextmanager
def _construction_within(total: int) -> Iterator[None]:
    """While it lasts, every parameter and buffer a module registers on ``meta`` is counted (by module and name: a
    re-registration replaces), and the construction ends (:class:`_OverTheGpu`) as soon as they exceed ``total``,
    the GPU's whole memory: a real box allocates each as the model is built, and runs out of memory there
    (DeepSeek-V3 or Kimi-K2.6 at tp 1, 600+ GiB, on one GPU: the build stops after a sixth of its layers, not
    at its end). Over-counting (a tensor registered, then dropped) can only end a build early into a named stop,
    never a verdict; the check after the load counts what the model holds."""
    import torch.nn.modules.module as module_hooks

    held: dict[tuple[int, str], int] = {}
    built = 0

    def registered(module: Any, name: str, tensor: Any) -> None:
        nonlocal built
        with meta_device.tensors_as_they_are():
            size = tensor.numel() * tensor.element_size() if tensor is not None and tensor.is_meta else 0
        built += size - held.get((id(module), name), 0)
        held[(id(module), name)] = size
        if built > total:
            raise _OverTheGpu(built)

    handles = [module_hooks.register_module_parameter_registration_hook(registered),
               module_hooks.register_module_buffer_registration_hook(registered)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _loaded_on_meta(runner: Any, runner_cls: Any, cls: type, refusals: list[BaseException], total: int,
                    platform: Callable[[], Any] = contextlib.nullcontext, draft_weights: int = 0) -> None:
    """SGLang's own ``load_model`` on the runner (the dummy loader, on ``meta``). A refusal of the model's own
    modules (:func:`_refused_by_the_model`) or of ``load_model``'s own ``raise``/``assert`` is SGLang's verdict; any
    other failure of the load (a layer's platform check: a vision tower's "only available for cuda" on this CPU
    build of torch; a value only real weights hold) ends the stage, never a verdict. ``draft_weights``: the draft's
    bytes per GPU where the draft loads before the pools are sized (0.5.14+): with the target's, over the GPU less
    its CUDA context, the launch will not start (``cause="draft"``)."""
    try:
        with platform(), _construction_within(total), jit_kernels_on_meta():
            runner_cls.load_model(runner)
    except _OverTheGpu as over:
        oom = WillNotStart("weights", f"the weights built so far take {over.built / _GIB:.2f} GiB per GPU, more than "
                           f"its {total / _GIB:.2f} GiB: a real load runs out of device memory (CUDA out of memory) "
                           "while it builds the model, before SGLang sizes the pool",
                           needed=over.built, available=total, total=total, at_least=True)
        refusals.append(oom)
        raise oom from None
    except Exception as exc:
        last = _refusing_statement(exc)
        own = (last is not None and last.name == "load_model"
               and os.path.abspath(last.filename) == os.path.abspath(inspect.getfile(runner_cls)))
        if own or _refused_by_the_model(exc, cls) or sglang_verdict(exc):
            refusals.append(exc)
            raise
        raise _NotLoaded(f"loading {cls.__name__} on meta stopped at {_stop_words(exc)}") from None
    weights = _device_bytes(vars(runner).get("model"))
    if weights > total - _CONTEXT_BYTES:  # a real load runs out of device memory first, in torch's words, not SGLang's
        oom = WillNotStart("weights", f"the weights take {weights / _GIB:.2f} GiB per GPU of its {total / _GIB:.2f} "
                           f"GiB, more than it leaves after the CUDA context (about {_CONTEXT_BYTES / _GIB:.0f} GiB): "
                           "a real load runs out of device memory (CUDA out of memory) before SGLang sizes the pool",
                           needed=weights, available=total - _CONTEXT_BYTES, total=total, at_least=False)
        refusals.append(oom)
        raise oom
    if draft_weights and weights + draft_weights > total - _CONTEXT_BYTES:  # 0.5.14+: the draft loads before the pools
        oom = WillNotStart("draft", f"the target's weights take {weights / _GIB:.2f} GiB per GPU and the draft's "
                           f"{draft_weights / _GIB:.2f} GiB, more than the {(total - _CONTEXT_BYTES) / _GIB:.2f} GiB its "
                           f"{total / _GIB:.2f} GiB leave after the CUDA context (about {_CONTEXT_BYTES / _GIB:.0f} GiB): "
                           "a real launch runs out of device memory "
                           "(CUDA out of memory) while the draft worker loads the draft, before SGLang sizes the pools",
                           needed=weights + draft_weights, available=total - _CONTEXT_BYTES, total=total,
                           at_least=True, target_weights=weights, draft_weights=draft_weights)
        refusals.append(oom)
        raise oom


def _size_neutral(method: Any) -> bool:
    """Whether ``method``'s post-load processing changes no tensor's size: the KV-cache scales of a quantised
    checkpoint's attention layers, SGLang's ``BaseKVCacheMethod.process_weights_after_loading`` not overridden
    (it copies two scalars: ``quantization/kv_cache.py``, 0.4.6 … 0.5.13)."""
    base: Any = _attribute(("sglang.srt.layers.quantization.kv_cache",), "BaseKVCacheMethod")
    if not isinstance(base, type) or not isinstance(method, base):
        return False
    inherited: Any = base
    return getattr(type(method), "process_weights_after_loading", None) is inherited.process_weights_after_loading


def _with_tolerant_processing(initialize: Callable[..., Any], skipped: list[tuple[str, bool]], *args: Any,
                              **kwargs: Any) -> Any:
    """SGLang's ``_initialize_model``, with each quantization method's ``process_weights_after_loading`` on the
    built model allowed to read values it cannot on ``meta``: that module's processing is then not run, and its
    method's class is listed in ``skipped`` with whether it changes no size (:func:`_size_neutral`; the sizing
    after it is a verdict only where every such method is)."""
    model = initialize(*args, **kwargs)
    done: dict[Any, dict[str, Any] | None] = {}  # what each kind of layer's processing did, this load only
    for module in getattr(model, "modules", lambda: [])():
        method: Any = getattr(module, "quant_method", None)
        process = getattr(method, "process_weights_after_loading", None)
        if process is None or getattr(process, "_bisect_spec_tolerant", False):
            continue

        def tolerant(layer: Any, *more: Any, _process: Any = process, _method: Any = method,
                     _skip: tuple[str, bool] = (type(method).__name__, _size_neutral(method)), **options: Any) -> Any:
            with meta_device.tensors_as_they_are():  # the tool's own reads and writes of the layer's tensors
                key = processing_key(_method, layer) if not more and not options else None
                effect = done.get(key) if key is not None else None
                if effect is not None:  # a layer like one processed already: the same shapes, set without the arithmetic
                    replay(effect, layer)
                    return None
                before = layer_tensors(layer) if key is not None else None
                objects = objects_of(layer, _method)
            try:
                result = _process(layer, *more, **options)
            except Exception as exc:
                if _meta_value(exc) is None and _device_step(exc) is None:  # a value, or a kernel only a GPU has
                    raise
                skipped.append(_skip)
                return None
            with meta_device.tensors_as_they_are():
                if key is not None and before is not None and result is None \
                        and objects_of(layer, _method) == objects:
                    done[key] = effect_of(before, layer)
            return result

        tolerant._bisect_spec_tolerant = True  # type: ignore[attr-defined]
        with contextlib.suppress(AttributeError, TypeError):
            method.process_weights_after_loading = tolerant
    return model


def _post_load_not_run(not_run: list[str], model: Any, *_args: Any, **_kwargs: Any) -> None:
    """The loader's call of the model's ``post_load_weights`` (``post_load_weights(model, model_config)`` up to
    0.5.11, ``_post_load_weights(model)`` from 0.5.12), not run: it derives tensors from the weights' values
    (DeepSeek's absorbed MLA matrices, FP8 requantisation: seconds of decomposed arithmetic per layer on ``meta``).
    Named in ``not_run`` where the model has one."""
    if callable(getattr(model, "post_load_weights", None)):
        not_run.append(f"{type(model).__name__}.post_load_weights")


def _no_values(*_args: Any, **_kwargs: Any) -> None:
    """The dummy loader's random values, not drawn: a ``meta`` tensor holds none."""


def _device_bytes(model: Any, leave_out: tuple[str, ...] = ()) -> int:
    """The bytes of a built model's tensors (parameters and buffers, each once): what its weights take on the device.
    ``leave_out``: the names of submodules not counted, with what they hold (a draft's ``embed_tokens``)."""
    if model is None or not callable(getattr(model, "parameters", None)):
        return 0
    seen: set[int] = set()
    total = 0
    modules = model.modules() if callable(getattr(model, "modules", None)) else [model]
    if leave_out:
        modules = (module for name, module in model.named_modules()
                   if not any(part in leave_out for part in name.split(".")))
    with meta_device.tensors_as_they_are():
        for module in modules:  # each module's own tensors (what ``parameters()`` and ``buffers()`` walk, at a third the cost)
            for tensor in [*vars(module).get("_parameters", {}).values(), *vars(module).get("_buffers", {}).values()]:
                if tensor is not None and id(tensor) not in seen and tensor.is_meta:  # a CPU tensor is not on the GPU
                    seen.add(id(tensor))
                    total += tensor.numel() * tensor.element_size()
    return total


@contextlib.contextmanager
def _dummy_load_format(args: Any) -> Iterator[None]:
    """``--load-format dummy`` while the stage loads: in the server arguments, and (0.5.18+) in the runtime context's
    model bag, which the load reads there (``get_model().load_format``), through SGLang's own ``override``."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_attribute_set(args, "load_format", "dummy"))
        bag_of: Any = _attribute(("sglang.srt.runtime_context",), "get_model")
        with contextlib.suppress(Exception):  # no published context, or a bag without the field: the arguments hold it
            stack.enter_context(bag_of().override(load_format="dummy"))
        yield

"""Process state an evaluation changes and puts back, so evaluations stay independent: SGLang's runtime
context (``publish``), module globals the runner writes, caches filled while a model is built, the
speculative classes' class attributes, the target config's architectures.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from .sglang_lookup import _attribute
from .stage import Progress


@contextlib.contextmanager
def _runtime_context() -> Iterator[Callable[..., None] | None]:
    """SGLang's ``publish`` (where the release has a runtime context), with the process-wide
    context put back afterwards.

    Found by feature: ``publish`` alone decides (0.5.18 has it without 0.5.19's
    ``snapshot_context``/``restore_context``; not publishing there made every configuration
    fail with "config namespace 'spec' not published"). Without SGLang's own snapshot the
    context object's state is saved and put back by :func:`_saved_state`. With it, the parallel context's
    contents are put back too: SGLang's snapshot holds its ``_overrides`` dict by reference, and
    ``patch_tensor_parallel_group`` (the draft's attention-TP scope under DP attention, 0.5.19 … 0.5.20) updates
    that dict in place before it swaps in a saved copy, so the restore would bring back the draft's
    ``tp_size`` for every later evaluation (measured on 0.5.20: Llama at tp 1 sized as at tp 4).
    """
    publish = _attribute(("sglang.srt.runtime_context",), "publish")
    if publish is None:
        yield None
        return
    snapshot = _attribute(("sglang.srt.runtime_context",), "snapshot_context")
    restore = _attribute(("sglang.srt.runtime_context",), "restore_context")
    get_context = _attribute(("sglang.srt.runtime_context",), "get_context")
    context = get_context() if get_context is not None else None
    if snapshot is not None and restore is not None:
        with _saved_state(getattr(context, "parallel", None)):
            saved = snapshot()
            try:
                yield publish
            finally:
                restore(saved)
        return
    with _saved_state(context), _saved_state(getattr(context, "parallel", None)):
        yield publish


def _state_names(target: Any) -> list[str]:
    names: list[str] = []
    for klass in type(target).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    names += list(getattr(target, "__dict__", {}))
    return [n for n in dict.fromkeys(names) if n not in ("__dict__", "__weakref__")]


@contextlib.contextmanager
def _saved_state(target: Any) -> Iterator[None]:
    """Put ``target``'s attributes (slots and ``__dict__``) back as they were, so what ``publish`` or a check
    changed does not reach the next evaluation: the same objects (SGLang holds some under a second name:
    0.5.18's ``_PARALLEL`` is its context's ``parallel``), with their contents put back from copies."""
    if target is None:
        yield
        return
    saved: dict[str, tuple[Any, Any]] = {}
    for name in _state_names(target):
        try:
            value = getattr(target, name)
        except AttributeError:
            continue
        try:
            saved[name] = (value, copy.deepcopy(value))
        except Exception:
            saved[name] = (value, value)
    try:
        yield
    finally:
        for name in _state_names(target):
            if name not in saved:
                with contextlib.suppress(AttributeError):
                    delattr(target, name)
        for name, (value, contents) in saved.items():
            _put_back_contents(value, contents)
            with contextlib.suppress(AttributeError, TypeError):
                setattr(target, name, value)


def _put_back_contents(value: Any, contents: Any) -> None:
    """``value``'s contents as its copy ``contents`` holds them (a dict's items, a list's elements, an
    object's attributes, one level deep); nothing for an immutable value or one that could not be copied."""
    if contents is value or isinstance(value, _SIMPLE):
        return
    if isinstance(value, dict):
        value.clear()
        value.update(contents)
    elif isinstance(value, list):
        value[:] = contents
    elif not isinstance(value, (type, types.ModuleType, types.FunctionType)):
        for name in _state_names(contents):
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(value, name, getattr(contents, name))


@contextlib.contextmanager
def _architectures_kept(target: Any, progress: Progress) -> Iterator[None]:
    """The target's architectures as its ``ModelConfig`` read them, held for the model-class stages and put
    back afterwards. SGLang's config cache hands the same ``hf_config`` to every ``ModelConfig`` of a path,
    and a draft ``ModelConfig`` of the target's own path (NEXTN) renames ``architectures[0]`` in place
    (``DeepseekV3ForCausalLM`` -> ``...NextN``): on a real box after the target is built; here the draft's
    config is read earlier, and the next evaluation of the same worker would meet the renamed list."""
    hf_config = getattr(target, "hf_config", None)
    architectures = getattr(hf_config, "architectures", None)
    saved = list(architectures) if isinstance(architectures, list) else None
    progress.held["target_architectures"] = list(saved or [])
    try:
        yield
    finally:
        if saved is not None and isinstance(architectures, list) and architectures != saved:
            architectures[:] = saved
        if saved is not None and hf_config is not None and getattr(hf_config, "architectures", None) is not architectures:
            with contextlib.suppress(AttributeError):
                hf_config.architectures = architectures


#: Modules whose classes the draft workers write class attributes of (``EagleDraftInput.ALLOC_LEN_PER_DECODE``).
_SPECULATIVE_PACKAGE = "sglang.srt.speculative."


_SIMPLE = (int, float, str, bool, type(None), tuple, frozenset)


_CLASSES: dict[str, Any] = {"modules": -1, "classes": []}


def _speculative_classes() -> list[type]:
    """SGLang's speculative classes (found again only when modules were imported since the last call)."""
    if _CLASSES["modules"] != len(sys.modules):
        classes = []
        for name in [n for n in sys.modules if n.startswith(_SPECULATIVE_PACKAGE)]:
            module = sys.modules.get(name)
            classes += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name] \
                if module is not None else []
        _CLASSES.update(modules=len(sys.modules), classes=classes)
    found: list[type] = _CLASSES["classes"]
    return found


@contextlib.contextmanager
def _speculative_classes_kept() -> Iterator[None]:
    """The plain class attributes (numbers, strings, tuples) of SGLang's speculative classes, put back."""
    saved = [(klass, {k: v for k, v in vars(klass).items() if isinstance(v, _SIMPLE) and not k.startswith("__")})
             for klass in _speculative_classes()]
    try:
        yield
    finally:
        for klass, attributes in saved:
            for key, value in attributes.items():
                if vars(klass).get(key, value) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(klass, key, value)


#: Module-level caches the build fills: a rotary module cached by its arguments is handed to the next build,
#: and the load grows its tables in place (``reserve_rope_cache_for_long_sequences``), so the next evaluation
#: would count another's bytes. Emptied for the stage and put back after it.
_BUILD_CACHES = (("sglang.srt.layers.rotary_embedding", "_ROPE_DICT"),
                 ("sglang.srt.layers.rotary_embedding.factory", "_ROPE_DICT"))


def environment_now() -> dict[str, str]:
    """``os.environ`` as a dict, read past the evaluator's read tracer (``dict(os.environ)`` reads every variable
    through ``__getitem__``, and the tracer walks the stack for each: 1 % of a worker's time, for the tool's own
    reads). CPython's mapping keeps the encoded items in ``_data``."""
    environ: Any = os.environ
    data = getattr(environ, "_data", None)
    if not isinstance(data, dict):
        return dict(os.environ)
    return {environ.decodekey(key): environ.decodevalue(value) for key, value in data.items()}


def environment_put_back(saved: dict[str, str]) -> bool:
    """``os.environ`` as :func:`environment_now` saved it; whether it had changed."""
    now = environment_now()
    if now == saved:
        return False
    for name in set(now) - set(saved):
        del os.environ[name]
    os.environ.update(saved)
    return True


@contextlib.contextmanager
def _process_state_kept(torch: Any) -> Iterator[None]:
    """What the load writes process-wide, put back: the environment (``set_cuda_arch``), torch's thread count
    (``torch.set_num_threads(1)``), the build's caches (:data:`_BUILD_CACHES`)."""
    environment = environment_now()
    threads = torch.get_num_threads()
    caches = [(cache, dict(cache)) for module_name, name in _BUILD_CACHES
              for cache in [getattr(sys.modules.get(module_name), name, None)] if isinstance(cache, dict)]
    for cache, _ in caches:
        cache.clear()
    try:
        yield
    finally:
        environment_put_back(environment)
        torch.set_num_threads(threads)
        for cache, contents in caches:
            cache.clear()
            cache.update(contents)


#: Process-wide state the model runner writes: ``(module, global name)``. Put back after every
#: evaluation so the next one starts from the same state (found by feature: a name a release
#: lacks is skipped).
_RUNNER_GLOBALS = (("sglang.srt.managers.schedule_batch", "global_server_args_dict"),
                   ("sglang.srt.server_args", "_global_server_args"),
                   ("sglang.srt.model_executor.model_runner", "global_server_args_dict"))


@contextlib.contextmanager
def _runner_globals_kept() -> Iterator[None]:
    saved: list[tuple[Any, str, Any, Any]] = []
    for module_name, name in _RUNNER_GLOBALS:
        module = sys.modules.get(module_name)
        if module is None or not hasattr(module, name):
            continue
        value = getattr(module, name)
        saved.append((module, name, value, dict(value) if isinstance(value, dict) else None))
    try:
        yield
    finally:
        for module, name, value, contents in saved:
            setattr(module, name, value)
            if contents is not None:
                value.clear()
                value.update(contents)

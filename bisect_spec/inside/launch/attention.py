"""Attention-backend selection (``attention_backend`` stage; mirrors ``layers/attention/`` and
``attention_registry``): which backends SGLang chooses, without building them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

from .sglang_lookup import _replaced
from .stage import Progress, Stage

#: Attention modules whose classes the backend choice builds: building a backend is device work
#: (workspaces, kernels, CUDA graphs' buffers), so these modules are stood in for while the choice runs.
_BACKEND_PACKAGE = "sglang.srt.layers.attention."


_NOT_BACKENDS = frozenset({"base_attn_backend"})


def _is_backend_module(fullname: str) -> bool:
    leaf = fullname.rpartition(".")[2]
    return (fullname.startswith(_BACKEND_PACKAGE) and leaf.endswith("_backend") and leaf not in _NOT_BACKENDS
            and "." not in fullname[len(_BACKEND_PACKAGE):])


class _Inert:
    """What a stood-in backend hands back for anything asked of it."""

    def __getattr__(self, name: str) -> Any:
        return _Inert()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Inert()


def _backend_stand_in(fullname: str, chosen: list[str]) -> types.ModuleType:
    """A module whose every class records its construction in ``chosen`` (and does nothing else)."""
    module = types.ModuleType(fullname, "bisect-spec: stands in for an attention backend's module while "
                                        "SGLang chooses its backends (building one is device work)")

    def stand_in(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        def built(self: Any, *args: Any, **kwargs: Any) -> None:
            chosen.append(attribute)

        klass = type(attribute, (_Inert,), {"__init__": built, "__module__": fullname})
        setattr(module, attribute, klass)
        return klass

    module.__getattr__ = stand_in  # type: ignore[method-assign]
    module.__file__ = None
    return module


class _BackendFinder:
    """A ``sys.meta_path`` finder serving stand-ins for the backend modules first imported during the choice."""

    def __init__(self, chosen: list[str]) -> None:
        self.chosen = chosen

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not _is_backend_module(fullname):
            return None
        return importlib.util.spec_from_loader(fullname, self)  # type: ignore[arg-type]

    def create_module(self, spec: Any) -> types.ModuleType:
        return _backend_stand_in(spec.name, self.chosen)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


@contextlib.contextmanager
def _backends_stood_in() -> Iterator[list[str]]:
    """While it lasts, every attention backend SGLang builds is a stand-in; yields the classes built.

    Modules imported during the choice are forgotten afterwards (they may hold stand-ins), and the
    backend modules imported before it are put back.
    """
    chosen: list[str] = []
    before = set(sys.modules)
    real = {name: sys.modules[name] for name in [n for n in sys.modules if n.startswith(_BACKEND_PACKAGE)]
            if _is_backend_module(name)}
    for name in real:
        sys.modules[name] = _backend_stand_in(name, chosen)
    finder = _BackendFinder(chosen)
    sys.meta_path.insert(0, finder)
    try:
        yield chosen
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            module = sys.modules.pop(name)
            parent, _, leaf = name.rpartition(".")
            if getattr(sys.modules.get(parent), leaf, None) is module:
                with contextlib.suppress(AttributeError):
                    delattr(sys.modules[parent], leaf)
        sys.modules.update(real)


def _attention_backend(runner: Any, progress: Progress) -> None:
    """The runner's ``init_attention_backend()``, SGLang's own: the decode and prefill backends it
    chooses (a hybrid of two, two-batch overlap, the MLA and capability checks, an unknown name), with
    each backend's construction stood in for. On a real box this runs after the weights and the memory
    pool. What ``load_model`` would have set and the choice reads is set as ``load_model`` sets it
    without a model: ``sliding_window_size`` from the model config's attention chunk (so the triton
    backend's sliding-window refusal of 0.4.x, which asks the model itself, is not run).
    """
    if _backend_choice(runner) is None:
        return
    progress.enter(ATTENTION_BACKEND.name)
    progress.attention_backends = _choose_backends(runner)


def _backend_choice(runner: Any) -> tuple[Any, Any, Any, Any] | None:
    """How this release's runner chooses its backends: ``(init_attention_backend, setup module, resolve,
    build)``, or None where it has neither way."""
    init: Any = getattr(runner, "init_attention_backend", None)
    setup: Any = None
    if init is None and callable(getattr(runner, "init_attention_backends", None)):
        # 0.5.16+: ``init_attention_backends()`` first hands the model its aux-hidden-state layers (model
        # work: not run), then resolves the backend pair and builds it, in the setup module's functions
        setup = sys.modules.get("sglang.srt.model_executor.model_runner_components.attention_backend_setup")
    resolve: Any = getattr(setup, "resolve_attention_backend_strs", None)  # 0.5.18+; 0.5.16/0.5.17 resolve in build
    build: Any = getattr(setup, "build_attention_backends", None)
    if init is None and build is None:
        return None
    return init, setup, resolve, build


def _choose_backends(runner: Any) -> list[str]:
    """SGLang's own backend choice on ``runner`` (its constructions stood in for): the classes built."""
    choice = _backend_choice(runner)
    if choice is None:
        return []
    init, setup, resolve, build = choice
    if not hasattr(runner, "sliding_window_size"):
        runner.sliding_window_size = getattr(runner.model_config, "attention_chunk_size", None)
    with _backends_stood_in() as chosen:
        if init is not None:
            init()
        else:
            if resolve is not None:  # 0.5.18+: the runner holds the resolved pair while the backends build
                resolved = resolve(model_runner=runner)
                runner.prefill_attention_backend_str = resolved.prefill
                runner.decode_attention_backend_str = resolved.decode
            with _replaced(setup, "init_cublas", lambda *args, **kwargs: None):  # a matmul on the device
                build(model_runner=runner)
    return list(chosen)


ATTENTION_BACKEND = Stage("attention_backend", "attention-backend selection, after the weights load",
                          "ModelRunner.init_attention_backend (layers/attention/, attention_registry.py)",
                          run=lambda launch: _attention_backend(launch.runner, launch.progress),
                          emulated=True)

"""SGLang's model registry (``sglang.srt.models.registry``), answering for the architectures whose module
imports on this machine now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

from .siblings import model_classes
from .stage import _NotLoaded


class _ImportingModels(dict):  # type: ignore[type-arg]
    """SGLang's model registry (``ModelRegistry.models``) answering for every architecture whose module imports on
    this machine *now*, not only for those that imported when the registry was built.

    The registry imports every module of ``sglang.srt.models`` once, when its module is first imported, and keeps
    out for good each one that failed: a module that imports a GPU package only imports here once the evaluator
    has imported that package's users on the CPU (:func:`model_classes.import_module`). Which evaluation built the
    registry then decided the verdict of every later one: a worker whose first evaluation was Llama's lacked
    ``DeepseekV3ForCausalLMNextN`` for good, and DeepSeek-V3's MTP stopped early there while a fresh worker
    passed it (``scripts/history_check.py``). A missing architecture is looked up as a GPU box's registry would
    hold it: its module imported (on the CPU where it must be), its ``EntryClass`` kept; one that imports only
    from its source stays missing, as before."""

    def _importable(self, architecture: object) -> Any:
        if not isinstance(architecture, str):
            return None
        try:
            cls = model_classes.model_class([architecture])
        except (Exception, _NotLoaded):
            return None
        if cls is None or model_classes.FROM_SOURCE in vars(cls):
            return None
        dict.__setitem__(self, architecture, cls)
        return cls

    def __missing__(self, architecture: object) -> Any:
        cls = self._importable(architecture)
        if cls is None:
            raise KeyError(architecture)
        return cls

    def __contains__(self, architecture: object) -> bool:
        return dict.__contains__(self, architecture) or self._importable(architecture) is not None

    def get(self, architecture: object, default: Any = None) -> Any:
        return self[architecture] if architecture in self else default  # noqa: SIM401 - self.get is this method


_REGISTRY_MODULE = "sglang.srt.models.registry"


def _importing_registry(module: Any) -> None:
    """``module``'s ``ModelRegistry.models`` made to answer as :class:`_ImportingModels` says."""
    registry: Any = getattr(module, "ModelRegistry", None)
    models = getattr(registry, "models", None)
    if isinstance(models, dict) and not isinstance(models, _ImportingModels):
        registry.models = _ImportingModels(models)


class _RegistryImported(importlib.abc.MetaPathFinder):
    """Wraps SGLang's model registry the moment its module has been executed (whichever stage imports it first), so
    no stage consults the registry as its first import left it; the import itself is not moved (it costs seconds:
    every model module)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _REGISTRY_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            _importing_registry(module)

        loader.exec_module = exec_module
        return spec


def _registry_importing() -> None:
    """SGLang's model registry answering as :class:`_ImportingModels` says: wrapped now where it is imported, else
    as soon as its module runs (:class:`_RegistryImported`); once per worker."""
    module = sys.modules.get(_REGISTRY_MODULE)
    if module is not None:
        _importing_registry(module)
    elif not any(isinstance(finder, _RegistryImported) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegistryImported())

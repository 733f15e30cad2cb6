"""The modules of ``bisect_spec/inside`` the launch path uses, imported from the package, or loaded from
beside this package where ``repro.py`` loads it alone (no ``bisect_spec`` importable).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types


def _sibling(name: str) -> types.ModuleType:
    """``bisect_spec/inside``'s module ``name`` loaded from beside this package (``repro.py`` loads the package
    alone)."""
    inside = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(f"bisect_spec_{name}", os.path.join(inside, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclass-like lookups of the module by name
    spec.loader.exec_module(module)
    return module


__all__ = ["meta_device", "model_classes", "version_shims"]

try:
    from bisect_spec.inside import meta_device, model_classes, version_shims
except ImportError:  # repro.py: this package without bisect_spec
    model_classes = _sibling("model_classes")
    meta_device = _sibling("meta_device")
    version_shims = _sibling("version_shims")

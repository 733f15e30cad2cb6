"""Version-skew shims: let old SGLang releases import beside today's torch and triton.

Runs *inside* an evaluation worker only, before SGLang is imported. Every environment
shares one base (torch 2.13 CPU, triton 3.9); releases from 2025 were written against
older ones and import names that have since moved or gone. Each shim is detected by
feature (the name is missing), never by SGLang version, does nothing when the real name
exists, and answers what the old API answered on this machine, so no resolution result
changes because of it. Standard library (and torch/triton, lazily) only.

Why each exists (measured on 0.4.6 ... 0.5.23, see ``data/releases.json``):

* ``triton.runtime.cache.default_cache_dir`` / ``default_dump_dir`` /
  ``default_override_dir``: imported by ``sglang/srt/utils.py`` up to 0.4.x; triton 3.9
  moved them to ``triton.knobs.cache``. The shim returns the knobs' directories.
* ``torch._C._cpu._is_amx_tile_supported``: called at import by 0.5.x releases
  (``cpu_has_amx_support``); gone in torch 2.13. The shim reads the CPU flag
  ``amx_tile`` from ``/proc/cpuinfo``, which is what the old function reported.
* ``vllm._custom_ops`` (:func:`import_window`): 0.4.9-0.4.10 import
  ``scaled_fp8_quant`` from it at module level on a CPU without AMX. A stub module whose
  functions raise when *called* stands in while SGLang is imported, and is removed
  afterwards, so later availability checks (``find_spec("vllm")``) see the truth.
* ``sgl_kernel`` (:func:`import_window`): some 0.5.x releases import it unconditionally
  (also on CPU) and register fake ops for ``sgl_kernel::...``; the real wheel does not
  import without CUDA libraries. A stub package whose attributes are callables raising
  when called stands in, with the op namespace defined so fake registrations find it.
  It stays loaded: those modules hold references to it.

The package stubs are used only after an import *failed* on that package's absence
(the caller retries once per package), so a release that imports without them is
imported exactly as before.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
import traceback
import types
from collections.abc import Iterator, Sequence
from typing import Any

#: Names of the shims applied in this process (reported by the worker's ``info``).
APPLIED: list[str] = []


def apply() -> None:
    """Install the attribute shims whose feature is missing (idempotent)."""
    _triton_cache_names()
    _amx_probe()


def _triton_cache_names() -> None:
    try:
        cache = importlib.import_module("triton.runtime.cache")
        knobs = importlib.import_module("triton.knobs")
    except Exception:
        return
    if hasattr(cache, "default_cache_dir") or not hasattr(knobs, "cache"):
        return
    knob = knobs.cache
    for name, attribute in (("default_cache_dir", "dir"), ("default_dump_dir", "dump_dir"),
                            ("default_override_dir", "override_dir")):
        setattr(cache, name, functools.partial(getattr, knob, attribute))
    APPLIED.append("triton.runtime.cache.default_*_dir")


def cpu_has_amx_tile(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU advertises AMX tiles (what torch's removed probe answered)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            return any(line.startswith("flags") and "amx_tile" in line.split() for line in handle)
    except OSError:
        return False


def _amx_probe() -> None:
    try:
        torch = importlib.import_module("torch")
    except Exception:
        return
    cpu = getattr(torch._C, "_cpu", None)
    if cpu is None or hasattr(cpu, "_is_amx_tile_supported"):
        return
    answer = cpu_has_amx_tile()
    cpu._is_amx_tile_supported = lambda: answer
    APPLIED.append("torch._C._cpu._is_amx_tile_supported")


class _Unavailable:
    """A stub attribute: importing it works, calling it says why it cannot run here."""

    def __init__(self, qualified: str) -> None:
        self._qualified = qualified

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self._qualified} is a bisect-spec stub: it needs a GPU build")

    def __getattr__(self, name: str) -> _Unavailable:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self._qualified}.{name}")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        """``class Method(stub.Base)`` at module level: subclass ``object`` instead."""
        return (object,)


class _StubModule(types.ModuleType):
    """A module that has every attribute (as an :class:`_Unavailable`)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self.__name__}.{name}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: serves stubs for exactly the named modules (and empty
    parent packages for them), only when no real finder found them.

    Only the named modules answer every attribute; an import of any other module of the
    package still fails, so guarded ``try: import ... except ImportError`` fallbacks in
    SGLang keep taking their CPU path.
    """

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = tuple(modules)
        self.parents = {m.rsplit(".", i)[0] for m in self.modules for i in range(1, m.count(".") + 1)}
        self.served: list[str] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules and fullname not in self.parents:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name) if spec.name in self.modules else types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        self.served.append(module.__name__)
        if module.__name__ == "sgl_kernel":
            _define_op_library("sgl_kernel")


_LIBRARIES: list[Any] = []


def _define_op_library(namespace: str) -> None:
    """Declare the op namespace so ``torch.library.register_fake("ns::op")`` calls in
    the stubbed package's users find a library (they then fail per op, which SGLang
    guards, instead of failing the import)."""
    with contextlib.suppress(Exception):
        torch = importlib.import_module("torch")
        _LIBRARIES.append(torch.library.Library(namespace, "FRAGMENT"))


#: Packages only a GPU box has that some releases import at module level.
GPU_ONLY_PACKAGES = ("vllm", "sgl_kernel")
#: Of those, the ones removed again after the import window (see the module docstring).
_TRANSIENT = ("vllm",)


_IMPORT_STATEMENT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+\(?\s*([\w\s,]+)|import\s+([\w.]+))")


def missing_gpu_modules(exc: BaseException) -> list[str]:
    """The GPU-only modules whose absence made an import fail, if that is what happened.

    They are read from the failing ``import`` statement: ``from vllm._custom_ops import x``
    names ``vllm._custom_ops`` and ``from vllm import _custom_ops as ops`` names
    ``vllm._custom_ops`` too, though Python reports only ``vllm`` missing. Stubbing the
    exact modules (not the whole package) keeps other imports of the package failing.
    """
    name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    root = str(name).split(".", 1)[0] if name else ""
    if root not in GPU_ONLY_PACKAGES or _installed(root):
        return []
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        match = _IMPORT_STATEMENT.match(frame.line or "")
        if not match:
            continue
        module = match.group(1) or match.group(3)
        if module.split(".", 1)[0] != root:
            continue
        if match.group(1) == root and root != "sgl_kernel":
            names = [part.split()[0] for part in match.group(2).split(",") if part.strip()]
            return [f"{root}.{imported}" for imported in names]
        return [module]
    return [str(name)]


def forget_partial_import(package: str) -> None:
    """Drop a package's modules after a failed import so it can be imported afresh."""
    for name in list(sys.modules):
        if name == package or name.startswith(package + "."):
            del sys.modules[name]


@contextlib.contextmanager
def import_window(stubbed: Sequence[str]) -> Iterator[None]:
    """While SGLang is imported: serve stubs for the ``stubbed`` GPU-only modules.

    Only modules whose absence was seen to fail the import are stubbed (the caller
    retries with :func:`missing_gpu_package`'s answer), so releases that import without
    them behave exactly as before.
    """
    finder = _StubFinder([module for module in stubbed if not _installed(module.split(".", 1)[0])])
    if finder.modules:
        sys.meta_path.append(finder)
    try:
        yield
    finally:
        if finder.modules:
            sys.meta_path.remove(finder)
            for name in list(sys.modules):
                if name.split(".", 1)[0] in _TRANSIENT and name in finder.served:
                    del sys.modules[name]
        APPLIED.extend(f"stub:{name}" for name in finder.served if name in finder.modules and f"stub:{name}" not in APPLIED)


def _installed(root: str) -> bool:
    module = sys.modules.get(root)
    if isinstance(getattr(getattr(module, "__spec__", None), "loader", None), _StubFinder):
        return False
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False

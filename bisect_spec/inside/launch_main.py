"""Entry point of a launched server process in a bisect-spec environment (run as a script).

``python launch_main.py CONFIG_JSON MODULE -- SGLANG_FLAGS...`` prepares the process the
way an evaluation worker is prepared, then runs ``MODULE`` (``sglang.launch_server``) as
``__main__``, exactly as ``python -m`` would:

* ``torchvision_shim``: the environments' CPU torch needs the torchvision op schemas
  declared before SGLang imports (see ``worker_main._torchvision_shim``);
* ``hardware``: a hardware profile to simulate during argument resolution (SGLang is
  imported on the CPU first, as in a worker). Only resolution is meaningful then: the
  launch fails later, when the first CUDA kernel runs.

For ``--sglang current`` on a GPU box none of this is needed and ``python -m
sglang.launch_server`` runs directly. Everything after resolution is SGLang's own code.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import os
import runpy
import sys
import types
from typing import Any


class _CpuFirstImports:
    """Lazy SGLang imports under simulation, as an evaluation worker does them.

    A module is imported with the simulation on; when that fails with an ImportError
    (``sgl_kernel`` and other CUDA-only packages), what the attempt left in
    ``sys.modules`` is dropped and the module is imported with the simulation suspended
    (``simulated_gpu.import_on_cpu``), as the worker's retry does.
    """

    def __init__(self) -> None:
        self.active = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if self.active or not name.startswith("sglang.") or name in sys.modules:
            return None
        from bisect_spec.inside import simulated_gpu

        self.active = True
        before = set(sys.modules)
        try:
            importlib.import_module(name)
        except ImportError:
            for added in set(sys.modules) - before:
                sys.modules.pop(added, None)
            simulated_gpu.import_on_cpu(name)
        except Exception:
            return None  # let the normal import raise it again, with SGLang's own traceback
        finally:
            self.active = False
        module = sys.modules.get(name)
        original = getattr(module, "__spec__", None)
        if module is None or original is None:
            return None
        return importlib.util.spec_from_loader(name, _Loaded(module, original), origin=original.origin,
                                               is_package=original.submodule_search_locations is not None)


class _Loaded(importlib.abc.Loader):
    """A loader handing back a module that is already imported."""

    def __init__(self, module: types.ModuleType, spec: Any) -> None:
        self.module = module
        self.spec = spec

    def create_module(self, spec: Any) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set ours; the module's own is the true one
        module.__loader__ = self.spec.loader


def prepare(config: dict[str, Any]) -> None:
    """Shim torchvision and install the simulated hardware, as ``config`` asks."""
    here = os.path.dirname(os.path.abspath(__file__))
    for name, path in (("bisect_spec", os.path.dirname(here)), ("bisect_spec.inside", here)):
        if name not in sys.modules:  # the package without bisect_spec/__init__.py (see worker_main)
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package
    if config.get("torchvision_shim"):
        from bisect_spec.inside.worker_main import _torchvision_shim

        _torchvision_shim()
    hardware = config.get("hardware")
    if hardware:
        from bisect_spec.inside import simulated_gpu
        from bisect_spec.inside.evaluator import import_for_resolution

        import_for_resolution()  # honestly on the CPU first, as a worker does

        simulated_gpu.install(hardware, int(config.get("gpus", 8)))
        sys.meta_path.insert(0, _CpuFirstImports())


def main() -> None:
    config = json.loads(sys.argv[1])
    module = sys.argv[2]
    flags = sys.argv[4:] if sys.argv[3:4] == ["--"] else sys.argv[3:]
    prepare(config)
    sys.argv = [module, *flags]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""The launch path by its old name, for ``repro.py``: a reproducer loads this file alone, by its path, and calls
:func:`run_after_resolution` with a :class:`Progress`. The launch path itself is the package
:mod:`bisect_spec.inside.launch` (``docs/launch-path.md``); the rest of bisect-spec imports that.

Where ``bisect_spec`` is not importable (``BISECT_SPEC_INSIDE`` names this folder), the package is loaded
from beside this file, under a name of its own.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types


def _package_beside() -> types.ModuleType:
    """``launch/`` from beside this file, as the package ``bisect_spec_launch`` (its modules import each other
    relatively, and ``bisect_spec/inside``'s other modules from beside it: :mod:`launch.siblings`)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch")
    spec = importlib.util.spec_from_file_location("bisect_spec_launch", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


try:
    from bisect_spec.inside import launch as _launch
except ImportError:  # repro.py: this file without its package
    _launch = _package_beside()

Progress = _launch.Progress
run_after_resolution = _launch.run_after_resolution
STAGES = _launch.STAGES
STAGE_WORDS = _launch.STAGE_WORDS
AFTER_WEIGHTS = _launch.AFTER_WEIGHTS
NotLoaded = _launch.NotLoaded
WillNotStart = _launch.WillNotStart
split_env = _launch.split_env
tool_fault = _launch.tool_fault

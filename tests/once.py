"""A module's expensive fixture computed once per test run, not once per pytest-xdist worker.

Under ``--dist worksteal`` a module's tests are spread over the workers (the ``slow`` ones on
purpose, see ``conftest.pytest_collection_modifyitems``), and each worker that runs one of them
computes the module's fixtures again: a run of 2b12fba swept the kill tests' reference three
times and the cache tests' pair twice. Here the first worker to ask computes it, in a folder
every worker sees (the parent of their base temp folders); the others wait on its lock and read
the pickled result. A fixture whose computation fails is computed again by the next one to ask,
so each worker reports the failure itself.

The result's files are shared: the tests only read them (each writes into a folder of its own).
"""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[Path], T]) -> T:
    """``compute(folder)`` once for the whole run (an empty ``folder`` of its own); every caller gets its result."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return compute(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # every worker's base temp is a folder of this one
    folder = shared / f"once-{name}"
    result = shared / f"once-{name}.pickle"
    with open(shared / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the event waited for: the worker computing it lets go
        try:
            if result.exists():
                value: T = pickle.loads(result.read_bytes())
                return value
            if folder.exists():  # an earlier try that failed: start again from an empty folder
                import shutil

                shutil.rmtree(folder)
            folder.mkdir()
            value = compute(folder)
            staged = result.with_suffix(".partial")
            staged.write_bytes(pickle.dumps(value))
            staged.replace(result)
            return value
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

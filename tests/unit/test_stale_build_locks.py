"""A killed JIT build's lock file (torch's ``cpp_extension``) is removed when a worker starts: torch waits on it for as
long as it exists, so every later NGRAM evaluation of 0.5.9 (its extension built at import) hung to its timeout."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import bisect_spec


def worker_main() -> Any:
    path = Path(bisect_spec.__file__).parent / "inside" / "worker_main.py"
    spec = importlib.util.spec_from_file_location("worker_main_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_lock_older_than_any_build_is_removed_and_a_fresh_one_kept(tmp_path: Path) -> None:
    stale = tmp_path / "py311_cpu" / "ngram_cache_cpp" / "lock"
    fresh = tmp_path / "py311_cpu" / "other_ext" / "lock"
    kept_file = tmp_path / "py311_cpu" / "ngram_cache_cpp" / "ngram.o"
    for path in (stale, fresh, kept_file):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    module = worker_main()
    assert module._stale_build_locks(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and fresh.exists() and kept_file.exists()
    assert module._stale_build_locks(str(tmp_path)) == []  # nothing left to remove

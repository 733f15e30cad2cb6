"""Files that several processes write at once: each written whole, through a staging file of its own.

Parallel test workers, two sweeps and a warm worker all write the same profiles and launcher
scripts; a plain ``write_text`` lets a reader see a half-written file, and one staging name
shared by all lets one writer rename another's staging file away (CI saw both).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from pathlib import Path

from bisect_spec.errors import StoreError


def staging_path(path: Path) -> Path:
    """A staging file beside ``path`` that no other process or thread writes: written, then renamed onto ``path``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def write_if_changed(path: Path, text: str, *, mode: int | None = None) -> None:
    """Make ``path`` hold ``text`` (with permission bits ``mode``), writing only when it does not already.

    The text goes to a staging file of this process and thread, then is renamed into place, so a
    reader sees the old file or the new one, whole.
    """
    if path.is_file() and path.read_text() == text and (mode is None or path.stat().st_mode & 0o777 == mode):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(path)
    try:
        staging.write_text(text)
        if mode is not None:
            staging.chmod(mode)
        staging.replace(path)
    finally:
        staging.unlink(missing_ok=True)


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes) whole and durably (flushed to disk), then rename it into place; a staging file per
    process and thread, so two writers of one path never write into the same file (the last rename wins, whole).

    :raises StoreError: the disk is full, or the path cannot be written (one line saying which).
    """
    tmp = staging_path(path)
    try:
        with open(tmp, "wb") as handle:
            handle.write(text if isinstance(text, bytes) else text.encode())
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise store_error(exc, path) from exc


def store_error(exc: OSError, path: Path) -> StoreError:
    """One line for a failed write of ``path``: a full disk says how to go on."""
    if exc.errno == errno.ENOSPC:
        return StoreError(f"disk full while writing {path}: free some space, then resume the run with --resume")
    return StoreError(f"cannot write {path}: {exc.strerror or exc}")

"""Files that several processes write at once: each written whole, through a staging file of its own.

Parallel test workers, two sweeps and a warm worker all write the same profiles and launcher
scripts; a plain ``write_text`` lets a reader see a half-written file, and one staging name
shared by all lets one writer rename another's staging file away (CI saw both).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


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

#!/usr/bin/env python
"""Write a slimmer copy of a wheel: named members dropped, ``RECORD`` rewritten to match.

Why: a GPU machine without network gets its missing packages as carried wheels, and what
travels is capped (64 MiB). SGLang 0.5.23's wheel is 39 MB, 18.7 MB of it Rust extensions
(``srt/rust_extensions/*.so``, ``srt/mem_cache/rust_tree_core/*.so``) and 4.6 MB the
diffusion runtime (``multimodal_gen/``); importing ``sglang.srt.server_args`` and resolving
arguments loads none of them (checked: no ``rust`` module in ``sys.modules`` after
``import sglang.srt.server_args`` and the lazily imported config modules).
The slim wheel keeps its file name, so ``pip install --no-deps`` takes it as the release.

Usage: python scripts/slim_wheel.py IN.whl OUT_DIR [--drop GLOB ...]   (default drops: see DEFAULT_DROP)
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

DEFAULT_DROP = ("sglang/srt/rust_extensions/*.so", "sglang/srt/mem_cache/rust_tree_core/*.so",
                "sglang/multimodal_gen/*")


def slim(source: Path, out_dir: Path, drop: Sequence[str] = DEFAULT_DROP) -> tuple[Path, int]:
    """Copy ``source`` into ``out_dir`` without members matching ``drop``; return (path, members dropped)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / source.name
    dropped = 0
    rows: list[list[str]] = []
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            if info.filename == record_name:
                continue
            if any(fnmatch.fnmatch(info.filename, pattern) for pattern in drop):
                dropped += 1
                continue
            data = src.read(info.filename)
            dst.writestr(info, data)
            if not info.filename.endswith("/"):
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                rows.append([info.filename, f"sha256={digest}", str(len(data))])
        rows.append([record_name, "", ""])
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        dst.writestr(src.getinfo(record_name), text.getvalue())  # its own timestamp: the output is reproducible
    return target, dropped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("wheel", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--drop", action="append", help="glob of members to drop (repeatable)")
    args = parser.parse_args(argv)
    target, dropped = slim(args.wheel, args.out_dir, tuple(args.drop) if args.drop else DEFAULT_DROP)
    print(f"{target}: {dropped} members dropped, {args.wheel.stat().st_size / 2**20:.1f} MiB -> "
          f"{target.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

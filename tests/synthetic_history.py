"""A synthetic SGLang git history between two real releases, built from their wheels.

No copy of SGLang is committed to this repository: the two wheels are downloaded from PyPI
(``pip download --no-deps``) into a cache directory, and the history is written with
``git fast-import`` in well under a second:

1. the older release's ``sglang/`` tree as ``python/sglang`` (tag ``vOLD``);
2. one commit per file the newer release adds (in path order), then one per file it changes,
   then one per file it deletes (path order); subjects ``Add|Update|Remove <path> (#PR)``;
   one commit in between touches only ``README.md`` (the walk must leave it out). Changed
   files come in **dependency order**, a file after the changed files it imports at import
   time (a cycle broken at the file missing fewest), the way real work lands: a caller is changed with or after its
   callee. In path order, most of the history does not import (``moe/__init__.py`` importing
   a ``MoeRunner`` that ``moe/moe_runner/`` gets 8 commits later; ``schedule_batch.py`` reading
   a ``ServerArgs`` field that ``server_args.py`` gets 54 commits later);
3. the newer release's tree at the end (tag ``vNEW``).

Dates and authors are fixed, so the same two wheels always give the same commit hashes:
a history built once is reused from the cache (tests, ``scripts/bench_commit_bisect.py``).
Used by tests and scripts only; it starts processes freely (``git``, ``pip``).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Bump when the shape of the history changes (old caches are then rebuilt).
FORMAT = 4
FIRST_PR = 20001
START = 1_756_000_000  # commit dates: START, START + 1 h, ...
AUTHOR = "Synthetic History <history@bisect-spec.invalid>"


@dataclass(frozen=True)
class History:
    """A built history: the clone, its two tags, and which commit touched which file."""

    repo: Path
    old: str
    new: str
    #: ``{"Update srt/server_args.py (#20123)": "python/sglang/srt/server_args.py", ...}``
    subjects: dict[str, str]
    commits: int

    @property
    def old_tag(self) -> str:
        return f"v{self.old}"

    @property
    def new_tag(self) -> str:
        return f"v{self.new}"

    def commit_touching(self, path: str) -> str:
        """The hash of the one commit that changed ``path`` (relative to ``python/sglang/``)."""
        (subject,) = [s for s, p in self.subjects.items() if p == f"python/sglang/{path}"]
        found = _git(self.repo, "log", "--format=%H", "--fixed-strings", f"--grep={subject}", self.new_tag).split()
        assert len(found) == 1, (subject, found)
        return found[0]


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode()


def wheel(release: str, cache: Path) -> Path:
    """The release's wheel, downloaded once into ``cache`` (``pip download --no-deps``)."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"sglang-{release}-*.whl"))
    if not found:  # into a directory of this process's own, then moved in whole: tests build histories in parallel
        own = cache / f".download-{os.getpid()}"
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--dest", str(own), f"sglang=={release}"], capture_output=True, text=True, check=False)
        for path in own.glob("*.whl"):
            os.replace(path, cache / path.name)
        shutil.rmtree(own, ignore_errors=True)
        found = sorted(cache.glob(f"sglang-{release}-*.whl"))
        if not found:
            raise RuntimeError(f"pip download sglang=={release} failed: {done.stderr.strip()[-500:]}")
    return found[0]


def package_files(wheel_path: Path) -> dict[str, bytes]:
    """Every file of the wheel's ``sglang/`` package, by path inside the package."""
    with zipfile.ZipFile(wheel_path) as archive:
        return {name.removeprefix("sglang/"): archive.read(name) for name in archive.namelist()
                if name.startswith("sglang/") and not name.endswith("/") and "__pycache__" not in name}


def build(old: str, new: str, cache: Path) -> History:
    """The history from ``old`` to ``new`` under ``cache`` (built once, then reused)."""
    root = cache / f"history-{old}-{new}-v{FORMAT}"
    manifest = root / "history.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        return History(root / "sglang", old, new, data["subjects"], data["commits"])
    before = package_files(wheel(old, cache / "wheels"))
    after = package_files(wheel(new, cache / "wheels"))
    staging = root.with_name(f"{root.name}.partial-{os.getpid()}")  # this process's own: builds may run in parallel
    shutil.rmtree(staging, ignore_errors=True)
    repo = staging / "sglang"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    steps: list[tuple[str, dict[str, bytes | None]]] = []
    number = FIRST_PR
    changed = {p: after[p] for p in after.keys() & before.keys() if after[p] != before[p]}
    for kind, names in (("Add", sorted(after.keys() - before.keys())), ("Update", dependency_order(changed)),
                        ("Remove", sorted(before.keys() - after.keys()))):
        for name in names:
            steps.append((f"{kind} {name} (#{number})", {f"python/sglang/{name}": after.get(name)}))
            number += 1
        if kind == "Add":
            steps.append(("Docs: say where this history comes from", {"README.md": _readme(old, new, extra=True)}))
    stream = bytearray()
    initial = {f"python/sglang/{name}": data for name, data in before.items()}
    initial["README.md"] = _readme(old, new)
    stream += _commit(1, f"Release {old}", initial, parent=None)
    stream += f"reset refs/tags/v{old}\nfrom :1\n\n".encode()
    for index, (subject, change) in enumerate(steps, 2):
        stream += _commit(index, subject, change, parent=index - 1)
    stream += f"reset refs/tags/v{new}\nfrom :{len(steps) + 1}\n\n".encode()
    _git(repo, "fast-import", "--quiet", stdin=bytes(stream))
    _git(repo, "reset", "-q", "--hard", "main")
    subjects = {s: p for s, change in steps for p in change if p.startswith("python/")}
    (staging / "history.json").write_text(json.dumps({"old": old, "new": new, "commits": len(steps) + 1,
                                                      "subjects": subjects}, indent=1))
    try:
        staging.rename(root)  # whole, or not at all: a history another process finished first is kept
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not manifest.is_file():
            raise
    return History(root / "sglang", old, new, subjects, len(steps) + 1)


def _module_level(tree: ast.AST) -> list[ast.stmt]:
    """Statements that run when the module is imported (function bodies excluded, class bodies included)."""
    found: list[ast.stmt] = []
    todo = list(getattr(tree, "body", []))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        found.append(node)
        for name in ("body", "orelse", "finalbody", "handlers"):
            todo += [child for child in getattr(node, name, []) if isinstance(child, (ast.stmt, ast.excepthandler))]
    return found


def _imported_files(path: str, text: bytes, files: Collection[str]) -> set[str]:
    """Which of ``files`` (paths inside the package) the module at ``path`` imports when it is imported."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    package = ["sglang", *path.split("/")[:-1]]
    names: set[str] = set()
    for node in _module_level(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    found = set()
    for name in names:
        if name == "sglang" or name.startswith("sglang."):
            relative = name.removeprefix("sglang").lstrip(".").replace(".", "/")
            for candidate in (f"{relative}.py", f"{relative}/__init__.py".lstrip("/")):
                if candidate in files and candidate != path:
                    found.add(candidate)
    return found


def dependency_order(files: Mapping[str, bytes]) -> list[str]:
    """Paths with every file after the files of ``files`` it imports at import time.

    A cycle is broken at the file with the fewest imports still missing; among those, a
    package's ``__init__.py`` waits for the modules under it (it usually imports them), then path order.
    """
    needs = {path: _imported_files(path, text, files) for path, text in files.items() if path.endswith(".py")}
    needs.update({path: set() for path in files if path not in needs})
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(needs):
        chosen = min((p for p in needs if p not in done),
                     key=lambda p: (len(needs[p] - done), any(q.startswith(p.removesuffix("__init__.py")) and q != p
                                                               for q in needs if q not in done), p))
        order.append(chosen)
        done.add(chosen)
    return order


def _readme(old: str, new: str, *, extra: bool = False) -> bytes:
    text = f"Synthetic history from the SGLang {old} wheel to the {new} wheel, one commit per file.\n"
    return (text + "Built by tests/synthetic_history.py.\n" if extra else text).encode()


def _commit(mark: int, subject: str, files: Mapping[str, bytes | None], *, parent: int | None) -> bytes:
    when = START + 3600 * (mark - 1)
    message = subject.encode() + b"\n"
    out = bytearray(f"commit refs/heads/main\nmark :{mark}\nauthor {AUTHOR} {when} +0000\n"
                    f"committer {AUTHOR} {when} +0000\ndata {len(message)}\n".encode())
    out += message
    if parent is not None:
        out += f"from :{parent}\n".encode()
    for path, data in sorted(files.items()):
        if data is None:
            out += f"D {path}\n".encode()
        else:
            out += f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n"
    return bytes(out) + b"\n"

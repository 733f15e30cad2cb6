"""Nightly matrix files: releases × models × drafts × hardware, each cell a sweep.

A matrix is a TOML file (``examples/nightly-matrix.toml``)::

    name = "speculative-nightly"          # nightlies compare against the last one of the same name
    strategy = "quick"                    # a strategy name or .toml file, as for sweep --strategy
    seed = 0
    budget = 50                           # optional: the strategy's search budget
    releases = ["0.5.9", "0.5.12", "0.5.23"]   # or "installed", "known", "newest:5", "0.5.9..0.5.23"
    models = ["deepseek-v3"]
    drafts = ["eagle3"]                   # "none" for no draft
    hardware = ["h100x8", "rtx-pro-6000x8"]    # profile name, optionally xGPUS (default 8)
    shrink = false                        # shrink every new signature
    repo = "~/src/sglang"                 # optional: a local SGLang clone; regressions between two
                                          # releases are then bisected down to the commit

    [[exclude]]                           # drop cells matching every key given
    model = "kimi-k2.6"
    release = "0.5.9"

Every error names the file, the line and what is wrong, like a compiler:
``nightly.toml:7: unknown model 'kimi-k9' in models (closest: kimi-k2.6, kimi-k2.5)``.
Pure apart from reading the file.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.runtime import environments, profiles

_KEYS = {"name", "strategy", "seed", "budget", "releases", "models", "drafts", "hardware", "shrink", "exclude", "jobs",
         "repo"}
_EXCLUDE_KEYS = {"release", "model", "draft", "hardware"}


@dataclass(frozen=True)
class Cell:
    """One sweep of a nightly: a release, a model, a draft and a hardware box."""

    release: str
    model: str
    draft: str | None
    hardware: str
    gpus: int

    @property
    def id(self) -> str:
        return f"{self.release}/{self.model}/{self.draft or 'none'}/{self.hardware}x{self.gpus}"

    @property
    def slug(self) -> str:
        return self.id.replace("/", "--")


@dataclass(frozen=True)
class Matrix:
    """A parsed matrix file."""

    file: str
    name: str
    strategy: str
    seed: int | None
    budget: int | None
    shrink: bool
    jobs: int | None
    cells: tuple[Cell, ...]
    #: a local SGLang clone: regressions are bisected down to the commit (``bisect --repo``)
    repo: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "name": self.name, "strategy": self.strategy, "seed": self.seed,
                "budget": self.budget, "shrink": self.shrink, "cells": len(self.cells),
                **({"repo": self.repo} if self.repo else {})}


class _Located:
    """Finds the line of a key or of a value inside the raw text, for error messages."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, key: str, value: str | None = None) -> int:
        start = 0
        for number, line in enumerate(self.lines, 1):
            if re.match(rf"\s*(\"?{re.escape(key)}\"?\s*=|\[\[?{re.escape(key)}\]\]?\s*$)", line):
                start = number
                break
        if value is not None and start:
            for number in range(start, len(self.lines) + 1):
                if f'"{value}"' in self.lines[number - 1] or f"'{value}'" in self.lines[number - 1]:
                    return number
        return start or 1

    def error(self, line: int, what: str) -> UsageError:
        return UsageError(f"{self.path}:{line}: {what}")


def load_matrix(path: str | Path) -> Matrix:
    """Read and check a matrix file.

    :raises UsageError: unreadable file, bad TOML, unknown key/model/draft/hardware/release,
        wrong type, or an empty matrix — always ``FILE:LINE: what``.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"matrix file {path} does not exist; see examples/nightly-matrix.toml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"matrix file {path} is unreadable: {exc}") from exc
    where = _Located(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line = int(match.group(1)) if match else max(1, len(text.splitlines()))  # "(at end of document)"
        message = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        raise where.error(line, f"not valid TOML: {message}") from None
    for key in data:
        if key not in _KEYS:
            close = difflib.get_close_matches(key, sorted(_KEYS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise where.error(where.line_of(key), f"unknown key '{key}'{hint}; keys: {', '.join(sorted(_KEYS))}")

    def typed(key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        value = data.get(key, default)
        if value is not default and (not isinstance(value, kind) or (isinstance(value, bool) and kind is int)):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise where.error(where.line_of(key), f"'{key}' must be {names.replace('str', 'a string').replace('list', 'a list')}"
                                                  f", not {type(value).__name__} {value!r}")
        return value

    def names(key: str, default: list[str] | None = None) -> list[str]:
        value = typed(key, (list, str), default)
        if value is None:
            raise where.error(1, f"'{key}' is missing: list at least one, e.g. {key} = [...]")
        values = [value] if isinstance(value, str) else value
        for item in values:
            if not isinstance(item, str):
                raise where.error(where.line_of(key), f"'{key}' must list strings, not {type(item).__name__} {item!r}")
        if not values:
            raise where.error(where.line_of(key), f"'{key}' is empty: the matrix would have no cells")
        return list(values)

    name = typed("name", str, path.stem)
    strategy = typed("strategy", str, "quick")
    if strategy.endswith(".toml") and not Path(strategy).is_absolute():
        strategy = str((path.parent / strategy).resolve())  # relative to the matrix file, not the cwd
    seed = typed("seed", int, None)
    budget = typed("budget", int, None)
    jobs = typed("jobs", int, None)
    shrink = typed("shrink", bool, False)
    repo = typed("repo", str, None)
    if repo is not None:
        repo = str((path.parent / Path(repo).expanduser()).resolve())  # relative to the matrix file
        if not Path(repo).is_dir():
            raise where.error(where.line_of("repo"), f"'repo' is {repo}, which is not a directory: "
                                                     "name your SGLang clone (git clone https://github.com/sgl-project/sglang)")
    releases = _releases(names("releases"), where)
    models = names("models", ["deepseek-v3"])
    for model in models:
        if model not in profiles.model_names():
            raise where.error(where.line_of("models", model), _unknown("model", model, profiles.model_names(), "models"))
    drafts: list[str | None] = []
    for draft_name in names("drafts", ["eagle3"]):
        if draft_name != "none" and draft_name not in profiles.draft_names():
            raise where.error(where.line_of("drafts", draft_name),
                              _unknown("draft", draft_name, [*profiles.draft_names(), "none"], "drafts"))
        drafts.append(None if draft_name == "none" else draft_name)
    boxes: list[tuple[str, int]] = []
    for box in names("hardware", [f"{profiles.DEFAULT_HARDWARE}x{profiles.DEFAULT_GPUS}"]):
        match = re.fullmatch(r"(.+?)(?:x(\d+))?", box)
        assert match is not None
        hardware, gpus = match.group(1), int(match.group(2) or profiles.DEFAULT_GPUS)
        if hardware not in [*profiles.hardware_names(), "none"]:
            raise where.error(where.line_of("hardware", box),
                              _unknown("hardware profile", hardware, [*profiles.hardware_names(), "none"], "hardware"))
        if gpus < 1:
            raise where.error(where.line_of("hardware", box), f"'{box}': a box needs at least one GPU")
        boxes.append((hardware, gpus))
    excludes = data.get("exclude", [])
    if not isinstance(excludes, list) or not all(isinstance(e, dict) for e in excludes):
        raise where.error(where.line_of("exclude"), "'exclude' must be [[exclude]] tables")
    for exclude in excludes:
        for key in exclude:
            if key not in _EXCLUDE_KEYS:
                raise where.error(where.line_of(key), f"unknown key '{key}' in [[exclude]]; keys: "
                                                      f"{', '.join(sorted(_EXCLUDE_KEYS))}")
    cells = []
    for release in releases:
        for model in models:
            for draft in drafts:
                for hardware, gpus in boxes:
                    cell = Cell(release, model, draft, hardware, gpus)
                    if not any(_matches(cell, e) for e in excludes):
                        cells.append(cell)
    if not cells:
        raise where.error(where.line_of("exclude") if excludes else 1, "every cell is excluded: the matrix is empty")
    return Matrix(str(path), name, strategy, seed, budget, shrink, jobs, tuple(cells), repo)


def _unknown(kind: str, name: str, valid: list[str], key: str) -> str:
    close = difflib.get_close_matches(name, valid, n=2, cutoff=0.5)
    hint = f" (closest: {', '.join(close)})" if close else ""
    return f"unknown {kind} '{name}' in {key}{hint}; valid: {', '.join(valid)}"


def _matches(cell: Cell, exclude: dict[str, Any]) -> bool:
    values = {"release": cell.release, "model": cell.model, "draft": cell.draft or "none",
              "hardware": f"{cell.hardware}x{cell.gpus}"}
    return all(str(v) in (values[k], values[k].split("x")[0]) for k, v in exclude.items())


def _releases(values: list[str], where: _Located) -> list[str]:
    """Expand ``installed``, ``known``, ``newest:N`` and ``A..B`` ranges; check each release."""
    known = sorted(set(environments.known_releases()) | set(environments.installed()), key=environments.version_key)
    out: list[str] = []
    for value in values:
        line = where.line_of("releases", value)
        if value == "installed":
            found = environments.installed()
            if not found:
                raise where.error(line, "'installed': no release is installed; run: bisect-spec env install 0.5.23")
            out += found
        elif value == "known":
            out += known
        elif value.startswith("newest:"):
            count = value.removeprefix("newest:")
            if not count.isdigit() or int(count) < 1:
                raise where.error(line, f"'{value}': write newest:N with N ≥ 1")
            out += known[-int(count):]
        elif ".." in value:
            lo, _, hi = value.partition("..")
            for end in (lo, hi):
                if end and end not in known:
                    raise where.error(line, f"'{end}' in '{value}' is not a known SGLang release; "
                                            f"known: {known[0]} … {known[-1]}")
            lo_key = environments.version_key(lo) if lo else (-1,)
            hi_key = environments.version_key(hi) if hi else (10**9,)
            out += [r for r in known if lo_key <= environments.version_key(r) <= hi_key]
        else:
            try:
                environments.check_release_name(value)
            except UsageError as exc:
                raise where.error(line, str(exc)) from None
            out.append(value)
    unique = sorted(dict.fromkeys(out), key=environments.version_key)
    return unique

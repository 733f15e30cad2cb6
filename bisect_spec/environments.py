"""Evaluation environments: one per SGLang release, sharing one heavy base.

Layout under :func:`home` (``$BISECT_SPEC_HOME``, default ``~/.cache/bisect-spec``)::

    envs/base-py311/            one venv: torch 2.13.0 (CPU), triton, transformers, ...
    envs/sglang-0.5.23/site/    pip install --no-deps --target: sglang + release pins
    envs/sglang-0.5.23/env.json written last: an environment without it is incomplete

A worker runs the base venv's Python with the release's ``site`` first on
``PYTHONPATH``, so the overlay's sglang/transformers shadow the base. A further release
costs 35-130 MB and seconds, not another 2.3 GB. Pins live in ``data/releases.json``.

Torch is never left to pip's resolver: it is installed alone as ``torch==2.13.0`` and
every later install runs with a constraint pinning it, so no CUDA build is pulled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from . import worker
from .errors import ReleaseError, UsageError

CURRENT = "current"
#: File caching a release's flag table; bump the suffix when the table's shape changes.
FLAGS_CACHE = "flags-v4.json"
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)*(\.post\d+|rc\d+)?$")


def home() -> Path:
    """Root of bisect-spec's caches (environments, profiles materialised for runs)."""
    return Path(os.environ.get("BISECT_SPEC_HOME") or Path.home() / ".cache" / "bisect-spec")


def pins() -> dict[str, Any]:
    """The recorded dependency pins (``data/releases.json``)."""
    data: dict[str, Any] = json.loads(resources.files("bisect_spec").joinpath("data/releases.json").read_text())
    return data


def known_releases() -> list[str]:
    """Releases whose pins are recorded, oldest first."""
    return sorted(pins()["releases"], key=version_key)


def version_key(version: str) -> tuple[int, ...]:
    """Sort key for release strings: 0.5.9 < 0.5.10 < 0.5.10.post1 < 0.5.11."""
    parts: list[int] = []
    for piece in version.split("."):
        if piece.startswith("post") and piece[4:].isdigit():
            parts.append(int(piece[4:]))  # 0.5.10.post1 = (0, 5, 10, 1) > (0, 5, 10)
            continue
        match = re.match(r"(\d+)", piece)
        parts.append(int(match.group(1)) if match else -1)
    return tuple(parts)


@dataclass(frozen=True)
class Environment:
    """Where and how a worker for one release runs."""

    release: str
    python: str
    pythonpath: tuple[str, ...]
    torchvision_shim: bool
    path: Path | None

    def worker_spec(self, *, hardware: dict[str, Any] | None, gpus: int, log_path: str | None = None,
                    extra_env: tuple[tuple[str, str], ...] = ()) -> worker.WorkerSpec:
        return worker.WorkerSpec(python=self.python, pythonpath=self.pythonpath, hardware=hardware, gpus=gpus,
                                 torchvision_shim=self.torchvision_shim, log_path=log_path, extra_env=extra_env)


def _base_dir() -> Path:
    return home() / "envs" / f"base-py{pins()['python'].replace('.', '')}"


def _release_dir(release: str) -> Path:
    return home() / "envs" / f"sglang-{release}"


def _base_python() -> Path:
    return _base_dir() / "bin" / "python"


def check_release_name(release: str) -> str:
    """Validate a release string; return it."""
    if release == CURRENT or _VERSION.match(release):
        return release
    raise UsageError(f"'{release}' is not an SGLang release: use a version such as 0.5.23, or 'current'")


def installed() -> list[str]:
    """Releases with a complete environment, oldest first."""
    root = home() / "envs"
    if not root.is_dir():
        return []
    found = [p.name.removeprefix("sglang-") for p in root.glob("sglang-*") if (p / "env.json").is_file()]
    return sorted(found, key=version_key)


def describe(release: str) -> dict[str, Any]:
    """What ``env.json`` recorded for an installed release."""
    data: dict[str, Any] = json.loads((_release_dir(release) / "env.json").read_text())
    return data


def get(release: str) -> Environment:
    """The environment of an installed release (or the user's own Python for ``current``).

    :raises ReleaseError: the release is not installed, naming the command that installs it.
    """
    check_release_name(release)
    if release == CURRENT:
        # the user's own Python, with the import path it was given (an unpacked SGLang on PYTHONPATH works)
        inherited = tuple(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        return Environment(CURRENT, sys.executable, inherited, False, None)
    directory = _release_dir(release)
    if not (directory / "env.json").is_file():
        have = list_releases(installed()) or "none"
        raise ReleaseError(f"SGLang {release} is not installed (installed: {have}); run: bisect-spec env install {release}")
    if not _base_python().exists():
        raise ReleaseError(f"the shared base environment is missing ({_base_dir()}); run: bisect-spec env install {release}")
    return Environment(release, str(_base_python()), (str(directory / "site"),), True, directory)


def newest_installed() -> str:
    """The newest installed release; the default everywhere."""
    have = installed()
    if not have:
        newest = pins()["newest"]
        raise ReleaseError(f"no SGLang release is installed; run: bisect-spec env install {newest}")
    return have[-1]


def _pip(python: Path, args: list[str], log_path: Path, progress: Callable[[str], None] | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    def relay(line: str) -> None:
        if progress and line.strip() and not line.lstrip().startswith("WARNING:"):
            progress(line)

    code = worker.run_command([str(python), "-m", "pip", *args], log_path=log_path, env=env, progress=relay)
    if code != 0:
        tail = [line for line in log_path.read_text(errors="replace").splitlines() if "ERROR" in line or "error" in line]
        reason = tail[-1].strip() if tail else f"pip exited with {code}"
        raise ReleaseError(f"installing failed: {reason} (full log: {log_path})")


def ensure_base(progress: Callable[[str], None] | None = None) -> Path:
    """Create the shared base venv if it is missing; return its Python."""
    data = pins()
    base = _base_dir()
    marker = base / "base.json"
    wanted = {"torch": data["torch"], "torchvision": data["torchvision"], "base": data["base"]}
    if marker.is_file() and json.loads(marker.read_text()).get("pins") == wanted:
        return _base_python()
    want_python = tuple(int(x) for x in data["python"].split("."))
    if sys.version_info[:2] != want_python:
        raise ReleaseError(f"evaluation environments need Python {data['python']} (the CPU torch 2.13.0 wheel); "
                           f"run bisect-spec with python{data['python']}")
    base.parent.mkdir(parents=True, exist_ok=True)
    log_path = base.parent / "base-install.log"
    if not _base_python().exists():
        if progress:
            progress(f"creating the shared base environment at {base}")
        if worker.create_venv(sys.executable, base) != 0:
            raise ReleaseError(f"could not create a virtual environment at {base}")
    constraint = base / "constraints.txt"
    constraint.write_text(data["torch"] + "\n")
    if progress:
        progress(f"installing {data['torch']} (CPU build), then {len(data['base'])} pinned packages")
    _pip(_base_python(), ["install", "-q", data["torch"]], log_path, progress)
    _pip(_base_python(), ["install", "-q", "-c", str(constraint), *data["base"]], log_path, progress)
    _pip(_base_python(), ["install", "-q", "--no-deps", data["torchvision"]], log_path, progress)
    marker.write_text(json.dumps({"pins": wanted, "installed_at": time.time()}, indent=2))
    return _base_python()


def install(release: str, progress: Callable[[str], None] | None = None, *, verify: bool = True) -> Environment:
    """Install (or repair) the environment of ``release``; a no-op when complete.

    :raises ReleaseError: pip or the import check failed; nothing half-built is left marked complete.
    """
    check_release_name(release)
    if release == CURRENT:
        return get(CURRENT)
    directory = _release_dir(release)
    if (directory / "env.json").is_file():
        return get(release)
    python = ensure_base(progress)
    overlay: list[str] = list(pins()["releases"].get(release, {}).get("overlay", []))
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.perf_counter()
    if progress:
        progress(f"installing sglang=={release} {' '.join(overlay)}".rstrip())
    _pip(python, ["install", "-q", "--no-deps", "--no-compile", "--upgrade", "--target", str(staging / "site"),
                  f"sglang=={release}", *overlay], staging / "install.log", progress)
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    environment = Environment(release, str(python), (str(directory / "site"),), True, directory)
    info: dict[str, Any] = {}
    if verify:
        if progress:
            progress(f"checking that sglang {release} imports")
        probe = worker.WorkerProcess(environment.worker_spec(hardware=None, gpus=1, log_path=str(directory / "import-check.log")))
        try:
            info = probe.start()
            (directory / FLAGS_CACHE).write_text(json.dumps(probe.request({"op": "flags"}, 120)["flags"]))
        except Exception as exc:
            raise ReleaseError(f"sglang {release} installed but does not import: {exc}") from exc
        finally:
            probe.close()
    size = sum(f.stat().st_size for f in (directory / "site").rglob("*") if f.is_file())
    record = {"release": release, "overlay": overlay, "pinned": release in pins()["releases"],
              "install_seconds": round(time.perf_counter() - started, 1), "size_bytes": size, "worker_info": info}
    (directory / "env.json").write_text(json.dumps(record, indent=2))
    return environment


def remove(release: str) -> None:
    """Remove one release's overlay (the shared base stays)."""
    check_release_name(release)
    directory = _release_dir(release)
    if not directory.exists():
        raise ReleaseError(f"SGLang {release} is not installed (installed: {', '.join(installed()) or 'none'})")
    shutil.rmtree(directory)


def cached_flag_table(release: str) -> list[dict[str, Any]] | None:
    """The flag table recorded for an installed release, or None if not recorded yet."""
    directory = _release_dir(release)
    path = directory / FLAGS_CACHE
    if not path.is_file():
        return None
    table: list[dict[str, Any]] = json.loads(path.read_text())
    return table


def list_releases(releases: list[str], most: int = 4) -> str:
    """Releases for a one-line message: all of them when few, else the ends and the count."""
    if len(releases) <= most:
        return ", ".join(releases)
    return f"{', '.join(releases[:2])}, …, {releases[-1]} ({len(releases)} installed releases)"


def releases_with_flag(flag: str, *, exclude: str = "") -> list[str]:
    """Installed releases whose parser knows ``flag`` (for "it exists in ..." hints)."""
    found = []
    for release in installed():
        table = cached_flag_table(release) if release != exclude else None
        if table and any(flag in entry["aliases"] for entry in table):
            found.append(release)
    return found

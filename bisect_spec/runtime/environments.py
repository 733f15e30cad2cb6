"""Evaluation environments: one per SGLang release, sharing one heavy base.

Layout under :func:`home` (``$BISECT_SPEC_HOME``, default ``~/.cache/bisect-spec``)::

    envs/base-py311/                    one venv: torch 2.13.0 (CPU), triton, transformers, ...
    envs/layers/transformers-4.57.1/    a shared layer (transformers + its tokenizers/hub pins)
    envs/sglang-0.5.23/site/            pip install --no-deps --target: sglang + release pins
    envs/sglang-0.5.23/env.json         written last: an environment without it is incomplete
    envs/sglang-0.4.5/unavailable.json  a release that cannot be built or imported here

A worker runs the base venv's Python with the release's ``site`` and then its layers
first on ``PYTHONPATH``, so they shadow the base. A further release costs 6-130 MB and
seconds, not another 2.3 GB; releases needing the same transformers share one layer.
Pins live in ``data/releases.json``.

A release whose environment cannot be built or imported is recorded as unavailable
(with a one-line reason) and later calls skip it at once, like ``git bisect skip``,
unless a retry is forced.

Torch is never left to pip's resolver: it is installed alone as ``torch==2.13.0`` and
every later install runs with a constraint pinning it, so no CUDA build is pulled.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from bisect_spec.errors import ReleaseError, ReleaseUnavailable, UsageError
from bisect_spec.runtime import processes, worker
from bisect_spec.runtime.files import write_if_changed
from bisect_spec.versions import version_key as version_key

CURRENT = "current"
#: The modules that build a release's flag table (the worker's ``flags`` operation: ``evaluator.flags``
#: and what it calls; keep this list with it): its cache file is named after their digest, so a change to
#: the data flow never reads an older table.
FLAG_TABLE_MODULES = ("evaluator.py", "data_flow.py", "launch")


def flags_cache_name() -> str:
    """The file caching a release's flag table (:data:`FLAG_TABLE_MODULES`)."""
    from bisect_spec.runtime.store import inside_digest

    return f"flags-{inside_digest(FLAG_TABLE_MODULES)[:12]}.json"


_VERSION = re.compile(r"^\d+\.\d+(\.\d+)*(\.post\d+|rc\d+)?$")
#: A final release (``0.5.9``, ``0.5.1.post3``): not a pre-release (``rc``) or a development build.
_FINAL_RELEASE = re.compile(r"\d+(\.\d+)*(\.post\d+)?")


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


def available_releases() -> list[str]:
    """Every release with recorded pins, oldest first (what ranges and ``--all`` cover).

    Some may turn out unavailable here: :func:`ensure` says so per release.
    """
    return known_releases()


def newer_than_pinned() -> list[str]:
    """Releases the package index has that are newer than the pinned table, oldest first (none offline).

    A nightly installs them with ``env install --all --newer``: a new SGLang release meets the
    release smoke the day it appears. Pre-releases (``rc``, ``dev``) are left out.
    """
    newest = version_key(known_releases()[-1])
    found = index_versions() or []
    return sorted((v for v in found if _FINAL_RELEASE.fullmatch(v) and version_key(v) > newest),
                  key=version_key)


def first_release_knowing(architecture: str) -> str | None:
    """The oldest release with a model class for ``architecture`` (measured from the wheels)."""
    found = pins().get("architectures_first_known", {}).get(architecture)
    return str(found) if found else None


def select_releases(specs: list[str] | tuple[str, ...], *, all_releases: bool = False) -> list[str]:
    """Expand release arguments into releases, oldest first, without duplicates.

    Each spec is a release (``0.5.9``), or an inclusive range ``A..B`` over the releases
    with recorded pins (``0.4.6..0.5.23``; an open end, ``..0.5.3`` or ``0.5.13..``,
    runs to the oldest/newest). ``all_releases`` adds every release with recorded pins.

    :raises UsageError: a malformed release or a range whose ends are out of order.
    """
    known = available_releases()
    chosen: set[str] = set(known) if all_releases else set()
    for spec in specs:
        if ".." in spec:
            low, high = spec.split("..", 1)
            low, high = low or known[0], high or known[-1]
            check_release_name(low)
            check_release_name(high)
            if version_key(low) > version_key(high):
                raise UsageError(f"range {spec} runs backwards: write {high}..{low}")
            inside = [r for r in known if version_key(low) <= version_key(r) <= version_key(high)]
            if not inside:
                raise UsageError(f"no release with recorded pins lies in {spec} (known: {known[0]} ... {known[-1]})")
            chosen.update(inside)
        else:
            if check_release_name(spec) == CURRENT:
                raise UsageError("'current' is the running Python's own SGLang: there is nothing to install")
            if spec not in known and not is_installed(spec):  # installed: it exists
                check_release_exists(spec)
            chosen.add(spec)
    return sorted(chosen, key=version_key)


#: PyPI's torchvision is a CUDA build whose C ops fail beside the CPU torch; declaring the two op
#: schemas it registers fakes for lets it import (as ``inside/worker_main._torchvision_shim`` does).
#: The version-skew shims are applied too, as in a worker (``inside/version_shims.py``).
_TORCHVISION_SITECUSTOMIZE = '''"""bisect-spec: let PyPI's torchvision import beside the CPU torch of this environment."""
try:
    import torch

    _LIBRARY = torch.library.Library("torchvision", "DEF")
    _LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")
except Exception:
    pass
try:  # the version-skew shims workers apply (torch 2.13 and triton 3.9 beside older releases)
    import _bisect_spec_version_shims

    _bisect_spec_version_shims.apply()
except Exception:
    pass
'''


@dataclass(frozen=True)
class Environment:
    """Where and how a worker for one release runs."""

    release: str
    python: str
    pythonpath: tuple[str, ...]
    torchvision_shim: bool
    path: Path | None

    def interpreter(self) -> str:
        """A ``python`` that runs with this release importable, as workers do (``env python``, ``env run``).

        For an installed release a small launcher script in its directory sets the import path
        (the overlay, then its layers) and runs the shared base interpreter; SGLang then imports
        exactly as in an evaluation worker. ``current`` is this Python.
        """
        if self.path is None:
            return self.python
        launcher = self.path / "bin" / "python"
        shim = self.path / "bin" / "shim"
        path = os.pathsep.join([str(shim), *self.pythonpath] if self.torchvision_shim else self.pythonpath)
        if self.torchvision_shim:
            write_if_changed(shim / "sitecustomize.py", _TORCHVISION_SITECUSTOMIZE)
            shims = Path(__file__).parent.parent / "inside" / "version_shims.py"
            write_if_changed(shim / "_bisect_spec_version_shims.py", shims.read_text())
        text = ("#!/bin/sh\n# bisect-spec: SGLang " + self.release + " importable, as in an evaluation worker\n"
                f'PYTHONPATH="{path}${{PYTHONPATH:+:$PYTHONPATH}}" PYTHONNOUSERSITE=1 exec "{self.python}" "$@"\n')
        write_if_changed(launcher, text, mode=0o755)
        return str(launcher)

    def worker_spec(self, *, hardware: dict[str, Any] | None, gpus: int, log_path: str | None = None,
                    extra_env: tuple[tuple[str, str], ...] = ()) -> worker.WorkerSpec:
        return worker.WorkerSpec(python=self.python, pythonpath=self.pythonpath, hardware=hardware, gpus=gpus,
                                 torchvision_shim=self.torchvision_shim, log_path=log_path, extra_env=extra_env)


def _base_dir() -> Path:
    return home() / "envs" / f"base-py{pins()['python'].replace('.', '')}"


def release_dir(release: str) -> Path:
    """Where ``release``'s environment lives (it may not be installed)."""
    return _release_dir(release)


def _release_dir(release: str) -> Path:
    return home() / "envs" / f"sglang-{release}"


def _layer_dir(layer: str) -> Path:
    return home() / "envs" / "layers" / layer


@contextlib.contextmanager
def _held(name: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``envs/.locks/NAME.lock`` while it lasts: installs of several releases at once (in
    threads of one ``env install --jobs``, or in separate processes) install and byte-compile a shared layer, or
    the base, once, one at a time."""
    locks = home() / "envs" / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


UNAVAILABLE = "unavailable.json"


def is_installed(release: str) -> bool:
    """Whether ``release`` has a complete environment (one ``stat``; no import check)."""
    return release == CURRENT or (_release_dir(release) / "env.json").is_file()


def unavailable_reason(release: str) -> str | None:
    """Why ``release`` was found unavailable here, or None if it was not.

    Recorded in ``data/releases.json`` (measured once for everyone) or in the release's
    directory (found on this machine).
    """
    recorded = pins()["releases"].get(release, {}).get("unavailable")
    if recorded:
        return str(recorded)
    marker = _release_dir(release) / UNAVAILABLE
    if marker.is_file():
        with contextlib.suppress(ValueError):
            return str(json.loads(marker.read_text()).get("reason") or "unknown reason")
    return None


def unavailable() -> dict[str, str]:
    """Releases recorded as unavailable, with their reasons, oldest first."""
    root = home() / "envs"
    found = [p.name.removeprefix("sglang-") for p in root.glob("sglang-*") if (p / UNAVAILABLE).is_file()] \
        if root.is_dir() else []
    found += [r for r, entry in pins()["releases"].items() if entry.get("unavailable")]
    return {r: unavailable_reason(r) or "" for r in sorted(set(found), key=version_key)}


def _mark_unavailable(release: str, reason: str) -> ReleaseUnavailable:
    directory = _release_dir(release)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / UNAVAILABLE).write_text(json.dumps({"status": "unavailable", "release": release, "reason": reason,
                                                     "recorded_at": time.time()}, indent=2))
    return ReleaseUnavailable(release, reason)


def _base_python() -> Path:
    return _base_dir() / "bin" / "python"


_INDEX_VERSIONS: list[list[str]] = []


def index_versions() -> list[str] | None:
    """The SGLang versions the package index has (``pip index versions sglang``), or None offline.

    Asked once per process, and only for a release the pinned table does not hold: one newer than it (nightlies
    meet new releases first) or a pre-release (``0.5.0rc0``), which the table leaves out.
    """
    if not _INDEX_VERSIONS:
        lines: list[str] = []
        code = processes.run_command([sys.executable, "-m", "pip", "index", "versions", "sglang", "--pre",
                                   "--disable-pip-version-check"], progress=lines.append)
        found = next((line.split(":", 1)[1] for line in lines if line.startswith("Available versions:")), None)
        if code != 0 or found is None:
            return None
        _INDEX_VERSIONS.append([v.strip() for v in found.split(",") if v.strip()])
    return _INDEX_VERSIONS[0]


def check_release_exists(release: str) -> None:
    """Refuse a release that does not exist, in one line, before anything is installed.

    A final release inside the pinned table's span must be in it (no pip call); a newer one, or a
    pre-release (the table leaves them out), must be on the package index.

    :raises UsageError: no such release. :raises ReleaseError: the index cannot be reached.
    """
    if release == CURRENT or release in pins()["releases"]:
        return
    known = known_releases()
    if version_key(release) < version_key(known[0]):
        raise UsageError(f"SGLang {release} is older than the releases bisect-spec evaluates ({known[0]} … {known[-1]}); "
                         f"pick one of them with --sglang")
    pre_release = "rc" in release  # on the index, left out of the pinned table: the index decides, as for a newer one
    if version_key(release) <= version_key(known[-1]) and not pre_release:
        after = next((i for i, r in enumerate(known) if version_key(r) > version_key(release)), len(known))
        close = known[max(0, after - 2):after + 2]  # its neighbours in version order, two each side
        raise UsageError(f"SGLang {release} is not a release (releases near it: {', '.join(close)}); "
                         "pick one of them with --sglang")
    versions = index_versions()
    if versions is None:
        what = "a pre-release" if pre_release else f"newer than the pinned releases (newest {known[-1]})"
        raise ReleaseError(f"SGLang {release} is {what} and the package index cannot be reached to check it; "
                           "retry online, or pick an installed release")
    if release not in versions:
        finals = [v for v in versions if _FINAL_RELEASE.fullmatch(v)]
        newest = max(finals, key=version_key) if finals else known[-1]
        raise UsageError(f"SGLang {release} is not on the package index (newest there: {newest}); pick another --sglang")


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

    A source tree's label (:func:`bisect_spec.runtime.sources.register`) is the business of
    :func:`bisect_spec.runtime.sources.environment_for`, which takes both.

    :raises ReleaseError: the release is not installed, naming the command that installs it.
    """
    if release != CURRENT and not _VERSION.match(release):
        raise UsageError(f"'{release}' is not an SGLang release: use a version such as 0.5.23, 'current', "
                         "git:PATH@REV (a commit of your clone) or path:DIR (a source tree)")
    if release == CURRENT:
        # the user's own Python, with the import path it was given (an unpacked SGLang on PYTHONPATH works)
        inherited = tuple(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        return Environment(CURRENT, sys.executable, inherited, False, None)
    directory = _release_dir(release)
    if not (directory / "env.json").is_file():
        reason = unavailable_reason(release)
        if reason is not None:
            raise ReleaseUnavailable(release, reason)
        check_release_exists(release)
        have = spans(installed()) or "none"
        raise ReleaseError(f"SGLang {release} is not installed (installed: {have}); run: bisect-spec env install {release}")
    if not _base_python().exists():
        raise ReleaseError(f"the shared base environment is missing ({_base_dir()}); run: bisect-spec env install {release}")
    layers = describe(release).get("layers", [])
    return Environment(release, str(_base_python()), _import_path(directory, layers), True, directory)


def _import_path(directory: Path, layers: list[str]) -> tuple[str, ...]:
    return (str(directory / "site"), *(str(_layer_dir(layer) / "site") for layer in layers))


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

    code = processes.run_command([str(python), "-m", "pip", *args], log_path=log_path, env=env, progress=relay)
    if code != 0:
        tail = [line for line in log_path.read_text(errors="replace").splitlines() if "ERROR" in line or "error" in line]
        reason = tail[-1].strip() if tail else f"pip exited with {code}"
        raise ReleaseError(f"installing failed: {reason} (full log: {log_path})")


#: written into a site once its sources are byte-compiled (see :func:`_byte_compile`)
_COMPILED = ".bisect-spec-compiled"


def _byte_compile(python: Path, site: Path, progress: Callable[[str], None] | None = None) -> None:
    """Byte-compile an installed site once, with the interpreter its workers run.

    pip installs releases and layers with ``--no-compile`` and workers run with
    ``PYTHONDONTWRITEBYTECODE``, so until this, every worker start compiled the SGLang and
    transformers modules it imports from source again. Measured on 0.5.23: a worker's start
    and first evaluation 8.8 s → 7.0 s (0.5.9: 7.0 s → 5.8 s); a release compiles in about 5 s
    on two cores. Files that do not compile on this Python are skipped (compileall goes on), as
    pip skips them; a site whose compile was cut short is compiled again next time.
    """
    if (site / _COMPILED).is_file() or not site.is_dir():
        return
    if progress:
        progress(f"byte-compiling {site.parent.name}")
    processes.run_command([str(python), "-m", "compileall", "-q", "-j", "0", str(site)], log_path=site.parent / "compile.log")
    (site / _COMPILED).write_text("compileall\n")


def _byte_compile_release(python: Path, directory: Path, layers: list[str],
                          progress: Callable[[str], None] | None) -> None:
    """Byte-compile a release's own site and its layers' (each once: :func:`_byte_compile`); an install
    from before sites were compiled is compiled here too, on its next ``env install``."""
    _byte_compile(python, directory / "site", progress)
    for layer in layers:
        with _held(f"layer-{layer}"):
            _byte_compile(python, _layer_dir(layer) / "site", progress)


def ensure_base(progress: Callable[[str], None] | None = None) -> Path:
    """Create the shared base venv if it is missing; return its Python."""
    data = pins()
    marker = _base_dir() / "base.json"
    wanted = {"torch": data["torch"], "torchvision": data["torchvision"], "base": data["base"]}
    if marker.is_file() and json.loads(marker.read_text()).get("pins") == wanted:
        return _base_python()
    with _held("base"):
        return _ensure_base(data, progress)


def _ensure_base(data: dict[str, Any], progress: Callable[[str], None] | None) -> Path:
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
        if processes.create_venv(sys.executable, base) != 0:
            raise ReleaseError(f"could not create a virtual environment at {base}")
    constraint = base / "constraints.txt"
    constraint.write_text(data["torch"] + "\n")
    if progress:
        progress(f"installing {data['torch']} (CPU build), then {len(data['base'])} pinned packages")
    # byte-compiled once at the end, on every core: pip compiles file by file on one (torch alone: 26 s against 7 s
    # without, and 2 s for compileall -j 0 on two cores)
    _pip(_base_python(), ["install", "-q", "--no-compile", data["torch"]], log_path, progress)
    _pip(_base_python(), ["install", "-q", "--no-compile", "-c", str(constraint), *data["base"]], log_path, progress)
    _pip(_base_python(), ["install", "-q", "--no-compile", "--no-deps", data["torchvision"]], log_path, progress)
    if progress:
        progress("byte-compiling the shared base environment")
    for site in sorted(base.glob("lib/python*/site-packages")):
        processes.run_command([str(_base_python()), "-m", "compileall", "-q", "-j", "0", str(site)], log_path=log_path)
    marker.write_text(json.dumps({"pins": wanted, "installed_at": time.time()}, indent=2))
    return _base_python()


def ensure(release: str, progress: Callable[[str], None] | None = None) -> Environment:
    """The environment of ``release``, installing it first if missing.

    :raises ReleaseUnavailable: it cannot be built or imported here (recorded; cheap to ask again).
    :raises ReleaseError: installing failed for a passing reason (network): nothing is recorded.
    """
    if is_installed(release):
        return get(release)
    return install(release, progress)


def _ensure_layer(layer: str, python: Path, progress: Callable[[str], None] | None) -> None:
    """Install a shared layer once (its ``layer.json`` is written last)."""
    directory = _layer_dir(layer)
    if (directory / "layer.json").is_file():
        return
    with _held(f"layer-{layer}"):
        if not (directory / "layer.json").is_file():  # not installed meanwhile by another install
            _install_layer(layer, directory, python, progress)


def _install_layer(layer: str, directory: Path, python: Path, progress: Callable[[str], None] | None) -> None:
    packages: list[str] = list(pins()["layers"][layer])
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if progress:
        progress(f"installing the shared layer {layer}: {' '.join(packages)}")
    started = time.perf_counter()
    _pip(python, ["install", "-q", "--no-deps", "--no-compile", "--upgrade", "--target", str(staging / "site"),
                  *packages], staging / "install.log", progress)
    size = sum(f.stat().st_size for f in (staging / "site").rglob("*") if f.is_file())
    (staging / "layer.json").write_text(json.dumps({"layer": layer, "packages": packages, "size_bytes": size,
                                                    "install_seconds": round(time.perf_counter() - started, 1)}))
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)


#: pip's words for "this version does not exist for this Python", a permanent condition.
_NOT_BUILDABLE = ("No matching distribution", "Could not find a version", "ResolutionImpossible",
                  "is not a supported wheel", "requires a different Python")


def install(release: str, progress: Callable[[str], None] | None = None, *, verify: bool = True,
            retry: bool = False) -> Environment:
    """Install (or repair) the environment of ``release``; a no-op when complete.

    :param retry: try again even though the release was recorded as unavailable.
    :raises ReleaseUnavailable: the release cannot be built or does not import here; the
        reason is recorded so the next call answers at once (unless ``retry``).
    :raises ReleaseError: pip failed for another reason (network): nothing is recorded.
    """
    check_release_name(release)
    if release == CURRENT:
        return get(CURRENT)
    directory = _release_dir(release)
    if (directory / "env.json").is_file():
        add_missing_layers(release, progress)
        if _base_python().exists():
            _byte_compile_release(_base_python(), directory, list(describe(release).get("layers", [])), progress)
        return get(release)
    with _held(f"release-{release}"):  # another install of it (a thread of ``--jobs``, another process) goes first
        if (directory / "env.json").is_file():
            return get(release)
        return _install_new(release, directory, progress, verify=verify, retry=retry)


def _install_new(release: str, directory: Path, progress: Callable[[str], None] | None, *, verify: bool,
                 retry: bool) -> Environment:
    """:func:`install` of a release not installed yet, under its lock."""
    reason = unavailable_reason(release)
    recorded_in_pins = bool(pins()["releases"].get(release, {}).get("unavailable"))
    if reason is not None and (not retry or recorded_in_pins):
        raise ReleaseUnavailable(release, reason)
    check_release_exists(release)
    python = ensure_base(progress)
    entry: dict[str, Any] = pins()["releases"].get(release, {})
    overlay: list[str] = list(entry.get("overlay", []))
    layers: list[str] = list(entry.get("layers", []))
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.perf_counter()
    try:
        for layer in layers:
            _ensure_layer(layer, python, progress)
        if progress:
            progress(f"installing sglang=={release} {' '.join(overlay)}".rstrip())
        _pip(python, ["install", "-q", "--no-deps", "--no-compile", "--upgrade", "--target", str(staging / "site"),
                      f"sglang=={release}", *overlay], staging / "install.log", progress)
    except ReleaseError as exc:
        log = staging / "install.log"
        offline = log.is_file() and "(from versions: none)" in log.read_text(errors="replace")
        shutil.rmtree(staging, ignore_errors=True)
        # "(from versions: none)": pip saw no index at all (offline), which says nothing about the release
        if any(words in str(exc) for words in _NOT_BUILDABLE) and not offline:
            reason = re.sub(r"^installing failed: (ERROR: )?| \(full log: .*\)$", "", str(exc))
            raise _mark_unavailable(release, f"cannot be built: {reason}") from exc
        raise
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    _byte_compile_release(python, directory, layers, progress)
    environment = Environment(release, str(python), _import_path(directory, layers), True, directory)
    info: dict[str, Any] = {}
    if verify:
        if progress:
            progress(f"checking that sglang {release} imports")
        probe = worker.WorkerProcess(environment.worker_spec(hardware=None, gpus=1, log_path=str(directory / "import-check.log")))
        try:
            info = probe.start()
            record_flag_table(directory, probe.request({"op": "flags"}, 120)["flags"])
        except Exception as exc:
            shutil.rmtree(directory / "site", ignore_errors=True)  # keep the logs, not the files
            raise _mark_unavailable(release, f"does not import: {_one_line(exc)}") from exc
        finally:
            probe.close()
    size = sum(f.stat().st_size for f in (directory / "site").rglob("*") if f.is_file())
    record = {"release": release, "overlay": overlay, "layers": layers, "pinned": release in pins()["releases"],
              "install_seconds": round(time.perf_counter() - started, 1), "size_bytes": size, "worker_info": info}
    (directory / UNAVAILABLE).unlink(missing_ok=True)
    (directory / "env.json").write_text(json.dumps(record, indent=2))
    return environment


def add_missing_layers(release: str, progress: Callable[[str], None] | None = None) -> list[str]:
    """Give an installed release the layers its pins name but its install predates.

    Layers are shared and installed once; the release's ``env.json`` then lists them in
    the pinned order (its import path). Nothing in the release's own ``site`` changes.
    This is how a layer added to ``data/releases.json`` reaches existing environments
    (``bisect-spec env install RELEASE`` on an installed release).

    :return: the layers added.
    """
    directory = _release_dir(release)
    record = describe(release)
    have: list[str] = list(record.get("layers", []))
    pinned: list[str] = list(pins()["releases"].get(release, {}).get("layers", []))
    missing = [layer for layer in pinned if layer not in have]
    if not missing:
        return []
    python = ensure_base(progress)
    for layer in missing:
        _ensure_layer(layer, python, progress)
    record["layers"] = [layer for layer in pinned if layer in have or layer in missing] + \
        [layer for layer in have if layer not in pinned]
    record["layers_added"] = sorted({*record.get("layers_added", []), *missing})
    staging = directory / "env.json.tmp"
    staging.write_text(json.dumps(record, indent=2))
    staging.replace(directory / "env.json")
    return missing


def _one_line(exc: BaseException) -> str:
    """The last meaningful line of a worker start failure (the exception, not the traceback)."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    picked = next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)), None)
    return (picked or (lines[0] if lines else type(exc).__name__))[:300]


def size_of(release: str) -> int:
    """Bytes the release's own overlay and its layers take (layers are shared)."""
    info = describe(release)
    layers = sum(int(json.loads((_layer_dir(layer) / "layer.json").read_text()).get("size_bytes", 0))
                 for layer in info.get("layers", []) if (_layer_dir(layer) / "layer.json").is_file())
    return int(info.get("size_bytes", 0)) + layers


def remove(release: str) -> None:
    """Remove one release's overlay (the shared base stays)."""
    check_release_name(release)
    directory = _release_dir(release)
    if not directory.exists():
        raise ReleaseError(f"SGLang {release} is not installed (installed: {', '.join(installed()) or 'none'})")
    shutil.rmtree(directory)  # also forgets an "unavailable" record, so the next install tries again


def record_flag_table(directory: Path, table: list[dict[str, Any]]) -> None:
    """Write a release's flag table as :func:`flags_cache_name`; tables older code recorded go.

    Written whole, then renamed into place: two commands that start on a cold release at once
    both record it, and one may read it while the other writes.
    """
    from bisect_spec.runtime.files import atomic_write

    current = flags_cache_name()
    atomic_write(directory / current, json.dumps(table))
    for older in directory.glob("flags-*.json"):
        if older.name != current:
            older.unlink(missing_ok=True)


def cached_flag_table(release: str, *, current: bool = True) -> list[dict[str, Any]] | None:
    """The flag table recorded for an installed release, or None if not recorded yet.

    :param current: False also takes a table an earlier bisect-spec recorded (the newest): its options
        and aliases are the parser's, whatever the data flow added since (enough for naming releases).
    """
    directory = _release_dir(release)
    path = directory / flags_cache_name()
    if not path.is_file() and not current:
        older = sorted(directory.glob("flags-*.json"), key=lambda p: p.stat().st_mtime)
        path = older[-1] if older else path
    if not path.is_file():
        return None
    table: list[dict[str, Any]] = json.loads(path.read_text())
    return table


def spans(releases: list[str]) -> str:
    """Releases as runs over the installed ones: ``0.4.6 ... 0.5.9, 0.5.12``.

    With dozens of releases installed, naming each one makes a hint unreadable; a run
    ``A ... B`` means every installed release from A to B.
    """
    order = {release: index for index, release in enumerate(installed())}
    runs: list[list[str]] = []
    for release in sorted(releases, key=version_key):
        if runs and release in order and runs[-1][-1] in order and order[release] == order[runs[-1][-1]] + 1:
            runs[-1].append(release)
        else:
            runs.append([release])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}, {run[1]}" if len(run) == 2 else f"{run[0]} ... {run[-1]}"
                     for run in runs)


def releases_with_flag(flag: str, *, exclude: str = "") -> list[str]:
    """Installed releases whose parser knows ``flag`` (for "it exists in ..." hints)."""
    found = []
    for release in installed():
        table = cached_flag_table(release, current=False) if release != exclude else None
        if table and any(flag in entry["aliases"] for entry in table):
            found.append(release)
    return found

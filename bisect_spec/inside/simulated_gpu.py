"""Make an imported SGLang believe it runs on a given NVIDIA GPU box.

Runs *inside* an evaluation worker only, after SGLang has been imported honestly
on the CPU (faking CUDA before the import makes modules reach for ``sgl_kernel``).
Standard library and torch only: the worker's environment has no click/hypothesis.

Why each piece exists:

* ``torch.cuda.*`` probes and ``torch.version.cuda``: argument resolution asks for
  device count, capability, name, properties and free memory.
* ``nvidia-smi``: ``get_nvgpu_memory_capacity`` shells out on *every* resolution;
  we answer it from the profile instead of starting a process.
* ``lru_cache``d hardware answers (~40 in recent releases) and the lazy platform
  singleton were computed on the CPU during import: they are cleared/reset so the
  next call recomputes them against the simulated GPU.

* **The packages of a CUDA install.** A real box that runs SGLang X has the GPU packages
  X pins (``flashinfer_python==0.7.2``, ``sglang-kernel``, ``flash-attn-4`` …: read from
  the release's own ``Requires-Dist``). Availability checks (``importlib.util.find_spec``)
  and version lookups (``importlib.metadata.version``) answer as they would there, so
  defaults such as "flashinfer when available, else triton" resolve as on the box. Their
  code is never imported: ``import flashinfer`` still raises ``ModuleNotFoundError``
  (naming the simulation), and an outcome that needed it says so (``needs_gpu_package``).
  A hardware record with ``"simulate_packages": false`` turns this off (to measure it).

Known limit: module-level constants computed at import time (``_is_cuda = is_cuda()``)
keep their CPU values; the README lists the ones that matter.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any


class _DeviceProperties:
    """Duck-typed stand-in for ``torch.cuda._CudaDeviceProperties``."""

    def __init__(self, profile: dict[str, Any]) -> None:
        major, minor = profile["capability"]
        self.name: str = profile["gpu_name"]
        self.major: int = major
        self.minor: int = minor
        # torch reports less than nvidia-smi (measured on an H200: 143155 vs 143771 MiB)
        self.total_memory: int = int(profile.get("torch_memory_mib", profile["memory_mib"])) * 1024 * 1024
        self.multi_processor_count: int = int(profile["sm_count"])
        self.L2_cache_size: int = int(profile.get("l2_cache_bytes", 50 * 1024 * 1024))
        self.is_integrated: bool = False
        self.is_multi_gpu_board: bool = False
        self.gcnArchName: str = ""
        self.uuid: str = "GPU-00000000-0000-0000-0000-000000000000"

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
            f"minor={self.minor}, total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def _nvidia_smi_answer(argv: list[str], profile: dict[str, Any], count: int) -> str | None:
    """Text nvidia-smi would print for the queries SGLang makes, or None if unknown."""
    joined = " ".join(argv)
    major, minor = profile["capability"]
    if "--query-gpu=memory.total" in joined:
        return "\n".join(str(profile["memory_mib"]) for _ in range(count)) + "\n"
    if "--query-gpu=compute_cap" in joined:
        return "\n".join(f"{major}.{minor}" for _ in range(count)) + "\n"
    if "--query-gpu=name" in joined:
        return "\n".join(profile["gpu_name"] for _ in range(count)) + "\n"
    if "--query-gpu=driver_version" in joined:
        return "\n".join(profile.get("driver", "580.00") for _ in range(count)) + "\n"
    if "topo" in argv:
        return "GPU0\tX\n"
    return None


#: Build tools SGLang's kernel JIT runs (0.5.20+: ``ninja`` in ``kernels/jit/utils/compile``): compiling GPU code,
#: minutes on a box with a CUDA toolchain; never run by an evaluation.
KERNEL_BUILDERS = frozenset({"ninja", "nvcc", "cmake", "make"})

#: The words of the refusal to build GPU code (``launch/device_stops.py`` names a stage's stop by them).
BUILD_REFUSED = "on the simulated box but bisect-spec never builds GPU code"


def _kernel_build(cmd: Any) -> str | None:
    """The build tool ``cmd`` runs (:data:`KERNEL_BUILDERS`), unless it only asks its version; else None."""
    argv = [str(c) for c in cmd] if isinstance(cmd, (list, tuple)) else str(cmd).split()
    if not argv or os.path.basename(argv[0]) not in KERNEL_BUILDERS or "--version" in argv[1:] or "-V" in argv[1:]:
        return None
    return os.path.basename(argv[0])


def _refuse_builds(cmd: Any) -> None:
    tool = _kernel_build(cmd)
    if tool is not None:
        raise RuntimeError(f"{tool} (a build of SGLang's GPU kernels) is {BUILD_REFUSED}; a GPU install builds it")


def _is_nvidia_smi(cmd: Any) -> list[str] | None:
    if isinstance(cmd, (list, tuple)) and cmd and str(cmd[0]).endswith("nvidia-smi"):
        return [str(c) for c in cmd]
    if isinstance(cmd, str) and cmd.strip().startswith("nvidia-smi"):
        return cmd.split()
    return None


#: Distributions of a CUDA install whose code is GPU-only, and the module each provides.
GPU_DISTRIBUTIONS = {
    "flashinfer-python": "flashinfer", "flashinfer-cubin": "flashinfer_cubin", "sgl-kernel": "sgl_kernel",
    "sglang-kernel": "sgl_kernel", "flash-attn-4": "flash_attn", "sgl-deep-gemm": "deep_gemm",
    "nvidia-cutlass-dsl": "cutlass", "quack-kernels": "quack", "cuda-python": "cuda",
}
_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(?P<op>==|>=|~=)?\s*(?P<version>[^;,\s]*)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_gpu_packages(requirements: list[str]) -> dict[str, str]:
    """``{distribution: version}`` of the GPU-only packages a CUDA install of the release has.

    From the release's ``Requires-Dist`` lines: unconditional ones, and those of the
    ``srt`` extra (how old releases were installed on a GPU box). ``>=X`` counts as ``X``.
    """
    found: dict[str, str] = {}
    for line in requirements:
        requirement, _, marker = line.partition(";")
        if marker.strip() and not re.search(r"extra\s*==\s*[\"']srt[\"']", marker):
            continue
        match = _REQUIREMENT.match(requirement)
        if match is None or _normal(match["name"]) not in GPU_DISTRIBUTIONS:
            continue
        found.setdefault(_normal(match["name"]), match["version"] or "0")
    return found


class _InstalledOnTheBox(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``find_spec`` for the box's GPU packages; refuses to import their code."""

    def __init__(self, modules: set[str]) -> None:
        self.modules = modules
        self.active = False
        self.needed: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not self.active or name.split(".")[0] not in self.modules:
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        self.needed.append(spec.name)
        raise ModuleNotFoundError(f"{spec.name} is on the simulated box but bisect-spec never imports GPU code; "
                                  "this check needs a real GPU install", name=spec.name)

    def exec_module(self, module: types.ModuleType) -> None:  # pragma: no cover - create_module refuses first
        raise ModuleNotFoundError(module.__name__)


_PACKAGES: list[_InstalledOnTheBox] = []
_VERSIONS: dict[str, str] = {}


class _PinnedDistribution(importlib.metadata.Distribution):
    def __init__(self, name: str, version: str) -> None:
        self._name, self._version = name, version

    def read_text(self, filename: str) -> str | None:
        if filename in ("METADATA", "PKG-INFO"):
            return f"Metadata-Version: 2.1\nName: {self._name}\nVersion: {self._version}\n"
        return None

    def locate_file(self, path: Any) -> Any:
        return path


def _is_stub(module: str, spec: Any) -> bool:
    try:
        from bisect_spec.inside import version_shims
    except ImportError:  # inside repro.py, which embeds this file: no stubs are installed there
        return False
    return isinstance(sys.modules.get(module), version_shims._StubModule) or isinstance(
        getattr(spec, "loader", None), version_shims._StubFinder)


def _simulate_packages(installed: dict[str, str]) -> None:
    """Make the GPU packages of a CUDA install look installed (see the module docstring)."""
    modules = set()
    for distribution, version in installed.items():
        module = GPU_DISTRIBUTIONS[distribution]
        try:
            real = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            real = None
        if real is not None and _is_stub(module, real):
            real = None  # a version-skew stub (inside/version_shims.py) is not an installed package
        if real is None:
            modules.add(module)
            _VERSIONS[distribution] = version
    if not _PACKAGES:
        finder = _InstalledOnTheBox(modules)
        _PACKAGES.append(finder)
        sys.meta_path.insert(0, finder)
        original = importlib.metadata.Distribution.from_name.__func__  # type: ignore[attr-defined]

        def from_name(cls: Any, name: str) -> importlib.metadata.Distribution:
            pinned = _VERSIONS.get(_normal(name)) if finder.active else None
            if pinned is not None:
                return _PinnedDistribution(name, pinned)
            result: importlib.metadata.Distribution = original(cls, name)
            return result

        importlib.metadata.Distribution.from_name = classmethod(from_name)  # type: ignore[method-assign,assignment]
    _PACKAGES[0].modules = modules
    _PACKAGES[0].active = True


@contextlib.contextmanager
def packages_hidden() -> Iterator[None]:
    """Let the box's GPU packages look absent for a while (as before :func:`install`).

    For importing code honestly on the CPU with stubs for what is missing (the launch
    oracle imports 0.5.9/0.5.12's launch path, which imports ``sgl_kernel`` unconditionally,
    so): a stub can only stand in for a package that is not claimed as installed.
    """
    states = [finder.active for finder in _PACKAGES]
    simulated = _SIMULATED.get("packages.active")
    for finder in _PACKAGES:
        finder.active = False
    if simulated is not None:  # import_on_cpu restores the simulated state: keep the packages hidden there too
        _SIMULATED["packages.active"] = False
    try:
        yield
    finally:
        if simulated is not None:
            _SIMULATED["packages.active"] = simulated
        for finder, state in zip(_PACKAGES, states, strict=True):
            finder.active = state


def box_package_modules() -> set[str]:
    """Top-level modules of the GPU packages the box claims to have (none while hidden or off)."""
    return set(_PACKAGES[0].modules) if _PACKAGES and _PACKAGES[0].active else set()


def packages_needed() -> list[str]:
    """GPU packages an evaluation tried to import since the last call (then forgotten)."""
    if not _PACKAGES:
        return []
    needed = sorted(set(_PACKAGES[0].needed))
    _PACKAGES[0].needed.clear()
    return needed


class _SimulatedStream:
    """A CUDA stream of the simulated box: a handle SGLang creates while it chooses its attention
    backends (flashinfer with EAGLE plans on its own stream); nothing ever runs on it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.device = kwargs.get("device")

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None


def install(profile: dict[str, Any], count: int) -> None:
    """Install the simulated GPU box described by *profile* with *count* GPUs.

    :param profile: a hardware profile record (see ``bisect_spec/data/hardware``).
    :param count: number of GPUs visible to the server.
    """
    import torch

    _remember(torch)
    props = _DeviceProperties(profile)
    capability = tuple(profile["capability"])
    total = props.total_memory
    cuda = torch.cuda
    _BOX["count"] = count
    cuda.is_available = lambda: True
    cuda.device_count = lambda: _BOX["count"]
    cuda.is_initialized = lambda: True
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda device=None: capability
    cuda.get_device_name = lambda device=None: props.name
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (int(total * 0.985), total)
    cuda.get_arch_list = lambda: [f"sm_{capability[0]}{capability[1]}"]
    cuda.set_device = lambda device: None
    cuda.synchronize = lambda device=None: None
    cuda.Stream = _SimulatedStream
    torch.version.cuda = str(profile.get("cuda_version", "12.9"))
    torch.version.hip = None
    if hasattr(torch.backends, "cuda"):
        torch.backends.cuda.is_built = lambda: True

    real_run = subprocess.run
    real_check_output = subprocess.check_output

    def fake_run(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_builds(cmd)
        argv = _is_nvidia_smi(cmd)
        if argv is not None:
            text = _nvidia_smi_answer(argv, profile, _BOX["count"])
            if text is not None:
                out: Any = text if (kwargs.get("text") or kwargs.get("universal_newlines")) else text.encode()
                return subprocess.CompletedProcess(argv, 0, out, "" if isinstance(out, str) else b"")
        return real_run(cmd, *args, **kwargs)

    def fake_check_output(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_builds(cmd)
        argv = _is_nvidia_smi(cmd)
        if argv is not None:
            text = _nvidia_smi_answer(argv, profile, _BOX["count"])
            if text is not None:
                return text if (kwargs.get("text") or kwargs.get("universal_newlines")) else text.encode()
        return real_check_output(cmd, *args, **kwargs)

    subprocess.run = fake_run  # type: ignore[assignment]
    subprocess.check_output = fake_check_output  # type: ignore[assignment]
    real_which = shutil.which
    shutil.which = lambda name, *a, **k: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else real_which(name, *a, **k)  # type: ignore[assignment]
    if profile.get("simulate_packages", True):
        try:
            requirements = importlib.metadata.requires("sglang") or []
        except importlib.metadata.PackageNotFoundError:
            requirements = []
        _simulate_packages(pinned_gpu_packages(requirements))
    _SIMULATED.clear()
    _SIMULATED.update(_snapshot(torch))
    reset_hardware_memo()


def set_count(count: int, caches: list[Any] | None = None) -> None:
    """Make the installed box one of ``count`` GPUs of the same kind (a warm worker serves every count of its box).

    Only what the count reaches changes: ``torch.cuda.device_count`` and ``nvidia-smi``'s lines read it when
    called, and SGLang's memoised answers are cleared, as :func:`install` clears them (``caches``: the list
    :func:`sglang_caches` gives, where the caller keeps one; a scan of every module costs more than the switch).
    SGLang computes nothing from the count at import (no module-level ``device_count()`` in any release);
    ``tests/integration/test_warm_workers.py`` checks that a worker switched between counts answers as fresh
    ones do, on every release family.
    """
    if _BOX.get("count") != count:
        _BOX["count"] = count
        reset_hardware_memo(caches)


#: the simulated box's GPU count, read by its ``device_count`` and ``nvidia-smi`` when called
_BOX: dict[str, int] = {}

_CUDA_NAMES = ("is_available", "device_count", "is_initialized", "current_device", "get_device_capability",
               "get_device_name", "get_device_properties", "mem_get_info", "get_arch_list", "set_device", "synchronize",
               "Stream")
_ORIGINAL: dict[str, Any] = {}
_SIMULATED: dict[str, Any] = {}


def _snapshot(torch: Any) -> dict[str, Any]:
    state = {f"cuda.{n}": getattr(torch.cuda, n) for n in _CUDA_NAMES if hasattr(torch.cuda, n)}
    state.update({"version.cuda": torch.version.cuda, "version.hip": getattr(torch.version, "hip", None),
                  "subprocess.run": subprocess.run, "subprocess.check_output": subprocess.check_output,
                  "shutil.which": shutil.which, "packages.active": bool(_PACKAGES and _PACKAGES[0].active)})
    return state


def _remember(torch: Any) -> None:
    if not _ORIGINAL:
        _ORIGINAL.update(_snapshot(torch))


def _apply(torch: Any, state: dict[str, Any]) -> None:
    for key, value in state.items():
        owner, name = key.split(".", 1)
        if owner == "packages":
            if _PACKAGES:
                _PACKAGES[0].active = bool(value)
            continue
        target = {"cuda": torch.cuda, "version": torch.version, "subprocess": subprocess, "shutil": shutil}[owner]
        setattr(target, name, value)


def import_on_cpu(module: str) -> None:
    """Import ``module`` with the simulation suspended, then restore it.

    Modules SGLang imports lazily during resolution (model classes, layers) reach for
    CUDA-only packages (``sgl_kernel``) when they believe a GPU is present. Importing
    them honestly on the CPU first is what the plain import of SGLang does for the rest.
    """
    import importlib

    import torch

    hiding = gpu_hidden if _REAL_GPU_HIDDEN_AT_IMPORT else contextlib.nullcontext
    if not _SIMULATED:
        with hiding():
            importlib.import_module(module)
        return
    _apply(torch, _ORIGINAL)
    reset_hardware_memo()
    try:
        with hiding():  # on a GPU box without sgl_kernel the original state shows a GPU: hide it too
            importlib.import_module(module)
    finally:
        _apply(torch, _SIMULATED)
        reset_hardware_memo()


#: Set when SGLang was imported on a GPU box with the GPU hidden (no ``sgl_kernel`` there),
#: for real or simulated hardware: lazily imported modules are then imported the same way.
_REAL_GPU_HIDDEN_AT_IMPORT: list[bool] = []


@contextlib.contextmanager
def gpu_hidden() -> Iterator[None]:
    """Let torch report no GPU for a while, then show the real GPUs again.

    On a real GPU box without ``sgl_kernel`` (the fidelity check's machine), importing
    SGLang while CUDA is visible makes modules reach for ``sgl_kernel`` at import.
    Importing with the GPU hidden is what the simulation does on a CPU machine, so the
    real and the simulated answers then differ only in the hardware probes
    resolution makes afterwards. SGLang's memoised answers are cleared on both edges.
    """
    import torch

    _remember(torch)
    real = _snapshot(torch)
    _apply(torch, {"cuda.is_available": lambda: False, "cuda.device_count": lambda: 0, "version.cuda": None})
    reset_hardware_memo()
    try:
        yield
    finally:
        _apply(torch, real)
        reset_hardware_memo()


def hide_gpu_for_lazy_imports() -> None:
    """Import lazily loaded SGLang modules with the machine's GPU hidden too (see :func:`gpu_hidden`)."""
    if not _REAL_GPU_HIDDEN_AT_IMPORT:
        _REAL_GPU_HIDDEN_AT_IMPORT.append(True)


#: The type of ``functools.lru_cache``/``functools.cache`` wrappers. Checking the type,
#: not ``hasattr``, matters: attribute access on lazy-import proxies imports modules.
_LRU_WRAPPER = type(functools.lru_cache(maxsize=None)(lambda: None))


def sglang_caches() -> list[Any]:
    """Every ``functools.lru_cache``/``cache`` wrapper defined in an imported SGLang module."""
    found: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if not (name == "sglang" or name.startswith("sglang.")) or not isinstance(module, types.ModuleType):
            continue
        for value in list(vars(module).values()):
            candidates = [value]
            if isinstance(value, type) and getattr(value, "__module__", "").startswith("sglang"):
                candidates = [v.__func__ if isinstance(v, (staticmethod, classmethod)) else v for v in vars(value).values()]
            for candidate in candidates:
                if isinstance(candidate, _LRU_WRAPPER):
                    found[id(candidate)] = candidate
    return list(found.values())


def sglang_file_caches() -> list[Any]:
    """SGLang's own memo wrappers that are not ``functools``' (``lru_cache_frozenset``, 0.5.3+: the model's and the
    draft's ``config.json`` read once per path, ``get_config``), defined in an imported SGLang module: plain functions
    carrying a ``cache_clear`` of their own."""
    found: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if not (name == "sglang" or name.startswith("sglang.")) or not isinstance(module, types.ModuleType):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, types.FunctionType) and callable(vars(value).get("cache_clear")):
                found[id(value)] = value
    return list(found.values())


def reset_hardware_memo(caches: list[Any] | None = None) -> int:
    """Clear SGLang's memoised answers and its lazy platform singleton.

    :return: how many caches were cleared.
    """
    caches = sglang_caches() if caches is None else caches
    for cached in caches:
        cached.cache_clear()
    platforms = sys.modules.get("sglang.srt.platforms")
    if platforms is not None and hasattr(platforms, "_current_platform"):
        old = getattr(platforms, "_current_platform")  # noqa: B009 - private to SGLang, present by check
        setattr(platforms, "_current_platform", None)  # noqa: B010
        if old is not None:
            _rebind_platform(old, platforms)
    return len(caches)


def _rebind_platform(old: Any, platforms: types.ModuleType) -> None:
    """Point module-level ``current_platform`` references captured at import to the new one.

    Runs only when the simulation is installed or suspended, not per evaluation: the
    platform follows the hardware profile, which is fixed for a worker's lifetime.
    """
    holders = [
        module
        for name, module in list(sys.modules.items())
        if (name.startswith("sglang.")) and isinstance(module, types.ModuleType)
        and any(value is old for value in vars(module).values())
    ]
    if not holders:
        return
    try:
        new = platforms.current_platform
    except Exception:
        return
    for module in holders:
        for key, value in list(vars(module).items()):
            if value is old:
                setattr(module, key, new)

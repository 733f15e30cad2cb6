"""The version-skew shims' mechanics (which modules get stubbed, and only those).

Their effect on real releases is checked in tests/integration/test_old_releases.py.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from bisect_spec.inside import version_shims


def test_amx_probe_reads_the_cpu_flags(tmp_path: Path) -> None:
    with_amx = tmp_path / "amx"
    with_amx.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile amx_int8\n")
    without = tmp_path / "plain"
    without.write_text("processor\t: 0\nflags\t\t: fpu sse avx2\n")
    assert version_shims.cpu_has_amx_tile(str(with_amx)) is True
    assert version_shims.cpu_has_amx_tile(str(without)) is False
    assert version_shims.cpu_has_amx_tile(str(tmp_path / "missing")) is False


def failing_import(tmp_path: Path, source: str) -> ImportError:
    """The ImportError a module with ``source`` raises (the traceback holds the statement)."""
    module = tmp_path / "needs_gpu_package.py"
    module.write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module("needs_gpu_package")
    except ImportError as exc:
        return exc
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("needs_gpu_package", None)
    raise AssertionError("the import did not fail")


@pytest.mark.parametrize(("source", "modules"), [
    ("from vllm._custom_ops import scaled_fp8_quant\n", ["vllm._custom_ops"]),
    ("from vllm import _custom_ops as vllm_ops\n", ["vllm._custom_ops"]),
    ("import sgl_kernel\n", ["sgl_kernel"]),
    ("from sgl_kernel import fp8_scaled_mm, silu_and_mul\n", ["sgl_kernel"]),
])
def test_the_stubbed_module_is_read_from_the_failing_statement(tmp_path: Path, source: str, modules: list[str]) -> None:
    assert version_shims.missing_gpu_modules(failing_import(tmp_path, source)) == modules


def test_other_missing_packages_are_not_stubbed(tmp_path: Path) -> None:
    assert version_shims.missing_gpu_modules(failing_import(tmp_path, "import flash_attn_not_here\n")) == []


def test_import_window_serves_only_the_named_module_and_removes_transient_stubs() -> None:
    with version_shims.import_window(["vllm._custom_ops"]):
        from vllm._custom_ops import scaled_fp8_quant  # type: ignore[import-not-found]

        with pytest.raises(ImportError):
            importlib.import_module("vllm.model_executor")  # guarded fallbacks still see "no vllm"

        class Method(version_shims._StubModule("vllm._custom_ops").Base):  # type: ignore[misc]
            pass

    assert Method.__mro__ == (Method, object)
    with pytest.raises(NotImplementedError, match=r"vllm\._custom_ops\.scaled_fp8_quant is a bisect-spec stub"):
        scaled_fp8_quant()
    assert "vllm" not in sys.modules and "vllm._custom_ops" not in sys.modules
    with pytest.raises(ImportError):
        importlib.import_module("vllm._custom_ops")

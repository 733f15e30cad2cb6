"""A GPU box without ``sgl_kernel`` (the fidelity check's machine): real and simulated hardware.

This machine has no GPU, so the "real" GPU is faked: the resource script installs the
simulated H200 *before* SGLang is imported, then runs the evaluator's own ``real`` path.
What is checked is bisect-spec's mechanism (hide the GPU while SGLang imports, show it
again for resolution, lazily imported modules likewise), not SGLang's GPU behaviour.
Without the hiding, every configuration fails on such a box with ``ModuleNotFoundError:
No module named 'sgl_kernel'`` from a lazily imported quantization module (measured).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bisect_spec.runtime import environments, profiles
from tests.conftest import RESOURCES, require_release

pytestmark = pytest.mark.sglang


def run_real_worker(mode: str) -> dict[str, object]:
    require_release("0.5.23")
    environment = environments.get("0.5.23")
    model = profiles.load_model("llama-3.1-8b")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(environment.pythonpath), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([environment.python, str(RESOURCES / "real_gpu_without_kernels.py"), mode, str(model.path)],
                            capture_output=True, text=True, env=env, timeout=600, cwd=Path(__file__).parent)
    assert result.returncode == 0, result.stderr[-3000:]
    reply: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return reply


@pytest.mark.parametrize(("asked", "mode"), [("real", "real"), ("simulated", "simulated:h200x1")])
def test_fake_gpu_box_imports_sglang_with_the_gpu_hidden_then_resolves_on_it(asked: str, mode: str) -> None:
    reply = run_real_worker(asked)
    info = reply["info"]
    assert isinstance(info, dict)
    assert info["hardware"] == mode
    assert info["gpu_hidden_at_import"] is True
    assert reply["cuda_available_after"] is True  # the GPU is shown again after the import
    assert reply["status"] == "passed"
    resolved = reply["resolved"]
    assert isinstance(resolved, dict)
    assert resolved["attention_backend"] == "fa3"  # resolution saw the (fake) Hopper GPU, not the CPU
    assert resolved["mem_fraction_static"] == 0.903  # the 141 GB card's value (80 GB cards get another)

"""Values that cannot work for the model or the box are tested once, then no longer combined."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config
from bisect_spec.search.fit import checkpoint_quantization, fitted_space, is_nvidia, once_rows, unfit_values
from bisect_spec.search.plan import fitted_plan, load_strategy
from bisect_spec.search.space import FlagSpace, FlagSpec

KIMI = {"text_config": {"quantization_config": {"quant_method": "compressed-tensors"}}}
H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "cuda_version": "12.9"}


def space() -> FlagSpace:
    return FlagSpace((
        FlagSpec("--speculative-algorithm", (None, ("EAGLE3",), ("NGRAM",))),
        FlagSpec("--quantization", (None, ("fp8",), ("compressed-tensors",), ("awq",))),
        FlagSpec("--attention-backend", (None, ("fa3",), ("aiter",), ("ascend",), ("triton",))),
        FlagSpec("--moe-a2a-backend", (None, ("deepep",), ("mori",))),
        FlagSpec("--kv-cache-dtype", (None, ("fp8_e4m3",), ("fp4_e2m1",))),
    ), core=("--speculative-algorithm",))


def test_the_checkpoints_own_method_is_found_at_any_depth() -> None:
    assert checkpoint_quantization(KIMI) == "compressed-tensors"
    assert checkpoint_quantization({"quantization_config": {"quant_method": "fp8"}}) == "fp8"
    assert checkpoint_quantization({"hidden_size": 4096}) is None
    assert is_nvidia(H100) and not is_nvidia(None) and not is_nvidia({"gpu_name": "AMD Instinct MI300X"})


def test_unfit_values_for_a_quantized_checkpoint_on_an_nvidia_box() -> None:
    unfit = unfit_values(space(), model_config=KIMI, hardware=H100)
    assert [(u.flag, " ".join(u.value)) for u in unfit] == [
        ("--attention-backend", "aiter"), ("--attention-backend", "ascend"), ("--moe-a2a-backend", "mori"),
        ("--quantization", "awq"), ("--quantization", "fp8")]
    assert unfit[0].reason == "ROCm backend on an NVIDIA box"
    assert unfit[-1].reason == "the checkpoint is compressed-tensors-quantized"


def test_an_unquantized_checkpoint_on_no_gpu_keeps_every_value_unless_the_strategy_forbids() -> None:
    assert unfit_values(space(), model_config={}, hardware=None) == []
    forbidden = unfit_values(space(), model_config={}, hardware=None, forbid={"--kv-cache-dtype": [("fp4_e2m1",)]})
    assert [(u.flag, u.value, u.reason) for u in forbidden] == [
        ("--kv-cache-dtype", ("fp4_e2m1",), "forbidden by the strategy")]
    assert unfit_values(space(), model_config=KIMI, hardware=H100, automatic=False) == []


def test_each_unfit_value_is_tested_once_and_never_combined() -> None:
    strategy = load_strategy("quick")
    strategy = type(strategy)(**{**strategy.__dict__, "core": ("--speculative-algorithm",), "strength": 2})
    plan, fitted, unfit = fitted_plan(space(), strategy, model_config=KIMI, hardware=H100)
    bad = {(u.flag, u.value) for u in unfit}
    holding = [c for c in plan if any(item in bad for item in c.items)]
    assert sorted(holding, key=str) == sorted(once_rows(space(), unfit), key=str)  # one row each, alone
    assert all(len(c.items) == 1 for c in holding)
    quantization = fitted.spec("--quantization")
    assert quantization is not None and quantization.values == (None, ("compressed-tensors",))
    assert Config.of({}) in plan
    assert fitted_space(space(), []) == space()


def test_a_strategy_file_states_forbid_rules(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('include = ["--kv-cache-dtype"]\nfit = false\n[forbid]\n"--kv-cache-dtype" = ["fp4_e2m1"]\n')
    strategy = load_strategy(str(path))
    assert strategy.forbid == {"--kv-cache-dtype": ("fp4_e2m1",)} and strategy.fit is False
    path.write_text('include = ["--kv-cache-dtype"]\n[forbid]\n"--kv-cache-dtype" = "fp4_e2m1"\n')
    with pytest.raises(UsageError, match="'forbid' must be a table"):
        load_strategy(str(path))

"""Values that cannot work for this model or box: tested once, then no longer combined.

A covering array combines every value of every flag with every other. Some values cannot
work for the model or the box at all: a ``--quantization`` other than the checkpoint's own
method (``_verify_quantization`` refuses it), an attention or MoE all-to-all backend for
another platform on an NVIDIA box. Every row holding one fails on that one check, and the
speculative combination in the row is never tested (masking): on 0.5.23 kimi-k2.6 + eagle3
such rows were most of the default plan.

So each such value is *tested once*, in a row of its own (the baseline plus that value),
so that its constraint is still found and reported, and then left out of the values the
covering array and the search combine. A strategy file states further rules in a
``[forbid]`` table (``"--kv-cache-dtype" = ["fp4_e2m1"]``), and ``fit = false`` turns the
automatic rules off.

Invariants: the rules only remove values (never ``ABSENT``, never a whole flag's domain
down to nothing but ``ABSENT`` unless every value was named); the result is
deterministic for a given space, model, box and strategy. Pure: no I/O, no processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bisect_spec.model.flags import Config, Value
from bisect_spec.search.space import FlagSpace, FlagSpec

#: Attention backends for another platform than NVIDIA CUDA, and the platform.
OTHER_PLATFORM_ATTENTION = {"aiter": "ROCm", "wave": "ROCm", "ascend": "Ascend NPU", "intel_xpu": "Intel XPU",
                            "intel_amx": "CPU (Intel AMX)"}
#: MoE all-to-all backends for another platform.
OTHER_PLATFORM_A2A = {"mori": "ROCm", "ascend_fuseep": "Ascend NPU", "ascend_tp": "Ascend NPU"}
ATTENTION_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
                   "--speculative-draft-attention-backend", "--mm-attention-backend")
A2A_FLAGS = ("--moe-a2a-backend", "--speculative-moe-a2a-backend")
#: ``--device`` values of another platform (the speculative checks branch on them).
OTHER_PLATFORM_DEVICE = {"cpu": "CPU", "npu": "Ascend NPU", "xpu": "Intel XPU", "hpu": "Gaudi HPU", "mps": "Apple"}


@dataclass(frozen=True, order=True)
class Unfit:
    """A value that cannot work here, and why."""

    flag: str
    value: Value
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": " ".join(self.value), "reason": self.reason}


def checkpoint_quantization(model_config: Mapping[str, Any]) -> str | None:
    """The checkpoint's own quantization method (``quantization_config.quant_method``), at any depth
    (kimi-k2.6 keeps it in ``text_config``)."""
    stack: list[Any] = [model_config]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            quant = node.get("quantization_config")
            if isinstance(quant, Mapping) and quant.get("quant_method"):
                return str(quant["quant_method"])
            stack.extend(v for v in node.values() if isinstance(v, Mapping))
    return None


def is_nvidia(hardware: Mapping[str, Any] | None) -> bool:
    """Whether the box (a hardware record: profile or real) is an NVIDIA CUDA box."""
    if not hardware:
        return False
    text = f"{hardware.get('gpu_name', '')} {hardware.get('description', '')} {hardware.get('vendor', '')}"
    return "nvidia" in text.lower() or bool(hardware.get("cuda_version"))


def unfit_values(space: FlagSpace, *, model_config: Mapping[str, Any], hardware: Mapping[str, Any] | None,
                 forbid: Mapping[str, Sequence[Value | None]] | None = None, automatic: bool = True) -> list[Unfit]:
    """The values of ``space`` that cannot work for this model and box, with the reason.

    :param forbid: a strategy's explicit ``[forbid]`` rules, flag to values.
    :param automatic: apply the model and box rules (a strategy's ``fit``).
    """
    found: dict[tuple[str, Value], Unfit] = {}
    own = checkpoint_quantization(model_config) if automatic else None
    nvidia = automatic and is_nvidia(hardware)
    for spec in space.specs:
        for value in spec.values:
            if value is None or not value:
                continue
            word = " ".join(value)
            reason = None
            if spec.flag == "--quantization" and own is not None and word != own:
                reason = f"the checkpoint is {own}-quantized"
            elif nvidia and spec.flag in ATTENTION_FLAGS and word in OTHER_PLATFORM_ATTENTION:
                reason = f"{OTHER_PLATFORM_ATTENTION[word]} backend on an NVIDIA box"
            elif nvidia and spec.flag in A2A_FLAGS and word in OTHER_PLATFORM_A2A:
                reason = f"{OTHER_PLATFORM_A2A[word]} backend on an NVIDIA box"
            elif nvidia and spec.flag == "--device" and word in OTHER_PLATFORM_DEVICE:
                reason = f"{OTHER_PLATFORM_DEVICE[word]} device on an NVIDIA box"
            if reason is not None:
                found[(spec.flag, value)] = Unfit(spec.flag, value, reason)
    for flag, values in (forbid or {}).items():
        named = space.spec(flag)
        for value in values:
            if named is not None and value is not None and value in named.values:
                found.setdefault((flag, value), Unfit(flag, value, "forbidden by the strategy"))
    return sorted(found.values())


def fitted_space(space: FlagSpace, unfit: Sequence[Unfit]) -> FlagSpace:
    """``space`` without the unfit values (their flags stay, with the values that fit)."""
    drop = {(u.flag, u.value) for u in unfit}
    specs = tuple(FlagSpec(s.flag, tuple(v for v in s.values if (s.flag, v) not in drop), s.kind) for s in space.specs)
    return dataclasses.replace(space, specs=specs)  # the same space otherwise: fixed flags, groups, base


def once_rows(space: FlagSpace, unfit: Sequence[Unfit]) -> list[Config]:
    """One row per unfit value: the baseline (no swept flag given) plus that value."""
    rows = []
    for item in unfit:
        rows.append(space.complete({item.flag: item.value}))
    return rows

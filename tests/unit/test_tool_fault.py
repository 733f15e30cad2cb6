"""A failure caused by bisect-spec's own emulation is never SGLang's verdict (``launch.tool_fault``).

The exceptions here are built as SGLang would meet them: raised by code compiled under a path
inside an ``sglang`` package (a stand-in file name, so the innermost frame is "SGLang's"),
or by bisect-spec's own stubs and stand-ins.
"""

from __future__ import annotations

from typing import Any

import pytest

from bisect_spec.inside import launch, version_shims
from bisect_spec.inside.launch import sglang_lookup

_SGLANG_FILE = "/site/sglang/srt/runtime_context.py"


def _raise_in_sglang(source: str, **names: Any) -> BaseException:
    """Run ``source`` as if it were SGLang's code; return what it raised."""
    code = compile(source, _SGLANG_FILE, "exec")
    try:
        exec(code, dict(names))
    except Exception as exc:
        return exc
    raise AssertionError("the source raised nothing")


def _progress(stage: str) -> launch.Progress:
    progress = launch.Progress()
    progress.enter(stage)
    return progress


def test_sglangs_own_failure_is_a_verdict() -> None:
    exc = _raise_in_sglang("assert False, 'requires --speculative-eagle-topk=1'")
    assert launch.tool_fault(exc, _progress("resolve")) is None
    assert launch.tool_fault(exc, _progress("tokenizer_manager")) is None


def test_an_unpublished_runtime_context_is_the_emulations_fault_in_the_stages_it_publishes_for() -> None:
    exc = _raise_in_sglang("raise ValueError(\"config namespace 'spec' not published\")")
    fault = launch.tool_fault(exc, _progress("tokenizer_manager"))
    assert fault is not None and "runtime-context publication" in fault and "tokenizer_manager" in fault
    # during resolution SGLang publishes nothing for itself: reading an unpublished bag there is SGLang's bug
    assert launch.tool_fault(exc, _progress("resolve")) is None


def test_a_stub_called_by_sglang_is_the_emulations_fault() -> None:
    stub = version_shims._Unavailable("vllm._custom_ops.scaled_fp8_quant")
    exc = _raise_in_sglang("stub(1)", stub=stub)
    fault = launch.tool_fault(exc, _progress("resolve"))
    assert fault is not None and "version_shims.py" in fault


def test_sglangs_exception_caused_by_a_stub_is_the_emulations_fault() -> None:
    stub = version_shims._Unavailable("flashinfer.probe")
    exc = _raise_in_sglang("try:\n    stub()\nexcept NotImplementedError as e:\n    raise ValueError('no backend') from e",
                           stub=stub)
    assert isinstance(exc, ValueError)
    assert launch.tool_fault(exc, _progress("resolve")) is not None


def test_an_attribute_missing_on_an_object_the_emulation_built_by_hand_is_its_fault() -> None:
    class Bare:
        pass

    bare = Bare()
    progress = _progress("tokenizer_manager")
    exc = _raise_in_sglang("self.model_config.context_len", self=bare)
    assert launch.tool_fault(exc, progress) is None  # not registered: an ordinary AttributeError
    progress.built[id(bare)] = "a TokenizerManager built with server_args alone"
    fault = launch.tool_fault(exc, progress)
    assert fault is not None and "server_args alone" in fault


@pytest.mark.parametrize("stage", ["resolve", "target_model_config"])
def test_an_attribute_missing_on_a_simulated_device_is_the_emulations_fault(stage: str) -> None:
    from bisect_spec.inside.simulated_gpu import _DeviceProperties

    device = _DeviceProperties({"capability": [9, 0], "gpu_name": "H100", "memory_mib": 81559, "sm_count": 132})
    exc = _raise_in_sglang("device.gcn_arch_name", device=device)
    fault = launch.tool_fault(exc, _progress(stage))
    assert fault is not None and "_DeviceProperties" in fault and "gcn_arch_name" in fault


def test_a_call_the_emulation_makes_with_arguments_the_release_does_not_take_is_its_fault() -> None:
    def from_server_args(server_args: object) -> None:
        return None

    try:
        sglang_lookup._call(from_server_args, object(), object())
    except TypeError as exc:
        fault = launch.tool_fault(exc, _progress("draft_worker_model_config"))
        assert fault is not None and "sglang_lookup.py" in fault and "_call" in fault
    else:
        raise AssertionError("the call did not fail")


def test_the_offline_refusal_stays_a_recorded_failure_of_the_configuration() -> None:
    """``worker_main._no_network`` refuses SGLang's reach for the hub; urllib wraps it: still a verdict."""
    refused = ConnectionRefusedError("bisect-spec blocked network access to huggingface.co: evaluations run offline")
    exc = _raise_in_sglang("try:\n    raise refused\nexcept OSError as e:\n    raise OSError(f'<urlopen error {e}>') from e",
                           refused=refused)
    assert launch.tool_fault(exc, _progress("resolve")) is None

"""The hardware profile is really what SGLang sees (defaults and checks change with it)."""

from __future__ import annotations

import pytest

from bisect_spec import api
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from tests.conftest import require_release, shared_session

pytestmark = pytest.mark.sglang


def test_default_attention_backend_follows_the_gpu() -> None:
    h200 = shared_session("0.5.23", model="llama-3.1-8b", draft=None, hardware="h200").evaluate(Config())
    rtx = shared_session("0.5.23", model="llama-3.1-8b", draft=None, hardware="rtx-pro-6000").evaluate(Config())
    assert h200.resolved["attention_backend"] == "fa3"
    # SM120 has neither fa3 nor trtllm_mha: "flashinfer if available, otherwise triton". The simulated box
    # is a CUDA install of the release, which has flashinfer (found, never imported)
    assert rtx.resolved["attention_backend"] == "flashinfer"
    assert h200.hardware == "simulated:h200x8"


def test_trtllm_mla_rejected_on_hopper_in_resolution_and_on_blackwell_only_when_chosen() -> None:
    config = Config.of({"--attention-backend": "trtllm_mla"})
    h200 = shared_session("0.5.23", model="llama-3.1-8b", draft=None, hardware="h200").evaluate(config)
    rtx = shared_session("0.5.23", model="llama-3.1-8b", draft=None, hardware="rtx-pro-6000").evaluate(config)
    assert h200.status is Status.FAILED
    assert "only supported on Blackwell" in h200.exception["message"]
    assert h200.record["stage"] == "resolve"
    # Blackwell lets it through resolution; Llama is not an MLA model, which SGLang's registry says only when
    # the runner chooses its backend, after the weights load
    assert rtx.status is Status.FAILED
    assert rtx.exception["message"] == "trtllm_mla backend can only be used with MLA models."
    assert rtx.record["stage"] == "attention_backend"


def test_hardware_none_shows_sglangs_no_accelerator_error() -> None:
    require_release("0.5.23")
    result = api.probe(["--tp", "1"], api.TargetSpec(release="0.5.23", model="llama-3.1-8b", draft=None, hardware="none"))
    assert result.outcome.status is Status.FAILED
    assert result.outcome.exception["type"] == "RuntimeError"
    assert "No accelerator" in result.outcome.exception["message"]
    assert result.worker["hardware"] == "cpu"


def test_gpu_count_reaches_sglang() -> None:
    # the box's GPU count is what torch.cuda.device_count() answers in the worker: tp 2 starts on two GPUs of it and
    # will not start on one (a count that did not reach the evaluation would give eight, and both would pass)
    two = shared_session("0.5.23", model="llama-3.1-8b", draft=None, hardware="h100", gpus=2)
    outcome = two.evaluate(Config.of({"--tp-size": "2"}))
    assert outcome.status is Status.PASSED, outcome.headline
    assert outcome.record["memory_pool"]["total_bytes"] > 70 * 2**30  # an H100's memory, per GPU
    one = shared_session("0.5.23", model="llama-3.1-8b", draft=None, hardware="h100", gpus=1)
    lonely = one.evaluate(Config.of({"--tp-size": "2"}))
    assert lonely.verdict == "WILL NOT START", lonely.headline
    assert lonely.will_not_start == {**(lonely.will_not_start or {}), "cause": "gpus"}
    assert "the box has 1" in lonely.exception["message"]

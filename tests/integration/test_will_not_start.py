"""Verdicts a pass must never hide, measured on installed releases of more than one launch-path family: WILL NOT
START (the weights outgrow the box's GPUs, or the layout needs more GPUs than it has) and SGLang's own refusals and
crashes while the model is built. Oracles not written here: SGLang's documented DeepSeek-V3 commands (8× H200 runs
MTP at --tp 8; H100s need two nodes), and SGLang's own statements (dp_attention.py, model_config.py)."""

from __future__ import annotations

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.report.text import outcome_text
from tests.cli.helpers import run
from tests.conftest import require_release, shared_session

#: SGLang's documented DeepSeek-V3 MTP launch (docs/basic_usage/deepseek.md): EAGLE, 3 steps, topk 1, 4 draft tokens
MTP = {"--tp-size": "8", "--speculative-algorithm": "EAGLE", "--speculative-num-steps": "3",
       "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"}
EAGLE3 = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "4"}


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_deepseek_v3s_documented_mtp_command_passes_whole_on_8_h200_and_will_not_start_on_8_h100(release: str) -> None:
    h200 = shared_session(release, model="deepseek-v3", draft="nextn", hardware="h200")
    passed = h200.evaluate(h200.with_draft(Config.of(MTP)))
    assert passed.verdict == "PASSED", outcome_text(passed)  # every check a CPU can run, nothing stopped
    assert passed.record["cuda_graphs"]["capture_bs"], passed.record
    h100 = shared_session(release, model="deepseek-v3", draft="nextn", hardware="h100")
    oom = h100.evaluate(h100.with_draft(Config.of(MTP)))
    assert oom.verdict == "WILL NOT START", outcome_text(oom)
    figures = oom.will_not_start
    assert figures is not None and figures["cause"] == "weights" and figures["needed"] > figures["available"]
    assert "CUDA out of memory" in oom.exception["message"] and not oom.frame


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_a_layout_wider_than_the_box_will_not_start_and_the_widest_that_fits_is_offered(release: str) -> None:
    require_release(release)
    code, output = run("probe", "--sglang", release, "--model", "qwen3-32b", "--draft", "none", "--hardware", "h100",
                       "--gpus", "4", "--", "--tp", "16")
    assert code == 3, output
    assert "verdict:  WILL NOT START  the layout needs 16 GPUs per node, the box has 4" in output, output
    assert "not an SGLang bug" in output
    next_line = next(line for line in output.splitlines() if line.startswith("next:"))
    assert "verified" in next_line and "-size 4" in next_line and "16" not in next_line, output


def test_the_main_jobs_model_without_a_width_will_not_start_and_names_the_width_that_does() -> None:
    require_release("0.5.23")
    code, output = run("probe", "--sglang", "0.5.23", "--model", "kimi-k2.6", "--draft", "eagle3", "--", *[
        token for flag, value in EAGLE3.items() for token in (flag, value)])
    assert code == 3, output
    verdict = next(line for line in output.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith("verdict:  WILL NOT START  out of memory: the weights need ≥ 95."), output
    assert "GiB per GPU, 95.59 GiB available" in verdict
    assert "next:     the nearest layout that starts on this box (verified" in output and "set --tp-size 8" in output


def test_sglangs_refusal_while_the_model_is_built_is_its_verdict() -> None:
    # SGLang's own ValueError in srt/layers/dp_attention.py, raised while Kimi-K2.6's vision tower is built: every
    # real launch of --attn-dp-size 2 at tp 8 meets it (it was a pass that "stopped early")
    session = shared_session("0.5.23")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--attn-dp-size": "2", **EAGLE3})))
    assert outcome.status is Status.FAILED and outcome.will_not_start is None, outcome.headline
    assert outcome.exception["type"] == "ValueError"
    assert outcome.exception["message"].startswith("VisionAttention shards over the attention TP group (4 ranks)")
    assert outcome.frame["file"] == "srt/layers/dp_attention.py"


@pytest.mark.parametrize("release", ["0.5.18", "0.5.23"])
def test_sglangs_crash_on_a_configuration_while_the_model_is_built_is_its_verdict(release: str) -> None:
    # --dcp-size 64 over tp 4: SGLang's own integer division by zero in get_num_kv_heads (was "stopped early")
    session = shared_session(release, model="qwen3-32b", draft="specforge-eagle3-qwen3-32b", hardware="h100", gpus=4)
    outcome = session.evaluate(Config.of({"--tp-size": "4", "--dcp-size": "64"}))
    assert outcome.verdict == "FAILED", outcome_text(outcome)
    assert outcome.exception["type"] == "ZeroDivisionError"
    assert (outcome.frame["file"], outcome.frame["function"]) == ("srt/configs/model_config.py", "get_num_kv_heads")


@pytest.mark.parametrize("release", ["0.5.18", "0.5.23"])
def test_sglangs_refusal_whose_message_names_meta_is_its_verdict_not_a_device_stop(release: str) -> None:
    # weight_cache/protocol.py's own raise refuses --weight-cache-mode client for Kimi-K2.6's compressed-tensors
    # checkpoint; its message speaks of "the meta-initialized client", which read as a meta tensor's value (a stop)
    session = shared_session(release)
    outcome = session.evaluate(Config.of({"--tp-size": "8", "--weight-cache-mode": "client"}))
    assert outcome.verdict == "FAILED", outcome_text(outcome)
    assert outcome.exception["type"] == "UnsupportedQuantForIPCError"
    assert "quantization method 'compressed-tensors' is not verified" in outcome.exception["message"]
    assert (outcome.frame["file"], outcome.frame["function"]) == ("srt/weight_cache/protocol.py",
                                                                  "check_ipc_quant_support")

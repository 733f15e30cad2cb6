"""SGLang's documented speculative-decoding launch commands, on the GPUs they name, evaluated on two launch-path
families (0.5.9/0.5.12 and 0.5.23): an oracle written by SGLang's docs, cookbook and pull requests, not by us.

Each case is the documented command as typed (its model path, host, port and log flags left out: the model is the
shipped profile) on the shipped profiles that share the documented model's and draft's architectures; no case
reaches a hub. The draft standing in for each documented draft id:

* ``eagle3`` (``LlamaForCausalLMEagle3``, one layer, shaped from the target) for ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``
  and ``jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B`` (llama-3.1-8b), ``lightseekorg/kimi-k2.5-eagle3``
  (kimi-k2.5), ``nvidia/gpt-oss-120b-Eagle3`` and ``zhuyksir/EAGLE3-gpt-oss-20b-bf16`` (gpt-oss);
* ``specforge-eagle3-llama-3.3-70b`` (SpecForge's published ``LlamaForCausalLMEagle3`` config) for
  ``yuhuili/EAGLE3-LLaMA3.3-Instruct-70B``;
* ``nextn`` (the target's own MTP layer, no draft path) for DeepSeek's MTP commands, which name no draft.

The documented expectation is a full PASSED on the named GPUs. Where a command does not get one, the case says why:
a step only a GPU takes (named), SGLang's own refusal at that release (its statement), or a fault of bisect-spec
(an ``xfail(strict=True)`` asserting the documented expectation, so a fix shows). The WILL NOT START side is SGLang's
own statement that DeepSeek-V3's FP8 checkpoint needs two nodes of H100 (``docs/basic_usage/deepseek.md``): its MTP
command on one 8× H100 box. ``docs/fidelity.md`` ("Documented launch commands") has the table."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import pytest
from pytest import MarkDecorator

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.report.text import outcome_text
from tests.conftest import shared_session

pytestmark = pytest.mark.sglang

SGLANG_DOCS = "sgl-project/sglang"
COOKBOOK = "sgl-project/sgl-cookbook@7b5bd9c0"


@dataclass(frozen=True)
class Documented:
    """A documented launch command mapped onto shipped profiles: ``command`` is its flags and ``VAR=value``
    prefixes as written; ``citation`` where it is written."""

    name: str
    citation: str
    model: str
    draft: str
    hardware: str
    gpus: int
    command: str

    def evaluate(self, release: str) -> Outcome:
        session = shared_session(release, model=self.model, draft=self.draft, hardware=self.hardware, gpus=self.gpus)
        return session.evaluate(session.with_draft(Config.from_argv(shlex.split(self.command))))


#: docs/advanced_features/speculative_decoding.md, "EAGLE-3 Decoding" (the page's throughput table: 1× H100)
LLAMA_8B_DOCS = Documented(
    "llama-3.1-8b-eagle3-docs", f"{SGLANG_DOCS} docs/advanced_features/speculative_decoding.md (EAGLE-3 Decoding)",
    "llama-3.1-8b", "eagle3", "h100", 1,
    "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 4 "
    "--speculative-num-draft-tokens 16 --mem-fraction-static 0.7 --cuda-graph-max-bs 8 --dtype float16")
#: the cookbook's Llama 3.1 generator, 8B Instruct on H100, "latency" (src/components/autoregressive/
#: Llama31ConfigGenerator/index.js: no --tp for 8B, the draft yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)
LLAMA_8B_COOKBOOK = Documented(
    "llama-3.1-8b-eagle3-cookbook", f"{COOKBOOK} src/components/autoregressive/Llama31ConfigGenerator (H100, latency)",
    "llama-3.1-8b", "eagle3", "h100", 1,
    "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --disable-shared-experts-fusion --max-running-requests 64 "
    "--mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --context-length 32768")
#: docs/basic_usage/deepseek_v3.md, "Multi-token Prediction" (MTP "on H200 TP8"; the page's table: 8 x H200)
DEEPSEEK_V3_DOCS = Documented(
    "deepseek-v3-mtp-docs", f"{SGLANG_DOCS} docs/basic_usage/deepseek_v3.md (Multi-token Prediction)",
    "deepseek-v3", "nextn", "h200", 8, "--speculative-algorithm EAGLE --trust-remote-code --tp 8")
#: the cookbook's DeepSeek-V3 generator, H200, strategies TP + MTP (its optional --enable-symm-mem left out)
DEEPSEEK_V3_COOKBOOK = Documented(
    "deepseek-v3-mtp-cookbook", f"{COOKBOOK} src/components/autoregressive/DeepSeekV3ConfigGenerator (H200, TP, MTP)",
    "deepseek-v3", "nextn", "h200", 8,
    "SGLANG_ENABLE_SPEC_V2=1 --tp 8 --speculative-algorithm EAGLE --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
#: docs/basic_usage/deepseek_v32.md, "Multi-token Prediction" (8xH200/B200; V3.2 launches as V3.2-Exp does, the page says)
DEEPSEEK_V32_DOCS = Documented(
    "deepseek-v3.2-mtp-docs", f"{SGLANG_DOCS} docs/basic_usage/deepseek_v32.md (Multi-token Prediction)",
    "deepseek-v3.2", "nextn", "h200", 8,
    "--tp 8 --dp 8 --enable-dp-attention --speculative-algorithm EAGLE --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
#: the cookbook's Kimi-K2.5 page, 4.2.5 "Speculative Decoding" (H200/B200; its generator offers it on H200 and B300)
KIMI_K25_COOKBOOK = Documented(
    "kimi-k2.5-eagle3-cookbook", f"{COOKBOOK} docs/autoregressive/Moonshotai/Kimi-K2.5.md (4.2.5 Speculative Decoding)",
    "kimi-k2.5", "eagle3", "h200", 8,
    "SGLANG_ENABLE_SPEC_V2=1 --tp 8 --reasoning-parser kimi_k2 --tool-call-parser kimi_k2 "
    "--speculative-algorithm=EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --trust-remote-code")
#: the cookbook's GPT-OSS generator, speculative decoding enabled: 120B at tp 8 on H200, 20B at tp 1 on H100
GPT_OSS_120B_COOKBOOK = Documented(
    "gpt-oss-120b-eagle3-cookbook", f"{COOKBOOK} src/components/autoregressive/GPTOSSConfigGenerator (120B, H200)",
    "gpt-oss-120b", "eagle3", "h200", 8,
    "SGLANG_ENABLE_SPEC_V2=1 SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 --tp 8 --speculative-algorithm EAGLE3 "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
GPT_OSS_20B_COOKBOOK = Documented(
    "gpt-oss-20b-eagle3-cookbook", f"{COOKBOOK} src/components/autoregressive/GPTOSSConfigGenerator (20B, H100)",
    "gpt-oss-20b", "eagle3", "h100", 1,
    "SGLANG_ENABLE_SPEC_V2=1 SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 --speculative-algorithm EAGLE3 "
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
#: sglang#4716 ("Fix EAGLE3 for llama3.3 70b"), the maintainer's command "Tested ... on H100 TP8"
LLAMA_70B_PR = Documented(
    "llama-3.3-70b-eagle3-pr4716", "sgl-project/sglang#4716 (comment of 2025-03-24: H100 TP8)",
    "llama-3.3-70b", "specforge-eagle3-llama-3.3-70b", "h100", 8,
    "--speculative-algorithm EAGLE3 --speculative-num-steps 8 --speculative-eagle-topk 8 "
    "--speculative-num-draft-tokens 64 --cuda-graph-max-bs 1 --dtype float16 --tp 8")
#: docs/basic_usage/deepseek.md (0a9fc02a): "Full precision FP8 ... 2 x 8 x H100/800/20"; its MTP example, on one
#: 8× H100 box
DEEPSEEK_V3_ON_H100 = Documented(
    "deepseek-v3-mtp-on-8-h100", f"{SGLANG_DOCS} docs/basic_usage/deepseek.md (FP8: 2 x 8 x H100; Multi-token Prediction)",
    "deepseek-v3", "nextn", "h100", 8,
    "--speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 2 --trust-remote-code --tp 8")


def _case(command: Documented, release: str, *values: object,
          marks: MarkDecorator | tuple[MarkDecorator, ...] = ()) -> Any:  # a pytest.param
    return pytest.param(command, release, *values, id=f"{command.name}-{release}", marks=marks)


@pytest.mark.parametrize(("command", "release"), [
    _case(LLAMA_8B_DOCS, "0.5.12"),  # 0.5.23: SGLang's parser refuses --cuda-graph-max-bs (below)
    _case(LLAMA_8B_COOKBOOK, "0.5.12"), _case(LLAMA_8B_COOKBOOK, "0.5.23"),
    _case(DEEPSEEK_V3_DOCS, "0.5.12"), _case(DEEPSEEK_V3_DOCS, "0.5.23"),
    _case(DEEPSEEK_V3_COOKBOOK, "0.5.12"), _case(DEEPSEEK_V3_COOKBOOK, "0.5.23"),
    _case(KIMI_K25_COOKBOOK, "0.5.23"),  # 0.5.12: stops at the INT4 experts' repack (below)
])
def test_a_documented_command_is_a_full_pass_on_the_gpus_it_names(command: Documented, release: str) -> None:
    outcome = command.evaluate(release)
    assert outcome.verdict == "PASSED", f"{command.citation}\n{outcome_text(outcome)}"
    assert outcome.record["resolved"]["speculative_algorithm"] in ("EAGLE", "EAGLE3"), outcome.record["resolved"]


@pytest.mark.parametrize(("command", "release", "stage", "because"), [
    # Kimi-K2.5's INT4 experts: the pool is sized without CompressedTensorsFusedMoEMethod's post-load processing
    # (a Marlin repack, GPU kernels); 0.5.20+ run it on meta: the full pass above
    pytest.param(KIMI_K25_COOKBOOK, "0.5.12", "memory_pool", "CompressedTensorsFusedMoEMethod",
                 id="kimi-k2.5-eagle3-cookbook-0.5.12"),
    # DeepSeek-V3.2's DSA indexer needs deep_gemm's GPU code (srt/layers/attention/dsa/utils.py)
    pytest.param(DEEPSEEK_V32_DOCS, "0.5.23", "memory_pool", "deep_gemm", id="deepseek-v3.2-mtp-docs-0.5.23"),
    # 0.5.12's NSA indexer imports deep_gemm only under `if _is_cuda:` at import: on this CPU the name is unbound,
    # and the statement using it runs where a GPU install has it (it was a false FAILED, a NameError)
    pytest.param(DEEPSEEK_V32_DOCS, "0.5.12", "memory_pool", "uses deep_gemm", id="deepseek-v3.2-mtp-docs-0.5.12"),
])
def test_a_documented_command_that_stops_early_stops_at_a_step_only_a_gpu_takes(
        command: Documented, release: str, stage: str, because: str) -> None:
    outcome = command.evaluate(release)
    assert outcome.verdict == "PASSED UP TO", f"{command.citation}\n{outcome_text(outcome)}"
    assert because in outcome.stopped_early.get(stage, ""), outcome.stopped_early


AMBIGUOUS = "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode"
LONGER_CONTEXT = "Warning: Target model's context_length (131072) is greater than the derived context_length (4096)"


@pytest.mark.parametrize(("command", "release", "status", "message", "where"), [
    # 0.5.18+ split --cuda-graph-max-bs into -decode and -prefill (0.5.20+ keep only those): argparse's prefix
    # matching makes the documented flag ambiguous, so `launch_server` exits at its argument parser
    _case(LLAMA_8B_DOCS, "0.5.23", Status.USAGE, AMBIGUOUS, "srt/server_args.py"),
    _case(LLAMA_70B_PR, "0.5.23", Status.USAGE, AMBIGUOUS, "srt/server_args.py"),
    # SpecForge's Llama-3.3-70B EAGLE3 config derives a 4096-token context; the target's 131072 is longer, and
    # without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 SGLang refuses (ModelConfig._derive_context_length)
    _case(LLAMA_70B_PR, "0.5.12", Status.FAILED, LONGER_CONTEXT, "srt/configs/model_config.py"),
])
def test_a_documented_command_sglang_refuses_at_a_release_is_refused_by_its_own_statement(
        command: Documented, release: str, status: Status, message: str, where: str) -> None:
    outcome = command.evaluate(release)
    assert outcome.status is status and outcome.will_not_start is None, f"{command.citation}\n{outcome_text(outcome)}"
    assert outcome.exception["message"].startswith(message), outcome.headline
    assert outcome.frame["file"] == where, outcome.frame


MXFP4_FAULT = ("bisect-spec fault (docs/fidelity.md, Fidelity limits): SGLang registers 'mxfp4' in its quantization "
               "table at import only when is_cuda() holds then; the simulated box imports SGLang without it, so every "
               "gpt-oss configuration fails at resolution with 'Unknown quantization method: mxfp4'")
MXFP4 = pytest.mark.xfail(strict=True, raises=AssertionError, reason=MXFP4_FAULT)


@pytest.mark.parametrize(("command", "release"), [
    _case(GPT_OSS_120B_COOKBOOK, "0.5.12", marks=MXFP4),
    _case(GPT_OSS_120B_COOKBOOK, "0.5.23", marks=MXFP4),
    _case(GPT_OSS_20B_COOKBOOK, "0.5.12", marks=MXFP4),
    _case(GPT_OSS_20B_COOKBOOK, "0.5.23", marks=MXFP4),
])
def test_a_documented_command_bisect_spec_gets_wrong_passes_once_the_fault_is_fixed(
        command: Documented, release: str) -> None:
    outcome = command.evaluate(release)
    assert outcome.passed, f"{command.citation}\n{outcome_text(outcome)}"  # PASSED, or PASSED UP TO a named GPU step


@pytest.mark.parametrize("release", ["0.5.12", "0.5.23"])
def test_deepseek_v3s_documented_mtp_command_will_not_start_on_one_8_h100_box(release: str) -> None:
    outcome = DEEPSEEK_V3_ON_H100.evaluate(release)
    assert outcome.verdict == "WILL NOT START", f"{DEEPSEEK_V3_ON_H100.citation}\n{outcome_text(outcome)}"
    figures = outcome.will_not_start
    assert figures is not None and figures["cause"] == "weights" and figures["needed"] > figures["available"]

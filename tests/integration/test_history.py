"""No verdict depends on what a worker evaluated before: a history across four models on one worker, then controls,
compared with a fresh worker (:mod:`bisect_spec.workflows.history`; ``scripts/history_check.py`` runs thousands)."""

from __future__ import annotations

from bisect_spec.model.flags import Config
from bisect_spec.workflows.history import Case, history_check
from tests.conftest import require_release

EAGLE3 = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "4"}
#: SGLang's documented DeepSeek-V3 MTP command (docs/basic_usage/deepseek): --tp 8, EAGLE, 3 steps, topk 1, 4 tokens
MTP = {"--tp-size": "8", "--speculative-algorithm": "EAGLE", "--speculative-num-steps": "3",
       "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"}


def test_a_llama_evaluation_first_leaves_deepseek_v3s_mtp_verdict_as_a_fresh_worker_gives_it() -> None:
    # the leak found by the history check: a worker whose first evaluation was Llama's built SGLang's model
    # registry before DeepSeek-V3's modules imported on the CPU, and DeepSeek-V3's MTP then "stopped early: the
    # model registry has no DeepseekV3ForCausalLMNextN here" for good; a fresh worker passed it
    require_release("0.5.23")
    cases = [Case("llama-3.1-8b", "eagle3", (), Config.of(EAGLE3)),
             Case("deepseek-v3", "nextn", (Config.of(MTP),), Config.of(MTP))]
    report = history_check("0.5.23", cases, length=1, seed=0, recheck=0, flags_per_row=0)
    assert report.compared == 1
    assert report.differences == [], report.differences


def test_a_short_random_history_across_four_models_changes_no_control() -> None:
    require_release("0.5.23")
    cases = [Case("deepseek-v3", "nextn", (Config.of(MTP),), Config.of(MTP)),
             Case("kimi-k2.6", "eagle3", (Config.of({"--tp-size": "8", **EAGLE3}),), Config.of({"--tp-size": "8", **EAGLE3})),
             Case("qwen3-32b", "specforge-eagle3-qwen3-32b", (Config.of({"--tp-size": "4", **EAGLE3}),),
                  Config.of({"--tp-size": "4", **EAGLE3})),
             Case("llama-3.1-8b", "eagle3", (Config.of(EAGLE3),), Config.of(EAGLE3))]
    report = history_check("0.5.23", cases, length=40, seed=1, recheck=8)
    assert report.evaluations >= 40 and report.compared >= 4 + 4
    assert report.differences == [], report.differences

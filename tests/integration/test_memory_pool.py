"""The ``memory_pool`` stage on real SGLang releases: SGLang's own ``load_model`` (its dummy loader, on ``meta``)
and ``initialize``'s statements up to ``init_memory_pool``, against the simulated box's memory.

Oracles we did not write: the parameter count of Llama-3.1-8B follows from its public ``config.json`` alone
(the arithmetic below, 8,030,261,248 parameters, the model card's "8B"; bf16 = 2 bytes each), and SGLang's own
``RuntimeError`` and its statement. What the stage adds to the parameters (rotary caches) must stay small.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.report import text
from bisect_spec.runtime.session import Session
from tests.conftest import require_release, shared_session

pytestmark = pytest.mark.sglang

EAGLE3 = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "3", "--speculative-eagle-topk": "1",
          "--speculative-num-draft-tokens": "4"}
PROFILES = Path(__file__).resolve().parents[2] / "bisect_spec" / "data" / "models"
#: What the rotary embedding adds to the parameters: its cos/sin cache for 131,072 positions of 128 dimensions, in
#: float32 where the module takes its CUDA path (64 MiB), and its inverse frequencies
ROTARY_CACHES = 65 * 2**20


def _llama_parameters(tp: int) -> int:
    """Llama-3.1-8B's parameters on one of ``tp`` ranks, from its config.json: embedding and head split by
    vocabulary, attention and MLP by heads and columns, norms whole."""
    config: dict[str, int] = json.loads((PROFILES / "llama-3.1-8b" / "config.json").read_text())
    hidden, layers, inter = config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    vocab = config["vocab_size"]
    per_layer = hidden * (hidden + 2 * kv) // tp + hidden * hidden // tp + 3 * hidden * inter // tp + 2 * hidden
    head = 0 if config.get("tie_word_embeddings") else vocab * hidden // tp
    return vocab * hidden // tp + head + layers * per_layer + hidden


def test_the_parameter_arithmetic_is_the_model_cards() -> None:
    assert _llama_parameters(1) == 8_030_261_248


@pytest.mark.parametrize("release", ["0.5.9", "0.5.12"])
@pytest.mark.parametrize("tp", [1, 2])
def test_the_weights_sglang_builds_on_meta_are_the_checkpoints_parameters(release: str, tp: int) -> None:
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": str(tp), **EAGLE3})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert "memory_pool" in outcome.record["stages_passed"]
    pool = outcome.record["memory_pool"]
    parameters = 2 * _llama_parameters(tp)  # bf16
    assert parameters <= pool["weights_bytes"] < parameters + ROTARY_CACHES  # plus the rotary caches (buffers)
    assert pool["total_bytes"] == 143155 * 2**20  # the H200 profile's memory, as torch reports it
    # what SGLang sized with it: tokens, then the request slots the draft's pool takes
    assert pool["max_total_num_tokens"] > 0
    assert pool["request_slots"] == outcome.record["resolved"]["max_running_requests"]
    shown = text.outcome_text(outcome)
    assert "so this is an upper bound" in shown and text.NOT_CHECKED_AFTER_SIZING in shown


@pytest.mark.parametrize(("release", "function"), [("0.5.9", "init_memory_pool"), ("0.5.12", "__post_init__")])
def test_too_small_a_memory_fraction_fails_with_sglangs_own_error(release: str, function: str) -> None:
    # 0.5.9 raises in init_memory_pool with the user's value; 0.5.10+ in pool_configurator's MemoryPoolConfig
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--mem-fraction-static": "0.1", **EAGLE3})))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.record["stage"] == "memory_pool"
    assert outcome.record["after_weights"] is True
    assert outcome.exception["type"] == "RuntimeError"
    assert outcome.exception["message"].startswith("Not enough memory. Please try to increase --mem-fraction-static.")
    assert release != "0.5.9" or "mem_fraction_static=0.1" in outcome.exception["message"]
    frame = outcome.record["frame"]
    assert frame["function"] == function
    assert outcome.record["memory_pool"]["mem_fraction_static"] == 0.1
    shown = text.outcome_text(outcome)
    assert "memory pool SGLang sized on the simulated box: weights 15.02 GiB per GPU of 139.80 GiB" in shown
    assert "so it fails there too" in shown


@pytest.mark.parametrize(("release", "graphs", "stage", "message"), [
    # 0.5.9's request pool keeps one slot (the capture sizes [1]); the runner then takes 1 // 8 = 0 requests
    ("0.5.9", {}, "target_worker", "max_running_request is zero"),
    # 0.5.10+ size the request pool at 1 // 8 = 0: the CUDA graphs' sizes, which a launch chooses first, refuse it
    ("0.5.12", {}, "cuda_graph_sizes", "capture_bs=[0]"),
    ("0.5.12", {"--disable-cuda-graph": None}, "target_worker", "max_running_request is zero")])
def test_a_pool_sized_for_no_running_request_fails_with_sglangs_own_assert_in_launch_order(
        release: str, graphs: dict[str, str | None], stage: str, message: str) -> None:
    # --max-running-requests 1 over 8 attention-DP ranks (a public benchmark script records "AssertionError:
    # max_running_request is zero" on eight schedulers); 8 leaves each rank one
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    flags = {"--tp-size": "8", "--dp-size": "8", "--enable-dp-attention": None, **EAGLE3, **graphs}
    outcome = session.evaluate(session.with_draft(Config.of({**flags, "--max-running-requests": "1"})))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.record["stage"] == stage
    assert (outcome.exception["type"], outcome.exception["message"]) == ("AssertionError", message)
    file = "srt/managers/tp_worker.py" if stage == "target_worker" else "srt/model_executor/cuda_graph_runner.py"
    assert outcome.record["frame"]["file"] == file
    assert outcome.record["memory_pool"]["max_running_requests"] == 0
    assert "0 running requests" in text.outcome_text(outcome)
    room = session.evaluate(session.with_draft(Config.of({**flags, "--max-running-requests": "8"})))
    assert room.status is Status.PASSED, room.headline
    assert room.record["memory_pool"]["max_running_requests"] == 1


def _in_a_fresh_worker(release: str, flags: Mapping[str, str | None]) -> Outcome:
    """Llama-3.1-8B + EAGLE3 on an H200 box, evaluated first in a worker of its own (never the shared warm one)."""
    target = TargetSpec(release=release, model="llama-3.1-8b", draft="eagle3", hardware="h200").resolve()
    fresh = Session(target, jobs=1, timeout=120, warm="own")
    fresh.start()
    try:
        return fresh.evaluate(fresh.with_draft(Config.of(flags)))
    finally:
        fresh.close()


def test_evaluations_before_leave_the_sizing_as_a_fresh_worker_sees_it() -> None:
    # the load grows cached rotary tables in place (long contexts, many draft tokens): a worker that kept them
    # counted another evaluation's bytes (found by a review: 16,094,076,928 -> 16,096,239,616 B)
    first = _in_a_fresh_worker("0.5.9", EAGLE3)
    session = shared_session("0.5.9", model="llama-3.1-8b", draft="eagle3", hardware="h200")
    for flags in ({"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "16", "--speculative-eagle-topk": "16",
                   "--speculative-num-draft-tokens": "256", "--context-length": "131072"},
                  {"--mem-fraction-static": "0.1", **EAGLE3}, {"--enable-deterministic-inference": None, **EAGLE3}):
        session.evaluate(session.with_draft(Config.of(flags)))
    later = session.evaluate(session.with_draft(Config.of(EAGLE3)))
    assert first.status is later.status is Status.PASSED
    for key in ("memory_pool", "stages_passed", "attention_backends", "needs_gpu"):
        assert first.record.get(key) == later.record.get(key), key


def test_a_draft_run_at_the_attention_tp_width_leaves_the_next_evaluation_its_own_tp_width() -> None:
    # 0.5.20 under DP attention: EAGLE3's draft is built in SGLang's patch_tensor_parallel_group (tp 4 of 8), whose
    # override SGLang's own snapshot_context held by reference; put back, every later evaluation sized Llama at tp 1
    # as at tp 4 (16,060,522,496 -> 4,082,835,456 B of weights: found by a test order)
    first = _in_a_fresh_worker("0.5.20", EAGLE3)
    session = shared_session("0.5.20", model="llama-3.1-8b", draft="eagle3", hardware="h200")
    gathered = session.evaluate(session.with_draft(Config.of(
        {"--tp-size": "8", "--dp-size": "2", "--enable-dp-attention": None, **EAGLE3})))
    assert gathered.record["memory_pool"]["weights_bytes"] < first.record["memory_pool"]["weights_bytes"] / 4
    later = session.evaluate(session.with_draft(Config.of(EAGLE3)))
    assert first.status is later.status is Status.PASSED
    for key in ("memory_pool", "stages_passed", "cuda_graphs", "needs_gpu"):
        assert first.record.get(key) == later.record.get(key), key


@pytest.mark.parametrize(("flags", "named"), [
    ({"--enable-memory-saver": None}, "No module named 'torch_memory_saver'"),  # a GPU box has it: not a verdict
    ({"--torchao-config": "int8wo"}, "No module named 'torchao'"),
    ({"--cpu-offload-gb": "14", "--mem-fraction-static": "0.1"}, "CPU offload"),  # fits on a box: 14 GB offloaded
])
def test_what_the_simulated_box_cannot_follow_stops_the_stage_never_a_verdict(flags: dict[str, str | None],
                                                                             named: str) -> None:
    session = shared_session("0.5.9", model="llama-3.1-8b", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({**flags, **EAGLE3})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert named in outcome.record["needs_gpu"]["memory_pool"]
    assert "memory_pool" not in outcome.record


@pytest.mark.parametrize("release", ["0.5.9", "0.5.12"])  # the loader calls post_load_weights, then _post_load_weights
def test_deepseek_v3_at_tp_8_takes_its_fp8_weights_and_its_post_load_processing_is_skipped_by_name(release: str) -> None:
    # the FP8 checkpoint's per-rank weights: ~79.3 GiB (an Intel Gaudi report of DeepSeek-R1 on 8 ranks
    # measured 79.41 GiB: HabanaAI/vllm-fork#809); the KV-cache scales' processing reads values and changes
    # no size, so the sizing is still SGLang's; the model's own post_load_weights (absorbed MLA matrices,
    # FP8 requantisation: five seconds of arithmetic on meta per evaluation on 0.5.12) is not run, and named
    require_release(release)
    session = shared_session(release, model="deepseek-v3", draft="nextn", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--speculative-algorithm": "EAGLE"})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert "memory_pool" not in (outcome.record.get("needs_gpu") or {})
    pool = outcome.record["memory_pool"]
    assert 78.5 * 2**30 < pool["weights_bytes"] < 80 * 2**30
    assert pool["processing_skipped"] == ["DeepseekV3ForCausalLM.post_load_weights", "Fp8KVCacheMethod"]


def test_a_release_whose_model_module_does_not_import_here_names_the_stop() -> None:
    # 0.4.6's llama module imports neither on the CPU nor as its registry imports it (0.5.1.post3's does, as the
    # registry imports it: there the pool is sized)
    session = shared_session("0.4.6", model="llama-3.1-8b", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of(EAGLE3)))
    assert outcome.status is Status.PASSED, outcome.headline
    assert "does not import here" in outcome.record["needs_gpu"]["memory_pool"]
    assert "memory_pool" not in outcome.record


@pytest.mark.parametrize("release", ["0.5.18", "0.5.20", "0.5.23"])
def test_where_the_scheduler_sizes_the_pools_it_does_so_after_the_draft_as_a_launch_does(release: str) -> None:
    # 0.5.14+: the scheduler builds the target and the draft, then sizes every pool (TpModelWorker.alloc_memory_pool);
    # the sizing counts the weights as 0.5.13 did
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of(EAGLE3)))
    assert outcome.status is Status.PASSED, outcome.headline
    stages = [*outcome.record["stages_passed"], outcome.record["stage"]]
    assert stages.index("attention_backend") < stages.index("draft_model") < stages.index("memory_pool")
    pool = outcome.record["memory_pool"]
    parameters = 2 * _llama_parameters(1)  # bf16
    assert parameters <= pool["weights_bytes"] < parameters + ROTARY_CACHES
    assert pool["max_total_num_tokens"] > 0 and pool["max_running_requests"] > 0
    # the KV pool's copy kernel is declined (as SGLang's NPU pool declines it): the pools are built to the end,
    # and the target's decode graphs are sized against the request pool, after the worker's check, as a launch does
    assert not outcome.record.get("needs_gpu"), outcome.record.get("needs_gpu")
    assert stages.index("memory_pool") < stages.index("target_worker") < stages.index("cuda_graph_sizes")
    graphs = outcome.record["cuda_graphs"]
    assert graphs["num_tokens_per_bs"] == int(EAGLE3["--speculative-num-draft-tokens"])
    assert max(graphs["capture_bs"]) <= pool["max_running_requests"]
    assert graphs["shared_logits_rows"] == max(graphs["capture_bs"]) * graphs["num_tokens_per_bs"]  # 0.5.15+


@pytest.mark.parametrize("release", ["0.5.18", "0.5.23"])
def test_too_small_a_memory_fraction_after_the_drafts_load_fails_with_sglangs_own_words(release: str) -> None:
    # 0.5.14+ check the fraction against the weights first ("Loaded weights leave no GPU memory ..."), with the
    # smallest fraction that leaves some; a real box has less free memory, so its smallest is larger still. The
    # weights are the target's and the draft's (loaded before the pools are sized): the target's alone need 0.108
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--mem-fraction-static": "0.1", **EAGLE3})))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.record["stage"] == "memory_pool"
    assert outcome.exception["type"] == "ValueError"
    assert outcome.exception["message"].startswith(
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.1. Raise "
        "--mem-fraction-static above 0.112")
    assert outcome.record["memory_pool"]["draft_weights_bytes"] > 0
    assert outcome.record["frame"]["function"] == "_profile_available_bytes"
    assert "draft_model" in outcome.record["stages_passed"]


@pytest.mark.parametrize(("release", "running"), [("0.5.18", 0), ("0.5.20", 0), ("0.5.23", 1)])
def test_no_running_request_per_attention_dp_rank_fails_until_sglang_keeps_one(release: str, running: int) -> None:
    # --max-running-requests 1 over 8 attention-DP ranks: 0.5.14 ... 0.5.22 (measured on each) size each rank's
    # requests at 1 // 8 = 0 and TpModelWorker.alloc_memory_pool refuses ("max_running_request is zero", as a
    # public benchmark script records); 0.5.23 keeps one per rank (max(1, 1 // 8)) and goes on
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    flags = {"--tp-size": "8", "--dp-size": "8", "--enable-dp-attention": None, **EAGLE3, "--max-running-requests": "1"}
    outcome = session.evaluate(session.with_draft(Config.of(flags)))
    assert outcome.record["memory_pool"]["max_running_requests"] == running
    if running:
        assert outcome.status is Status.PASSED, outcome.headline
        return
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.record["stage"] == "target_worker"
    assert (outcome.exception["type"], outcome.exception["message"]) == ("AssertionError", "max_running_request is zero")
    assert outcome.record["frame"]["file"] == "srt/managers/tp_worker.py"
    assert outcome.record["frame"]["function"] == "alloc_memory_pool"


def test_a_quantised_moe_whose_processing_runs_sglangs_jit_kernels_on_meta_is_sized_and_claimed() -> None:
    # Kimi-K2.6's INT4 experts repack for Marlin after the load: on 0.5.23 the repack is SGLang's own JIT kernel
    # (sglang.kernels), whose output SGLang's Python allocates before the kernel fills it: on meta the shapes are
    # SGLang's, the kernel writes nothing, the processing runs to its end and the sizing is a verdict
    session = shared_session("0.5.23", model="kimi-k2.6", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", **EAGLE3})))
    assert outcome.verdict == "PASSED", outcome.headline  # every check a CPU can run, ran
    pool = outcome.record["memory_pool"]
    assert "CompressedTensorsFusedMoEMethod" not in pool.get("processing_skipped", [])
    assert 70 * 2**30 < pool["weights_bytes"] < 80 * 2**30  # about 1T parameters in 4 bits, over 8 ranks
    assert pool["max_total_num_tokens"] > 0 and outcome.record["cuda_graphs"]["capture_bs"]
    # half the GPU for weights and cache holds less than the weights: SGLang's own refusal, now a verdict
    short = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--mem-fraction-static": "0.5", **EAGLE3})))
    assert short.verdict == "FAILED", short.headline
    assert "memory" in short.exception["message"].lower() and short.record["stage"] == "memory_pool"


def test_a_quantised_moe_whose_kernel_does_not_import_is_sized_but_not_claimed() -> None:
    # 0.5.18: the Marlin repack's kernel does not import on this machine and SGLang binds a raising stand-in
    # (gptq_kernels._unsupported_kernel: "GPTQ CUDA kernels are unavailable on the current platform"): a GPU install
    # has the kernel, so that is a stop (never SGLang's verdict on the configuration) and the pool is sized, not claimed
    session = shared_session("0.5.18", model="kimi-k2.6", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", **EAGLE3})))
    assert outcome.status is Status.PASSED, outcome.headline
    pool = outcome.record["memory_pool"]
    assert "CompressedTensorsFusedMoEMethod" in pool["processing_skipped"]
    assert 70 * 2**30 < pool["weights_bytes"] < 80 * 2**30
    assert "sized without the post-load processing of CompressedTensorsFusedMoEMethod" in (
        outcome.record["needs_gpu"]["memory_pool"])
    short = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--mem-fraction-static": "0.5", **EAGLE3})))
    assert short.status is Status.PASSED, short.headline  # "Not enough memory" on bytes not known to be SGLang's
    assert "not run" in short.record["needs_gpu"]["memory_pool"]


def test_weights_that_do_not_fit_the_gpu_will_not_start_and_never_claim_sglangs_message() -> None:
    # DeepSeek-V3 on one H200 (tp 1): 627 GiB of weights on a 140 GiB GPU; a real load dies in torch's allocator
    # (CUDA out of memory) while loading, before SGLang sizes anything: WILL NOT START, in torch's words, never
    # SGLang's "Not enough memory" and never a pass
    session = shared_session("0.5.9", model="deepseek-v3", draft="nextn", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "EAGLE"})))
    assert outcome.status is Status.FAILED and outcome.will_not_start is not None, outcome.headline
    assert outcome.verdict == "WILL NOT START"
    assert outcome.will_not_start["cause"] == "weights"
    assert outcome.will_not_start["needed"] > outcome.will_not_start["available"]
    assert "CUDA out of memory" in outcome.exception["message"]
    assert outcome.exception["type"] == "OutOfMemoryError" and not outcome.frame  # no statement of SGLang's
    assert "memory_pool" not in outcome.record
    assert outcome.signature is not None and outcome.signature.kind == "will_not_start"


def test_weights_that_outgrow_the_gpu_while_they_are_built_will_not_start_with_one_signature_per_cause() -> None:
    # Kimi-K2.6 at tp 1 (about 570 GiB) on one 96 GB GPU: a real box runs out of memory while it builds the model;
    # the build on meta ends as soon as its tensors pass the GPU's memory, a sixth of the way through its layers.
    # tp 1 and tp 2 need other byte counts but have one signature: the stage and the cause
    session = shared_session("0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    outcome = session.evaluate(session.with_draft(Config.of(EAGLE3)))
    assert outcome.will_not_start is not None, outcome.headline
    words = outcome.exception["message"]
    assert words.startswith("the weights built so far take 95.") and "more than its 95.59 GiB" in words, words
    assert "CUDA out of memory" in words and "while it builds the model" in words
    assert outcome.will_not_start["at_least"] is True
    assert "memory_pool" not in outcome.record
    wider = session.evaluate(session.with_draft(Config.of({**EAGLE3, "--tp-size": "2"})))
    assert wider.will_not_start is not None and wider.signature == outcome.signature, wider.headline
    fits = session.evaluate(session.with_draft(Config.of({**EAGLE3, "--tp-size": "8"})))
    assert fits.passed, fits.headline


def test_another_device_than_the_gpu_stops_the_stage_before_anything_is_built() -> None:
    # --device cpu builds the model for real, in this machine's memory (the main job's sweep was killed by the
    # kernel building Kimi-K2.6's 600 GB there): never built, named
    session = shared_session("0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    outcome = session.evaluate(session.with_draft(Config.of({"--device": "cpu", **EAGLE3})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert outcome.record["needs_gpu"]["memory_pool"].startswith("--device cpu: the pool is sized against")

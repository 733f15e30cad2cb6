"""The stages after the memory pool on real SGLang releases: the batch sizes the target's CUDA graphs are captured
for (``cuda_graph_sizes``: SGLang's own ``init_device_graphs`` and its graph runner's ``__init__`` up to
``get_batch_sizes_to_capture``), and the MoE configuration the scheduler sets before it builds its worker.

Oracle we did not write: a public benchmark script's notes (a GLM-5.2 + MTP sweep on 8×B200, measured
2026-07-28) record ``AssertionError: capture_bs=[]`` where gathered buffers make every captured batch's tokens
(batch size × the draft's six tokens) a multiple of the attention-TP width and ``--cuda-graph-max-bs 1`` leaves
no such size; SGLang's own statement and message are the verdict here.
"""

from __future__ import annotations

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.report import text
from tests.conftest import require_release, shared_session

pytestmark = pytest.mark.sglang

#: EAGLE3 with five steps of one token: six tokens per request verified (MTP's width in the script)
SIX_TOKENS = {"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "5", "--speculative-eagle-topk": "1",
              "--speculative-num-draft-tokens": "6"}
#: DP attention at tp 8 over 2 ranks: attention TP 4, tokens gathered (``require_gathered_buffer``)
GATHERED = {"--tp-size": "8", "--dp-size": "2", "--enable-dp-attention": None}


#: where each release family chooses the sizes: 0.4.6 ... 0.5.13 in the runner's ``CudaGraphRunner.__init__``; 0.5.14+
#: after the pools are built, from the decode-graph setup (0.5.14's runner method, 0.5.16+'s ``capture_decode_graph``,
#: 0.5.23's ``DecodeCudaGraphRunner.__init__``), all through ``get_batch_sizes_to_capture``
SIZES_FILE = {"0.5.9": "srt/model_executor/cuda_graph_runner.py", "0.5.12": "srt/model_executor/cuda_graph_runner.py",
              "0.5.18": "srt/model_executor/runner/base_cuda_graph_runner.py",
              "0.5.20": "srt/model_executor/runner/base_cuda_graph_runner.py",
              "0.5.23": "srt/model_executor/runner/base_cuda_graph_runner.py"}


def max_bs(release: str) -> str:
    """The flag that caps the decode graphs' batch size (0.5.20+ split it by phase; the old name is then ambiguous)."""
    return "--cuda-graph-max-bs-decode" if release in ("0.5.20", "0.5.23") else "--cuda-graph-max-bs"


@pytest.mark.parametrize("release", sorted(SIZES_FILE))
def test_no_batch_size_whose_tokens_divide_by_the_attention_tp_width_fails_with_sglangs_assert(release: str) -> None:
    require_release(release)
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({**GATHERED, **SIX_TOKENS, max_bs(release): "1"})))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.record["stage"] == "cuda_graph_sizes" and outcome.record["after_weights"] is True
    assert (outcome.exception["type"], outcome.exception["message"]) == ("AssertionError", "capture_bs=[]")
    frame = outcome.record["frame"]
    assert (frame["file"], frame["function"]) == (SIZES_FILE[release], "get_batch_sizes_to_capture")
    shown = text.outcome_text(outcome)  # the figures the check read, with no claim about memory it did not make
    assert "memory pool SGLang sized on the simulated box" in shown and "less free memory" not in shown
    # every speculative MHA pool builds its KV-copy kernel (declined, as SGLang's NPU pool declines it): the pools
    # are built to the end, so nothing after them stops short
    assert not outcome.record.get("needs_gpu"), outcome.record.get("needs_gpu")
    # two requests of six tokens divide by 4: SGLang keeps that size
    room = session.evaluate(session.with_draft(Config.of({**GATHERED, **SIX_TOKENS, max_bs(release): "2"})))
    assert room.status is Status.PASSED, room.headline
    # 0.5.15+ first size the logits buffer every graph shares, SGLang's GraphSharedOutput: 2 requests x 6 tokens
    shared = {"shared_logits_rows": 12} if release in ("0.5.18", "0.5.20", "0.5.23") else {}
    assert room.record["cuda_graphs"] == {"capture_bs": [2], "num_tokens_per_bs": 6, **shared}
    assert "cuda_graph_sizes" in room.record["stages_passed"] or room.record["stage"] == "cuda_graph_sizes"
    assert "CUDA graphs SGLang would capture: 1 batch sizes (2), 6 tokens per request" in text.outcome_text(room)
    if shared:  # SGLang keeps its shared buffer class-wide and reuses a larger one: each evaluation sizes its own
        wider = session.evaluate(session.with_draft(Config.of({**GATHERED, **SIX_TOKENS, max_bs(release): "4"})))
        assert wider.record["cuda_graphs"] == {"capture_bs": [2, 4], "num_tokens_per_bs": 6, "shared_logits_rows": 24}
        again = session.evaluate(session.with_draft(Config.of({**GATHERED, **SIX_TOKENS, max_bs(release): "2"})))
        assert again.record["cuda_graphs"] == room.record["cuda_graphs"]


@pytest.mark.parametrize("release", ["0.5.9", "0.5.20", "0.5.23"])
def test_without_cuda_graphs_sglang_sizes_none_and_the_workers_check_still_runs(release: str) -> None:
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200")
    flags = {**GATHERED, **SIX_TOKENS, max_bs(release): "1", "--disable-cuda-graph": None}
    outcome = session.evaluate(session.with_draft(Config.of(flags)))
    assert outcome.status is Status.PASSED, outcome.headline
    assert outcome.record["cuda_graphs"] == {"disabled": True}
    assert "target_worker" in outcome.record["stages_passed"] or outcome.record["stage"] == "target_worker"
    starved = session.evaluate(session.with_draft(Config.of({**flags, "--max-running-requests": "1"})))
    if release == "0.5.23":  # 0.5.23 no longer divides the requests by the attention-DP width: one request each
        assert starved.status is Status.PASSED, starved.headline
        assert starved.record["memory_pool"]["max_running_requests"] == 1
        return
    assert starved.status is Status.FAILED, starved.headline
    assert starved.record["stage"] == "target_worker"
    assert starved.exception["message"] == "max_running_request is zero"


def test_the_moe_all_to_all_backend_the_scheduler_sets_is_the_one_the_build_uses() -> None:
    # the scheduler runs initialize_moe_config(server_args) before its worker: with --moe-a2a-backend deepep,
    # DeepSeek's MoE layers are DeepEP's, whose package a GPU install has and this machine lacks (a named stop;
    # before, the build used the default layers and sized a pool SGLang would not have built)
    session = shared_session("0.5.9", model="deepseek-v3", draft="nextn", hardware="h200")
    flags = {"--tp-size": "8", "--ep-size": "8", "--speculative-algorithm": "EAGLE"}
    deepep = session.evaluate(session.with_draft(Config.of({**flags, "--moe-a2a-backend": "deepep"})))
    assert deepep.status is Status.PASSED, deepep.headline
    assert "DeepEP is not installed" in deepep.record["needs_gpu"]["memory_pool"]
    assert "memory_pool" not in deepep.record
    plain = session.evaluate(session.with_draft(Config.of(flags)))
    assert plain.status is Status.PASSED, plain.headline
    assert "memory_pool" in plain.record and "memory_pool" not in (plain.record.get("needs_gpu") or {})

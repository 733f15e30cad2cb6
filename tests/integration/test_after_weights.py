"""Stages a real launch runs after the target's weights load, on real SGLang releases.

The oracle is a public report we did not write: sglang#9330 (0.5.1, DeepSeek-V3 with EAGLE on 8xB200,
``--attention-backend trtllm_mla --prefill-attention-backend flashinfer``) died after minutes of loading with
``AssertionError: Currently HybridAttentionBackend does not support speculative decoding.``, raised by
``ModelRunner._get_attention_backend`` once the weights and the memory pool were up. 0.5.1.post3 has the
same statement (0.4.9.post5 … 0.5.1.post3 do; 0.5.2 dropped it).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from bisect_spec import api
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.reduce.shrink import Budget
from bisect_spec.runtime import environments, store
from bisect_spec.runtime.session import Session
from tests.conftest import require_release, shared_session

pytestmark = pytest.mark.sglang

RELEASE = "0.5.1.post3"
ISSUE_9330 = {"--tp-size": "8", "--speculative-algorithm": "EAGLE", "--attention-backend": "trtllm_mla",
              "--prefill-attention-backend": "flashinfer"}
MESSAGE = "Currently HybridAttentionBackend does not support speculative decoding."


def _session() -> api.Session:
    require_release(RELEASE)
    return shared_session(RELEASE, model="deepseek-v3", draft="nextn", hardware="b200")


def test_issue_9330_fails_in_the_attention_backend_choice_after_the_weights() -> None:
    session = _session()
    outcome = session.evaluate(session.with_draft(Config.of(ISSUE_9330)))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception["type"] == "AssertionError"
    assert outcome.exception["message"] == MESSAGE
    frame = outcome.record["frame"]
    assert (frame["file"], frame["function"]) == ("srt/model_executor/model_runner.py", "_get_attention_backend")
    assert "speculative_algorithm is None" in frame["statement"]
    assert outcome.record["stage"] == "attention_backend"
    assert outcome.record["after_weights"] is True
    assert "model_runner" in outcome.record["stages_passed"]


def test_the_same_box_passes_with_one_backend_and_names_the_backend_sglang_chose() -> None:
    session = _session()
    one_backend = {k: v for k, v in ISSUE_9330.items() if k != "--prefill-attention-backend"}
    outcome = session.evaluate(session.with_draft(Config.of(one_backend)))
    assert outcome.status is Status.PASSED, outcome.headline
    assert outcome.record["attention_backends"] == ["TRTLLMMLABackend"]
    assert "attention_backend" in outcome.record["stages_passed"]
    # a hybrid of two backends is SGLang's to build when nothing is speculative: both halves and the hybrid
    plain = {k: v for k, v in ISSUE_9330.items() if k != "--speculative-algorithm"}
    hybrid = session.evaluate(Config.of(plain))
    assert hybrid.status is Status.PASSED, hybrid.headline
    assert hybrid.record["stage"] == "attention_backend"
    assert sorted(hybrid.record["attention_backends"]) == ["FlashInferMLAAttnBackend", "HybridAttnBackend",
                                                           "TRTLLMMLABackend"]


def test_evaluations_after_a_stood_in_backend_still_see_sglangs_own_modules() -> None:
    session = _session()
    session.evaluate(session.with_draft(Config.of(ISSUE_9330)))
    import_check = session.evaluate(Config.of({"--tp-size": "8", "--attention-backend": "flashinfer"}))
    assert import_check.status is Status.PASSED, import_check.headline
    assert import_check.record["attention_backends"] == ["FlashInferMLAAttnBackend"]


def test_probe_prints_the_stage_and_a_pass_says_how_far_it_got(tmp_path: Path) -> None:
    require_release(RELEASE)
    spec = api.TargetSpec(release=RELEASE, model="deepseek-v3", draft="nextn", hardware="b200")
    flags = [token for item in ISSUE_9330.items() for token in item]
    with api.ProbeSession(spec) as probe:
        failed = probe.probe(flags)
        passed = probe.probe(flags[:-2])
    from bisect_spec.report.text import outcome_text

    text = outcome_text(failed.outcome)
    assert MESSAGE in text and "attention-backend selection, after the weights load" in text
    said = outcome_text(passed.outcome)  # a full pass, or a pass that says where it stopped and why
    assert said.startswith("verdict:  PASSED  every check a CPU can run, ran (up to ") or (
        said.startswith("verdict:  PASSED UP TO ") and " stopped early: " in said), said


STRATEGY = """
include = ["--speculative-algorithm", "--attention-backend", "--prefill-attention-backend", "--tp-size"]
strength = 2
core = ["--speculative-algorithm"]
core_strength = 2
random_budget = 0
branches = false
[values]
"--speculative-algorithm" = ["", "EAGLE"]
"--attention-backend" = ["", "trtllm_mla"]
"--prefill-attention-backend" = ["", "flashinfer"]
"--tp-size" = ["8"]
"""


def test_a_sweep_over_those_flags_finds_the_assertion_and_counts_stages(tmp_path: Path) -> None:
    require_release(RELEASE)
    strategy = tmp_path / "hybrid.toml"
    strategy.write_text(STRATEGY)
    spec = api.TargetSpec(release=RELEASE, model="deepseek-v3", draft="nextn", hardware="b200")
    result = api.sweep(spec, strategy=str(strategy), runs_dir=tmp_path / "runs", jobs=2, use_cache=False)
    found = [s for s in result.summary["signatures"] if MESSAGE in (s.get("message") or s.get("headline") or "")
             or (s.get("example_frame") or {}).get("function") == "_get_attention_backend"]
    assert found, [s.get("headline") for s in result.summary["signatures"]]
    stages = result.summary["stages"]
    journal = store.read_journal(result.run_path)
    passes = [e["outcome"] for e in journal if e["outcome"]["status"] == "passed"]
    passed_at = [o["stage"] for o in passes if o["stage"] not in (o.get("needs_gpu") or {})]
    stopped_at = [o["stage"] for o in passes if o["stage"] in (o.get("needs_gpu") or {})]
    assert stages["passed"] == {stage: passed_at.count(stage) for stage in set(passed_at)}
    assert stages["stopped"] == {stage: stopped_at.count(stage) for stage in set(stopped_at)}
    assert stages["failed"].get("attention_backend", 0) >= 1
    from bisect_spec.report.text import summary_markdown, summary_text

    for text in (summary_text(result.summary), summary_markdown(result.summary)):  # the terminal wraps long lines
        assert f"failed in {stages['failed']['attention_backend']} attention_backend (+w)" in " ".join(text.split())


def test_issue_36536_multi_layer_eagle_fails_in_the_draft_workers_constructor() -> None:
    # sglang#36536 (0.5.18): --enable-multi-layer-eagle on a Llama target; resolution fills in 5 steps and
    # 8 draft tokens, and the draft worker refuses them once the target is up
    require_release("0.5.18")
    session = shared_session("0.5.18", model="llama-3.1-8b", draft="eagle", hardware="h100", gpus=1)
    outcome = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "EAGLE",
                                                             "--enable-multi-layer-eagle": None})))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception["type"] == "AssertionError"
    assert outcome.exception["message"] == ("multi-layer EAGLE requires speculative_num_draft_tokens == "
                                            "speculative_num_steps + 1, got 8 and 5")
    assert outcome.record["frame"]["file"] == "srt/speculative/multi_layer_eagle_worker_v2.py"
    assert outcome.record["stage"] == "draft_worker" and outcome.record["after_weights"] is True
    # the numbers the draft worker asks for pass it, up to what only a loaded server has
    fixed = session.evaluate(session.with_draft(Config.of({
        "--speculative-algorithm": "EAGLE", "--enable-multi-layer-eagle": None, "--speculative-num-steps": "5",
        "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "6"})))
    assert fixed.status is Status.PASSED, fixed.headline
    assert "draft_model" in [*fixed.record["stages_passed"], fixed.record["stage"]] and fixed.record.get("draft_worker")
    assert "draft_worker" in fixed.record["stages_passed"]
    # and the worker's embedding and head sharing, once per step's draft runner, runs to its end
    assert "draft_model" not in (fixed.record.get("needs_gpu") or {}), fixed.record.get("needs_gpu")


def test_multi_layer_eagle_shares_the_embedding_with_every_steps_draft_in_sglangs_own_loop() -> None:
    # 0.5.21+ share the target's embedding and head inside `for i in range(self.speculative_num_steps)`, with a
    # local read before the loop (`target_runner = ...`): the stage runs the whole loop on one draft per step
    require_release("0.5.23")
    session = shared_session("0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of({
        "--speculative-algorithm": "EAGLE", "--enable-multi-layer-eagle": None, "--speculative-num-steps": "3",
        "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert outcome.record["draft_worker"] == "MultiLayerEagleWorkerV2"
    assert "draft_model" in [*outcome.record["stages_passed"], outcome.record["stage"]]
    # the loop ran to its end: a stop there, if any, is the draft build's (0.5.23's Llama MLP imports a CuTe DSL kernel)
    stop = (outcome.record.get("needs_gpu") or {}).get("draft_model", "")
    assert not stop or stop.startswith("building LlamaForCausalLMEagle3 on meta"), stop


def test_multi_layer_eagle_without_a_draft_fails_where_a_steps_draft_lacks_set_embed_and_head() -> None:
    # 0.5.11: with no draft path the draft's class is the target's own; Qwen3MoeForCausalLM has no
    # set_embed_and_head, and the multi-layer worker's loop over its steps calls it on each step's draft
    # (the target's own weights as the draft's: at SGLang's default --mem-fraction-static the draft's load runs out
    # of memory first, up to 0.5.13, where the target's pool took what the draft needs; at 0.45 both fit)
    require_release("0.5.11")
    session = shared_session("0.5.11", model="qwen3-235b-a22b", draft=None, hardware="h200")
    flags = {"--tp-size": "8", "--speculative-algorithm": "EAGLE", "--enable-multi-layer-eagle": None,
             "--speculative-num-steps": "3", "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"}
    oom = session.evaluate(Config.of(flags))
    assert oom.verdict == "WILL NOT START" and (oom.will_not_start or {}).get("cause") == "draft", oom.headline
    outcome = session.evaluate(Config.of({**flags, "--mem-fraction-static": "0.45"}))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception["type"] == "AttributeError"
    assert outcome.exception["message"] == "'Qwen3MoeForCausalLM' object has no attribute 'set_embed_and_head'"
    frame = outcome.record["frame"]
    assert (frame["file"], frame["function"]) == ("srt/speculative/multi_layer_eagle_worker_v2.py", "init_lm_head")
    assert "set_embed_and_head(embed, head)" in frame["statement"]
    assert outcome.record["stage"] == "draft_model" and outcome.record["after_weights"] is True


@pytest.mark.parametrize("release", ["0.5.1.post3", "0.5.3", "0.5.9", "0.5.12", "0.5.18", "0.5.23"])
def test_an_mla_only_backend_on_a_non_mla_model_is_refused_when_sglang_chooses_it(release: str) -> None:
    # SGLang's own expectation (its registry raises it from 0.5.3, as its unit test
    # test/registered/unit/layers/attention/test_attention_backend_registry.py asks of such refusals; its
    # ModelRunner before): trtllm_mla on a non-MLA model is refused only when the backend is chosen, after
    # the weights load; resolution lets the pair through on a B200 in every release family here
    require_release(release)
    session = shared_session(release, model="llama-3.1-8b", draft=None, hardware="b200", gpus=1)
    outcome = session.evaluate(Config.of({"--attention-backend": "trtllm_mla"}))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception == {**outcome.exception, "type": "ValueError",
                                 "message": "trtllm_mla backend can only be used with MLA models."}
    assert outcome.record["stage"] == "attention_backend"


@pytest.mark.parametrize("release", ["0.5.11", "0.5.12"])
def test_issue_23490_the_eagle3_draft_inherits_the_targets_mla_only_backend(release: str) -> None:
    # sglang#23490 (Kimi-K2.6 + EAGLE3 with trtllm_mla, between 0.5.10.post1 and 0.5.11): the target's runner
    # takes trtllm_mla (Kimi is MLA), the draft's runner inherits it, and the draft (a Llama-shaped EAGLE3
    # head) is not MLA: SGLang's registry refuses it while the draft worker builds its runner
    require_release(release)
    session = shared_session(release, model="kimi-k2.6", draft="eagle3", hardware="b200")
    outcome = session.evaluate(session.with_draft(Config.of({
        "--tp-size": "4", "--speculative-algorithm": "EAGLE3", "--attention-backend": "trtllm_mla"})))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception["message"] == "trtllm_mla backend can only be used with MLA models."
    assert outcome.record["frame"]["function"] == "create_trtllm_mla_backend"
    assert outcome.record["stage"] == "draft_worker"
    assert outcome.record["attention_backends"] == ["TRTLLMMLABackend"]  # the target's own choice passed


def test_issue_36528_eagle3_without_a_draft_fails_where_the_draft_shares_the_embedding() -> None:
    # sglang#36528 (about 0.5.18): EAGLE3 with no draft model path; the target checkpoint is built as the draft,
    # and its class (Qwen3ForCausalLM here, Qwen2 in the report) has no set_embed: SGLang's own init_lm_head
    # raises it once both models are built
    require_release("0.5.18")
    session = shared_session("0.5.18", model="qwen3-8b", draft=None, hardware="h100", gpus=1)
    outcome = session.evaluate(Config.of({"--speculative-algorithm": "EAGLE3"}))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception["type"] == "AttributeError"
    assert outcome.exception["message"] == "'Qwen3ForCausalLM' object has no attribute 'set_embed'"
    assert outcome.record["frame"]["file"] == "srt/speculative/eagle_worker_v2.py"
    assert outcome.record["frame"]["function"] == "init_lm_head"
    assert outcome.record["stage"] == "draft_model" and outcome.record["after_weights"] is True
    assert outcome.record["model_classes"] == {"target": "Qwen3ForCausalLM", "draft": "Qwen3ForCausalLM"}


def test_a_published_eagle3_draft_passes_the_embedding_sharing_its_class_has() -> None:
    # the same target with its EAGLE3 head: the draft's class (LlamaForCausalLMEagle3) has what init_lm_head
    # calls; the stage ends where the method would read the built model's own values
    require_release("0.5.18")
    session = shared_session("0.5.18", model="qwen3-32b", draft="specforge-eagle3-qwen3-32b", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "2", "--speculative-algorithm": "EAGLE3"})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert "draft_model" in [*outcome.record["stages_passed"], outcome.record["stage"]]
    assert outcome.record["model_classes"] == {"target": "Qwen3ForCausalLM", "draft": "LlamaForCausalLMEagle3"}


@pytest.mark.parametrize(("release", "fails"), [("0.5.9", True), ("0.5.11", False), ("0.5.23", False)])
def test_kimi_k2_6_with_eagle3_needs_the_capture_hook_its_class_gained_after_0_5_9(release: str, fails: bool) -> None:
    # SGLang's own sources: 0.5.9's KimiK25ForConditionalGeneration has no set_eagle3_layers_to_capture, which
    # the target runner calls for EAGLE3 (model_runner.py, after the target's attention backends); 0.5.10 adds it
    require_release(release)
    session = shared_session(release, model="kimi-k2.6", draft="eagle3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--speculative-algorithm": "EAGLE3"})))
    if fails:
        assert outcome.status is Status.FAILED, outcome.headline
        assert outcome.exception["message"] == ("'KimiK25ForConditionalGeneration' object has no attribute "
                                                "'set_eagle3_layers_to_capture'")
        assert outcome.record["stage"] == "target_model"
        assert outcome.record["frame"]["file"] == "srt/model_executor/model_runner.py"
        # the release's own order: the target's attention backends are built before the capture is asked for
        assert "attention_backend" in outcome.record["stages_passed"]
    else:
        assert outcome.status is Status.PASSED, outcome.headline
        assert "target_model" in outcome.record["stages_passed"]
        assert outcome.record["model_classes"]["target"] == "KimiK25ForConditionalGeneration"


def test_a_model_module_that_does_not_import_here_is_read_from_its_source() -> None:
    # 0.5.3's model modules import vllm at module level: the class is read from its source, and DeepSeek-V3's
    # has no EAGLE3 capture hook yet (0.5.4.post2 adds it; sglang PRs #8602, #9698): SGLang's own statement fails
    require_release("0.5.3")
    session = shared_session("0.5.3", model="deepseek-v3", draft="specforge-eagle3-deepseek-v3", hardware="h200")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--speculative-algorithm": "EAGLE3"})))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception["message"] == ("'DeepseekV3ForCausalLM' object has no attribute "
                                            "'set_eagle3_layers_to_capture'")
    assert outcome.record["stage"] == "target_model"
    assert outcome.record["model_classes_from_source"] == ["target"]
    assert outcome.record["frame"]["file"] == "srt/model_executor/model_runner.py"


def test_a_nextn_draft_of_the_target_s_own_path_leaves_the_next_evaluation_its_target_class() -> None:
    # SGLang's config cache hands one hf_config to every ModelConfig of a path, and NEXTN's draft config (the
    # target's own path) renames architectures[0] in place: the evaluation puts it back, so the same worker's
    # next evaluation still meets DeepseekV3ForCausalLM as the target
    require_release("0.5.12")
    session = shared_session("0.5.12", model="deepseek-v3", draft="nextn", hardware="h200")
    nextn = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--speculative-algorithm": "NEXTN"})))
    assert nextn.record.get("model_classes") == {"target": "DeepseekV3ForCausalLM",
                                                 "draft": "DeepseekV3ForCausalLMNextN"}, (nextn.headline, nextn.record)
    again = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--speculative-algorithm": "NEXTN",
                                                           "--mem-fraction-static": "0.8"})))
    assert again.record.get("model_classes") == nextn.record["model_classes"], again.headline


def test_shrink_of_the_no_draft_failure_searches_fixes_without_a_draft_to_add(tmp_path: Path) -> None:
    # with no draft profile there is no draft path to add: the nearest-working search must not offer one
    # (it used to stop the whole shrink with "draft 'none' has no draft model path")
    require_release("0.5.18")
    spec = api.TargetSpec(release="0.5.18", model="qwen3-8b", draft=None, hardware="h100", gpus=1)
    report = api.shrink(["--speculative-algorithm", "EAGLE3"], spec, budget=Budget(60, 120), out_dir=tmp_path)
    data = report.to_dict()
    assert data["signature"]["exc_type"] == "AttributeError"
    assert data["minimal_argv"] == ["--speculative-algorithm", "EAGLE3"]
    assert all("--speculative-draft-model-path" not in " ".join(fix.get("argv", [])) for fix in data.get("fixes") or [])


def test_a_backend_that_reads_the_memory_pool_stops_its_stage_naming_the_step_not_run() -> None:
    # On a box without sgl_kernel (a real H200 with a plain PyTorch image, 2026-12-04) the minicpm backend's
    # module imports, and its factory reads the runner's token_to_kv_pool, which SGLang's alloc_memory_pool sets
    # after the weights. That read used to be a tool fault (crashed) on the simulated side and a pass elsewhere:
    # it stops the stage, names the step, and the draft worker's stage still runs.
    require_release("0.5.23")
    target = api.TargetSpec(release="0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h200", gpus=1).resolve()
    bare = {**(target.hardware.record or {}), "simulate_packages": False}
    target = dataclasses.replace(target, hardware=dataclasses.replace(target.hardware, record=bare))
    with Session(target, timeout=120) as session:
        session.start()
        outcome = session.evaluate(session.with_draft(Config.of({"--attention-backend": "minicpm_flashinfer",
                                                                 "--speculative-algorithm": "NGRAM"})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert outcome.record.get("tool_fault") is None
    stop = outcome.record["needs_gpu"]["attention_backend"]
    assert stop.startswith("reads ModelRunner.token_to_kv_pool, which ModelRunner.") and "memory_pool" in stop, stop
    assert "draft_worker" in outcome.record["stages_passed"]  # then, on 0.5.14+, the pool


@pytest.mark.parametrize("release", ["0.5.18", "0.5.20", "0.5.23"])
def test_the_draft_worker_builds_its_draft_runner_on_the_parallel_groups_the_target_built(release: str) -> None:
    # From 0.5.18 the EAGLE v2 worker reads the parallel groups init_torch_distributed builds on a box (the
    # pipeline group, 0.5.19+ the draft's own pipeline group of one) and the target worker's seed: with the
    # groups stood in (sizes and ranks only) it reaches the draft's runner and its own backend choice, as on
    # 0.5.17 and older. Twice in one worker: 0.5.18 has publish without snapshot_context, and putting its
    # context back must keep get_parallel()'s object (a copy in its place left the second evaluation unpublished).
    require_release(release)
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200", gpus=1)
    config = session.with_draft(Config.of({"--speculative-algorithm": "EAGLE3"}))
    first, second = session.evaluate(config), session.evaluate(config)
    for outcome in (first, second):
        assert outcome.status is Status.PASSED, outcome.headline
        assert "draft_worker" not in (outcome.record.get("needs_gpu") or {}), outcome.record.get("needs_gpu")
        assert outcome.record["draft_attention_backends"] == ["FlashAttentionBackend"]
        assert "draft_model" in [*outcome.record["stages_passed"], outcome.record["stage"]]


def test_a_collective_on_a_stood_in_group_stops_the_stage_naming_it() -> None:
    from bisect_spec.inside import model_classes
    from bisect_spec.inside.launch import parallel_groups

    group = parallel_groups._GroupStandIn("pp", 2)
    assert (group.world_size, group.rank_in_group, group.is_first_rank, group.is_last_rank) == (2, 0, True, False)
    with pytest.raises(model_classes.NotLoaded, match="pp group's all_reduce"):
        group.all_reduce  # noqa: B018
    assert parallel_groups._GroupStandIn("self_pp", 1).is_last_rank


def test_issue_23490_as_reported_the_draft_inherits_the_b200_default_and_the_reporters_way_out_is_offered() -> None:
    # sglang#23490 (Kimi-K2.6 + EAGLE3, tp 4, GB300; no attention flag given): on a Blackwell box SGLang picks
    # trtllm_mla for Kimi, and the EAGLE3 head (Llama-shaped) inherits it; 0.5.23's own resolution gives a draft
    # its own backend only for Kimi K3 and NVFP4 KV caches. The reporter's workaround,
    # --speculative-draft-attention-backend trtllm_mha, keeps the algorithm, the draft and the target's backend;
    # the probe's next step must be that one (not a change of algorithm, not the target's backend).
    from bisect_spec.workflows.probe import next_step

    require_release("0.5.23")
    session = shared_session("0.5.23", model="kimi-k2.6", draft="eagle3", hardware="b200")
    # a B200 stands in for the reporter's GB300 (288 GB): at tp 4 its 141.9 GiB of weights per GPU leave no KV cache
    # under SGLang's default fraction (0.770; "Raise --mem-fraction-static above 0.793", measured), so a larger one
    config = session.with_draft(Config.of({"--tp-size": "4", "--speculative-algorithm": "EAGLE3",
                                           "--mem-fraction-static": "0.88"}))
    outcome = session.evaluate(config)
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.exception["message"] == "trtllm_mla backend can only be used with MLA models."
    assert outcome.record["stage"] == "draft_worker"
    assert outcome.record["attention_backends"] == ["TRTLLMMLABackend"]
    fix = next_step(session, config, outcome)
    assert fix is not None and fix["keeps_intent"]
    assert fix["edits"] == ["add --speculative-draft-attention-backend trtllm_mha"], fix["edits"]
    fixed = session.evaluate(Config.from_argv(fix["argv"]))
    assert fixed.passed and fixed.record["attention_backends"] == ["TRTLLMMLABackend"]
    assert fixed.record["draft_attention_backends"] == ["TRTLLMHAAttnBackend"]


def test_issue_9330s_next_step_edits_what_was_typed_rather_than_adding_a_backend_over_it() -> None:
    # the user typed both backends; "add --decode-attention-backend flashinfer" also passes, but it sets aside the
    # typed --attention-backend while looking like an addition: the target's backend flags are searched only
    # where none was typed
    from bisect_spec.workflows.probe import next_step

    session = _session()
    config = session.with_draft(Config.of(ISSUE_9330))
    fix = next_step(session, config, session.evaluate(config))
    assert fix is not None and fix["keeps_intent"], fix
    assert not any(edit.startswith("add --") and "attention-backend" in edit for edit in fix["edits"]), fix["edits"]


@pytest.mark.parametrize(("release", "refused"), [("0.5.9", True), ("0.5.12", False)])
def test_a_two_layer_eagle3_head_is_refused_by_its_own_class_when_the_draft_is_built(
        release: str, refused: bool, tmp_path: Path) -> None:
    # SpecForge#129 (2025-08, a trained Qwen3-Coder EAGLE3 head): "eagle3 only supports one layer". The draft's
    # class refuses its config in __init__, once the target's weights are up; 0.5.12 builds heads of any depth
    require_release(release)
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h200", gpus=1)
    assert session.target.draft is not None and session.target.draft.path is not None
    config = json.loads((Path(session.target.draft.path) / "config.json").read_text())
    config["num_hidden_layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    outcome = session.evaluate(Config.of({"--speculative-algorithm": "EAGLE3",
                                          "--speculative-draft-model-path": str(tmp_path)}))
    if not refused:
        assert outcome.status is Status.PASSED, outcome.headline
        assert "draft_model" in [*outcome.record["stages_passed"], outcome.record["stage"]]
        assert "draft_model" not in (outcome.record.get("needs_gpu") or {}), outcome.record.get("needs_gpu")  # built
        return
    assert outcome.status is Status.FAILED, outcome.headline
    assert (outcome.exception["type"], outcome.exception["message"]) == (
        "ValueError", "EAGLE3 currently only supports 1 layer")
    frame = outcome.record["frame"]
    assert (frame["file"], frame["function"]) == ("srt/models/llama_eagle3.py", "__init__")
    assert outcome.record["stage"] == "draft_model" and outcome.record["after_weights"] is True
    # the published one-layer head builds, and the stage goes on to the embedding sharing
    one_layer = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "EAGLE3"})))
    assert one_layer.status is Status.PASSED, one_layer.headline
    assert "draft_model" not in (one_layer.record.get("needs_gpu") or {}), one_layer.record.get("needs_gpu")


def test_a_nextn_draft_is_built_on_the_attention_dp_sglang_initialises_after_the_groups() -> None:
    # DeepSeek-V3's NextN layer reads the attention-DP rank while it is built; SGLang's own initialize_dp_attention
    # sets it once init_torch_distributed has the groups ("dp attention not initialized!" without it)
    require_release("0.5.18")
    session = shared_session("0.5.18", model="deepseek-v3", draft="nextn", hardware="b200")
    outcome = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--speculative-algorithm": "EAGLE"})))
    assert outcome.status is Status.PASSED, outcome.headline
    assert "draft_model" in [*outcome.record["stages_passed"], outcome.record["stage"]]
    assert "draft_model" not in (outcome.record.get("needs_gpu") or {}), outcome.record.get("needs_gpu")
    again = session.evaluate(session.with_draft(Config.of({"--tp-size": "8", "--speculative-algorithm": "EAGLE",
                                                           "--speculative-num-steps": "2", "--speculative-eagle-topk": "1",
                                                           "--speculative-num-draft-tokens": "3"})))
    assert again.status is Status.PASSED and "draft_model" not in (again.record.get("needs_gpu") or {}), again.record



DP_STATE_SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, {root!r})
    from bisect_spec.inside.evaluator import Evaluator

    spec = json.loads({spec!r})
    evaluator = Evaluator(spec["hardware"], spec["gpus"])
    found = []
    for argv in spec["argvs"]:
        record = evaluator.evaluate(argv)
        from sglang.srt.runtime_context import get_parallel
        found.append({{"status": record["status"], "stage": record.get("stage"), "derived": dict(get_parallel()._derived)}})
    print(json.dumps(found))
''')


def test_the_attention_dp_width_sglang_writes_for_good_is_put_back_after_the_evaluation(tmp_path: Path) -> None:
    # 0.5.20's initialize_dp_attention (run on the stood-in groups) writes the attention-DP width into the runtime
    # context with override_permanently; the worker's next evaluation must not inherit it
    require_release("0.5.20")
    session = shared_session("0.5.20", model="deepseek-v3", draft="nextn", hardware="b200")
    configs: list[dict[str, str | None]] = [
        {"--tp-size": "8", "--speculative-algorithm": "EAGLE", "--enable-dp-attention": None, "--dp-size": "8"},
        {"--tp-size": "8", "--speculative-algorithm": "EAGLE"}]
    spec = {"hardware": session.target.hardware.record, "gpus": session.target.hardware.gpus,
            "argvs": [session.argv(session.with_draft(Config.of(c))) for c in configs]}
    script = tmp_path / "dp_state.py"
    script.write_text(DP_STATE_SCRIPT.format(root=str(Path(__file__).resolve().parents[2]), spec=json.dumps(spec)))
    python = environments.get("0.5.20").interpreter()
    done = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # the decode graphs' sizes, after the pool and the worker's check, are the last stage
    assert [(f["status"], f["stage"]) for f in found] == [("passed", "cuda_graph_sizes")] * 2, found
    assert [f["derived"] for f in found] == [{}, {}], found

"""PASSED means launch_server gets past every check it makes before it needs a GPU.

Real SGLang releases: the checks ``Engine._launch_subprocesses`` runs after resolution
(``check_server_args``) and the scheduler's model configs, each outcome with its stage.
"""

from __future__ import annotations

import pytest

from bisect_spec import launch_path
from bisect_spec.flags import Config
from bisect_spec.outcome import Status
from tests.conftest import shared_session

pytestmark = pytest.mark.sglang

LORA = {"--enable-lora": None, "--lora-backend": "triton", "--max-lora-rank": "8", "--lora-target-modules": "all"}


def test_eagle3_with_pipeline_parallel_fails_in_check_server_args() -> None:
    session = shared_session("0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "EAGLE3", "--pp-size": "2"})))
    assert outcome.status is Status.FAILED
    assert outcome.exception["type"] == "AssertionError"
    assert "Pipeline parallelism" in outcome.exception["message"]
    assert outcome.record["stage"] == "check_server_args"
    frame = outcome.record["frame"]
    assert frame["file"] == "srt/arg_groups/validation_hook.py"
    assert frame["statement"].startswith("assert")


def test_standalone_with_lora_fails_with_the_lora_value_error() -> None:
    session = shared_session("0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "STANDALONE", **LORA})))
    assert outcome.status is Status.FAILED
    assert outcome.exception["type"] == "ValueError"
    assert "LoRA is only compatible with" in outcome.exception["message"]
    assert "STANDALONE" in outcome.exception["message"]
    assert outcome.record["frame"]["file"] == "srt/arg_groups/lora_hook.py"


def test_eagle_with_the_same_lora_flags_passes_through_to_weights() -> None:
    session = shared_session("0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "EAGLE", **LORA})))
    assert outcome.status is Status.PASSED, outcome.exception
    assert outcome.record["stage"] == "weights"
    passed = outcome.record["stages_passed"]
    for stage in ("resolve", "check_server_args", "target_model_config", "draft_model_config",
                  "draft_worker_model_config"):
        assert stage in passed
    assert passed == sorted(passed, key=launch_path.STAGES.index)


@pytest.mark.parametrize("release", ["0.5.9", "0.5.12"])
def test_older_releases_reject_lora_with_eagle_in_check_server_args(release: str) -> None:
    # before 0.5.13 LoRA went with NGRAM only; the check lives in server_args.py::check_server_args
    session = shared_session(release, model="llama-3.1-8b", draft="eagle3", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "EAGLE", **LORA})))
    assert outcome.status is Status.FAILED
    assert outcome.record["stage"] == "check_server_args"
    assert outcome.record["frame"]["file"] == "srt/server_args.py"
    assert "only compatible with NGRAM" in outcome.exception["message"]


def test_a_usage_error_is_the_parse_stage() -> None:
    session = shared_session("0.5.23")
    outcome = session.evaluate(Config.of({"--speculative-algorithm": "NOPE"}))
    assert outcome.status is Status.USAGE
    assert outcome.record["stage"] == "parse"
    assert outcome.record["stages_passed"] == []


def test_environment_assignments_are_applied_and_recorded() -> None:
    """SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 lets a context length above the model's pass:
    the verdict changes, the outcome says which variables were set, and nothing of the
    assignment outlives its evaluation."""
    session = shared_session("0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    flags = {"--speculative-algorithm": "EAGLE3", "--context-length": "1000000"}
    plain = session.evaluate(session.with_draft(Config.of(flags)))
    allowed = session.evaluate(session.with_draft(Config.of({**flags, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})))
    again = session.evaluate(session.with_draft(Config.of(flags)))
    assert plain.status is Status.FAILED
    assert "greater than the derived context_length" in plain.exception["message"]
    assert allowed.status is Status.PASSED, allowed.exception
    assert allowed.record["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert "env" not in plain.record
    assert again.status is Status.FAILED and again.signature == plain.signature

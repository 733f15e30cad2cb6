"""PASSED means launch_server gets past every check it makes before it needs a GPU.

Real SGLang releases: the checks ``Engine._launch_subprocesses`` runs after resolution
(``check_server_args``) and the scheduler's model configs, each outcome with its stage.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bisect_spec import api
from bisect_spec.inside import launch
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.reduce.shrink import Budget
from bisect_spec.runtime import environments
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


def test_eagle_with_the_same_lora_flags_passes_up_to_the_draft_worker() -> None:
    session = shared_session("0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of({"--speculative-algorithm": "EAGLE", **LORA})))
    assert outcome.status is Status.PASSED, outcome.exception
    assert "draft_model" in [*outcome.record["stages_passed"], outcome.record["stage"]]
    assert outcome.record["after_weights"] is True
    passed = outcome.record["stages_passed"]
    for stage in ("resolve", "check_server_args", "target_model_config", "draft_model_config", "model_runner",
                  "target_model", "attention_backend", "draft_worker_model_config", "draft_worker"):
        assert stage in passed
    assert passed == sorted(passed, key=launch.STAGES.index)


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
    outcome = session.evaluate(Config.of({"--page-size": "many"}))  # argparse: invalid int value
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


def test_the_release_flag_table_carries_the_speculative_environment_variables() -> None:
    session = shared_session("0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    table = {row["option"]: row for row in session.flags()}
    assert table["SGLANG_ENABLE_OVERLAP_PLAN_STREAM"]["kind"] == "env"
    assert table["SGLANG_ENABLE_OVERLAP_PLAN_STREAM"]["type"] == "bool"
    assert not any(name.startswith("SGLANG_") and row["kind"] != "env" for name, row in table.items())


def test_a_check_server_args_failure_reproduces_standalone_with_its_environment(tmp_path: Path) -> None:
    """repro.py runs the same launch path and sets the configuration's variables (launch.sh shows them)."""
    spec = api.TargetSpec(release="0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    report = api.shrink(["SGLANG_ENABLE_SPEC_V2=1", "--speculative-algorithm", "EAGLE3", "--pp-size", "2"], spec,
                        budget=Budget(60, 120), out_dir=tmp_path, fix=False)
    data = report.to_dict()
    assert data["signature"]["exc_type"] == "AssertionError"
    assert data["minimal_argv"] == ["--pp-size", "2", "--speculative-algorithm", "EAGLE3"]  # the variable is not needed
    files = data["files"]
    env = environments.get("0.5.23")
    run = subprocess.run([env.python, files["repro.py"]], env=env.worker_spec(hardware=None, gpus=1).environment(),
                         capture_output=True, text=True, timeout=300)
    assert "check_server_args" in run.stderr, run.stderr[-2000:]
    assert "reproduced: AssertionError" in run.stderr


def test_an_environment_variable_a_failure_needs_stays_in_its_reproducer(tmp_path: Path) -> None:
    spec = api.TargetSpec(release="0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    flags = ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=0", "--context-length", "1000000"]
    report = api.shrink(flags, spec, budget=Budget(60, 120), out_dir=tmp_path, fix=False)
    data = report.to_dict()
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in data["signature"]["message"]
    assert data["minimal_argv"] == ["--context-length", "1000000"]
    inherited = api.TargetSpec(**{**spec.__dict__, "env": (("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),)})
    passed = api.probe(["--context-length", "1000000"], inherited)
    assert passed.outcome.passed and passed.target.env == (("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),)
    script = Path(api.shrink(["SGLANG_X_UNUSED=1", "--speculative-algorithm", "EAGLE3", "--pp-size", "2"],
                             inherited, budget=Budget(60, 120), out_dir=tmp_path / "b",
                             fix=False).to_dict()["files"]["launch.sh"]).read_text()
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python3 -m sglang.launch_server" in script, script


def test_a_failure_that_needs_a_file_reproduces_with_a_placeholder_file_and_its_launch_asks_for_it(
        tmp_path: Path) -> None:
    spec = api.TargetSpec(release="0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100")
    flags = ["--speculative-algorithm", "NGRAM", "--speculative-ngram-external-corpus-path", "@path",
             "--speculative-ngram-external-sam-budget", "0"]
    data = api.shrink(flags, spec, budget=Budget(60, 120), out_dir=tmp_path, fix=False).to_dict()
    assert "--speculative-ngram-external-corpus-path" in data["minimal_argv"]
    files = data["files"]
    env = environments.get("0.5.23")
    run = subprocess.run([env.python, files["repro.py"]], env=env.worker_spec(hardware=None, gpus=1).environment(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "reproduced: ValueError" in run.stderr, run.stderr[-2000:]
    script = Path(files["launch.sh"]).read_text()
    assert '--speculative-ngram-external-corpus-path "$SPECULATIVE_NGRAM_EXTERNAL_CORPUS_PATH"' in script, script
    unset = subprocess.run(["bash", files["launch.sh"]], capture_output=True, text=True, timeout=60,
                           env={"PATH": os.environ["PATH"]})
    assert unset.returncode != 0 and "set SPECULATIVE_NGRAM_EXTERNAL_CORPUS_PATH to your file" in unset.stderr
    assert "$SPECULATIVE_NGRAM_EXTERNAL_CORPUS_PATH" in Path(files["bug_report.md"]).read_text()

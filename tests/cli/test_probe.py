"""``bisect-spec probe`` on real SGLang: verdict, signature, failing source, JSON schema, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisect_spec.cli.commands import EXIT_VERDICT_FAILS, main
from tests.cli.helpers import error_line
from tests.conftest import require_release
from tests.schemas import assert_valid

pytestmark = pytest.mark.sglang

SEED2 = ["--tp", "8", "--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"]


def test_probe_shows_verdict_signature_and_failing_source() -> None:
    require_release("0.5.23")
    result = CliRunner().invoke(main, ["probe", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--", *SEED2])
    assert result.exit_code == EXIT_VERDICT_FAILS, result.output
    out = result.output
    assert "verdict:  FAILED  AssertionError (srt/arg_groups/speculative_hook.py:" in out
    assert "in _handle_eagle_family" in out
    assert "cfg.speculative_eagle_topk is None" in out and "and cfg.speculative_num_draft_tokens is None" in out
    assert "guarded by line" in out and "cfg.speculative_num_steps is None" in out
    assert "signature: " in out


def test_probe_json_schema_and_pasted_command() -> None:
    require_release("0.5.12")
    pasted = ("ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /nonexistent/Kimi-K2.6 "
              "--trust-remote-code --tp 8 --speculative-algorithm EAGLE3 "
              "--speculative-draft-model-path /nonexistent/eagle3 --speculative-num-steps 1 "
              "--speculative-num-draft-tokens 3 --port 30000")
    result = CliRunner().invoke(main, ["probe", "--json", "--sglang", "0.5.12", "--hardware", "rtx-pro-6000", "--", pasted])
    assert result.exit_code == EXIT_VERDICT_FAILS, result.output
    data = json.loads(result.stdout)
    assert data["schema"] == "bisect-spec/probe/1"
    assert_valid(data, "probe")
    assert data["target"]["release"] == "0.5.12" and data["target"]["model"] == "kimi-k2.6"
    assert any("is not on this machine" in note for note in data["notes"])
    outcome = data["outcome"]
    assert outcome["status"] == "failed"
    assert outcome["exception"]["message"] == "'>' not supported between instances of 'NoneType' and 'int'"
    assert set(outcome["signature"]) >= {"id", "cross_release_key", "exc_type", "location", "statement", "message"}
    assert outcome["frame"]["function"] == "_handle_speculative_decoding"


def test_probe_passing_config_prints_resolved_values_and_exits_zero() -> None:
    require_release("0.5.23")
    result = CliRunner().invoke(main, ["probe", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--", "--tp", "8",
                                       "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                                       "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"])
    assert result.exit_code == 0, result.output
    assert "verdict:  PASSED" in result.output
    assert "speculative_num_draft_tokens  4" in result.output


def test_auto_hardware_is_announced_once_on_stderr() -> None:
    require_release("0.5.23")
    result = CliRunner().invoke(main, ["probe", "--sglang", "0.5.23", "--", "--tp", "8"])
    assert result.stderr.count("no GPU here: simulating rtx-pro-6000x8") == 1


def test_options_before_the_command_apply_to_it_and_after_it_win() -> None:
    require_release("0.5.12")
    result = CliRunner().invoke(main, ["--sglang", "0.5.12", "--model", "llama-3.1-8b", "--hardware", "h100",
                                       "--env", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "probe", "--json",
                                       "--", "--context-length", "1000000"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["target"]["release"] == "0.5.12" and data["target"]["model"] == "llama-3.1-8b"
    assert data["target"]["hardware"] == "h100x8"
    assert data["target"]["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert data["outcome"]["env"] == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert_valid(data, "probe")  # a passing outcome, with a target environment
    later = CliRunner().invoke(main, ["--hardware", "h100", "probe", "--json", "--sglang", "0.5.12", "--model",
                                      "llama-3.1-8b", "--hardware", "h200", "--", "--tp", "2"])
    assert later.exit_code == 0, later.output
    assert json.loads(later.stdout)["target"]["hardware"] == "h200x8"


def test_an_option_the_command_does_not_take_is_refused_before_it() -> None:
    result = CliRunner().invoke(main, ["--model", "llama-3.1-8b", "runs", "list"])
    assert result.exit_code == 2
    assert "Error: --model does not apply to 'runs'" in result.output


def test_a_pasted_hub_id_of_a_shipped_profile_is_that_model() -> None:
    require_release("0.5.23")
    pasted = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2"
    result = CliRunner().invoke(main, ["probe", "--json", "--sglang", "0.5.23", "--hardware", "h100", "--", pasted])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["target"]["model"] == "llama-3.1-8b"
    assert any("using the 'llama-3.1-8b' profile" in note for note in data["notes"])


@pytest.mark.parametrize(("args", "expected"), [
    ([], "Error: model path /data/mystery-model is not on this machine and names no shipped profile: pass --model NAME"),
    (["--model", "qwen3-8b", "--", "python -m sglang.launch_server --model-path /root/Kimi-K2.6 --tp 2"],
     "Error: the pasted command runs /root/Kimi-K2.6 (profile 'kimi-k2.6') but --model says 'qwen3-8b': drop one of them"),
    (["--", "python -m sglang.launch_server --model-path some-org/unknown-model --tp 2"],
     "Error: cannot fetch config.json of some-org/unknown-model from the Hugging Face hub"),
])
def test_a_model_that_cannot_be_identified_is_refused_never_replaced(args: list[str], expected: str,
                                                                     tmp_path: Path) -> None:
    command = args or ["--", "python -m sglang.launch_server --model-path /data/mystery-model --tp 2"]
    result = CliRunner().invoke(main, ["probe", "--sglang", "0.5.23", *command],
                                env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert error_line(result.output).startswith(expected)


def test_a_draft_is_added_only_where_the_algorithm_takes_one_and_its_absence_is_warned() -> None:
    require_release("0.5.23")
    ngram = CliRunner().invoke(main, ["probe", "--json", "--sglang", "0.5.23", "--model", "llama-3.1-8b", "--hardware",
                                      "h100", "--draft", "eagle3", "--", "--speculative-algorithm", "NGRAM"])
    data = json.loads(ngram.stdout)
    assert "--speculative-draft-model-path" not in data["outcome"]["config"]
    assert not any("added --speculative-draft-model-path" in note for note in data["notes"])
    alone = CliRunner().invoke(main, ["probe", "--sglang", "0.5.23", "--model", "llama-3.1-8b", "--hardware", "h100",
                                      "--draft", "none", "--", "--speculative-algorithm", "EAGLE3"])
    assert ("warning: EAGLE3 needs a draft model and none is given: a real launch would load the target checkpoint "
            "as its draft and fail; add --speculative-draft-model-path (or --draft NAME)") in alone.output
    # the way out is a draft: the next step never switches to an algorithm the user did not ask for (EAGLE passes
    # these stages with the target's own class as its draft, which is not what they wanted either)
    assert "next:     give it a draft: --speculative-draft-model-path PATH (or --draft NAME)" in alone.output
    assert "set --speculative-algorithm" not in alone.output


SEED_TYPE_ERROR = ["--tp", "8", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1",
                   "--speculative-num-draft-tokens", "3"]


def test_a_failed_probe_names_the_next_step_and_the_command_it_prints_passes() -> None:
    require_release("0.5.23")
    result = CliRunner().invoke(main, ["probe", "--sglang", "0.5.23", "--model", "kimi-k2.6", "--draft", "eagle3",
                                       "--hardware", "rtx-pro-6000", "--", *SEED_TYPE_ERROR])
    assert result.exit_code == EXIT_VERDICT_FAILS, result.output
    lines = result.stdout.splitlines()
    # a TypeError is SGLang's own code failing, not a check: said so
    assert any(line.startswith("kind:     SGLang's own code crashed") for line in lines), result.stdout
    nxt = lines.index(next(line for line in lines if line.startswith("next:     the nearest configuration that passes")))
    command = lines[nxt + 1].strip()
    assert command.startswith("bisect-spec probe --sglang 0.5.23 --model kimi-k2.6 --draft eagle3 --hardware "
                              "rtx-pro-6000 -- ")
    more = next(line for line in lines if line.startswith("more:     "))
    assert more.split(maxsplit=1)[1].startswith("bisect-spec shrink --sglang 0.5.23 --model kimi-k2.6 --draft eagle3")
    # the printed command, pasted, passes (it keeps the algorithm and the draft tokens the user asked for)
    import shlex

    words = shlex.split(command)
    again = CliRunner().invoke(main, words[1:])
    assert again.exit_code == 0, again.output
    assert "--speculative-algorithm EAGLE3" in command and "--speculative-num-draft-tokens 3" in command
    # --json carries the same
    as_json = CliRunner().invoke(main, ["probe", "--json", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--",
                                        *SEED_TYPE_ERROR])
    document = json.loads(as_json.stdout)
    assert_valid(document, "probe")
    assert document["failure_kind"] == "crash" and document["next_step"]["verified"] is True


def test_a_refusal_at_a_width_the_box_cannot_hold_gets_the_accepted_edit_at_a_width_that_fits() -> None:
    """``--speculative-num-draft-tokens 3`` without steps is refused by SGLang (0.5.23's assert); every edit it
    accepts then will not start at SGLang's default tp 1 (Kimi-K2.6 needs the box's 8 GPUs). The next step is
    that edit at the width that fits, verified: pasted, it passes whole and keeps the user's 3 draft tokens."""
    require_release("0.5.23")
    typed = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"]
    result = CliRunner().invoke(main, ["probe", "--json", "--sglang", "0.5.23", "--model", "kimi-k2.6", "--draft",
                                       "eagle3", "--hardware", "rtx-pro-6000", "--", *typed])
    assert result.exit_code == EXIT_VERDICT_FAILS, result.output
    step = json.loads(result.stdout)["next_step"]
    assert step["verified"] and step["keeps_intent"] and "add --tp-size 8" in step["edits"], step
    again = CliRunner().invoke(main, ["probe", "--sglang", "0.5.23", "--model", "kimi-k2.6", "--draft", "eagle3",
                                      "--hardware", "rtx-pro-6000", "--", *step["argv"]])
    assert again.exit_code == 0 and "verdict:  PASSED  every check a CPU can run, ran" in again.output, again.output


def test_a_validation_failure_is_not_called_a_crash_and_no_fix_skips_the_search() -> None:
    require_release("0.5.23")
    result = CliRunner().invoke(main, ["probe", "--no-fix", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--",
                                       *SEED2])
    assert result.exit_code == EXIT_VERDICT_FAILS, result.output
    assert "kind:" not in result.stdout and "next:" not in result.stdout
    assert "more:     bisect-spec shrink" in result.stdout


def test_draft_beside_a_pasted_draft_id_stands_for_it_offline(tmp_path: Path) -> None:
    require_release("0.5.23")
    pasted = ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 4 --speculative-algorithm EAGLE3 "
              "--speculative-draft-model-path AngelSlim/Qwen3-32B_eagle3 --speculative-num-steps 3 "
              "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    result = CliRunner().invoke(main, ["probe", "--json", "--sglang", "0.5.23", "--hardware", "h100", "--gpus", "4",
                                       "--draft", "specforge-eagle3-qwen3-32b", "--no-fix", "--", pasted],
                                env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    data = json.loads(result.stdout)
    assert data["target"]["draft"] == "specforge-eagle3-qwen3-32b", result.output
    assert any("AngelSlim/Qwen3-32B_eagle3: evaluated with the 'specforge-eagle3-qwen3-32b' draft profile you chose"
               in note for note in data["notes"])

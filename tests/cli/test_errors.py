"""Bad input: one clear line naming the fix, exit code 1 (runtime) or 2 (usage), no traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisect_spec.cli.commands import main
from bisect_spec.runtime import environments
from tests.cli.helpers import error_line, run
from tests.conftest import require_release

assert_one_clear_line = error_line


@pytest.mark.parametrize(("args", "code", "expected"), [
    (["probe", "--model", "kimi-k2.7", "--", "--tp", "8"], 2,
     "Error: unknown model 'kimi-k2.7': did you mean kimi-k2.6, kimi-k2.5, kimi-k2? choose one of deepseek-v3, "
     "deepseek-v3.2, gpt-oss-120b, gpt-oss-20b, kimi-k2, kimi-k2.5, kimi-k2.6, llama-3.1-8b, llama-3.3-70b, "
     "qwen3-235b-a22b, qwen3-32b, qwen3-8b; or pass --model-path DIR"),
    (["probe", "--draft", "eagel3", "--", "--tp", "8"], 2,
     "Error: unknown draft 'eagel3': did you mean eagle3, eagle? choose one of eagle, eagle3, nextn, ngram, "
     "specforge-eagle3-deepseek-v3, specforge-eagle3-kimi-k2, specforge-eagle3-llama-3.3-70b, "
     "specforge-eagle3-qwen3-235b-a22b, specforge-eagle3-qwen3-32b, standalone; or pass --draft-path DIR"),
    (["probe", "--hardware", "h300", "--", "--tp", "8"], 2,
     "Error: unknown hardware profile 'h300': did you mean h200, h100, b200? choose one of a100, b200, h100, h200, "
     "rtx-pro-6000, auto, none"),
    (["probe", "--sglang", "banana", "--", "--tp", "8"], 2,
     "Error: 'banana' is not an SGLang release: use a version such as 0.5.23, 'current', git:PATH@REV (a commit of your "
     "clone) or path:DIR (a source tree)"),
    (["probe", "--gpus", "0", "--", "--tp", "8"], 2, "Error: --gpus 0: a box needs at least one GPU"),
    (["probe", "--", "vllm", "serve", "--model", "x"], 2,
     "Error: 'vllm serve --model' is not an SGLang launch: paste 'python -m sglang.launch_server ...', "
     "'sglang serve ...' or just the flags"),
    (["probe", "--"], 2, "Error: no SGLang flags given: pass them after --, e.g. -- --speculative-algorithm EAGLE3"),
    (["probe", "--", "--tp", "1", "--tp", "2"], 2, "Error: flag --tp is given twice; keep one"),
    (["env", "install", "banana"], 2, "Error: 'banana' is not an SGLang release: use a version such as 0.5.23, or 'current'"),
])
def test_usage_errors(args: list[str], code: int, expected: str) -> None:
    exit_code, output = run(*args)
    assert exit_code == code, output
    assert assert_one_clear_line(output) == expected


def test_release_not_installed_names_the_install_command(tmp_path: Path) -> None:
    exit_code, output = run("probe", "--sglang", "0.5.10.post1", "--", "--tp", "8")
    assert exit_code == 1
    line = assert_one_clear_line(output)
    assert line == (f"Error: SGLang 0.5.10.post1 is not installed (installed: {environments.spans(environments.installed())}); "
                    "run: bisect-spec env install 0.5.10.post1")
    exit_code, output = run("probe", "--sglang", "0.4.5", "--", "--tp", "8")
    assert exit_code == 2
    assert assert_one_clear_line(output) == ("Error: SGLang 0.4.5 is older than the releases bisect-spec evaluates "
                                             "(0.4.6 … 0.5.23); pick one of them with --sglang")


def test_no_release_installed_at_all(tmp_path: Path) -> None:
    exit_code, output = run("probe", "--", "--tp", "8", env={"BISECT_SPEC_HOME": str(tmp_path)})
    assert exit_code == 1
    assert assert_one_clear_line(output) == "Error: no SGLang release is installed; run: bisect-spec env install 0.5.23"


def test_flag_unknown_to_the_release_names_the_releases_that_have_it() -> None:
    require_release("0.5.23")
    require_release("0.5.9")
    exit_code, output = run("probe", "--sglang", "0.5.23", "--", "--ds-heavy-channel-num", "8")
    assert exit_code == 2
    line = assert_one_clear_line(output)
    assert line.startswith("Error: SGLang 0.5.23 has no flag --ds-heavy-channel-num: ")
    have = environments.releases_with_flag("--ds-heavy-channel-num", exclude="0.5.23")
    assert "0.5.9" in have and "0.5.23" not in have
    assert line.endswith(f"it exists in {environments.spans(have)}")


def test_flag_that_became_an_ambiguous_prefix() -> None:
    require_release("0.5.23")
    require_release("0.5.9")
    exit_code, output = run("probe", "--sglang", "0.5.23", "--", "--cuda-graph-max-bs", "8")
    assert exit_code == 2
    line = assert_one_clear_line(output)
    assert line.startswith("Error: flag --cuda-graph-max-bs is ambiguous in SGLang 0.5.23: it could be "
                           "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill; as an exact flag it exists in ")
    have = environments.releases_with_flag("--cuda-graph-max-bs", exclude="0.5.23")
    assert "0.5.9" in have
    assert line.endswith(f"as an exact flag it exists in {environments.spans(have)}")


def test_misspelt_flag_gets_the_closest_name() -> None:
    require_release("0.5.23")
    exit_code, output = run("probe", "--sglang", "0.5.23", "--", "--speculative-num-stepz", "3")
    assert exit_code == 2
    assert assert_one_clear_line(output) == (
        "Error: SGLang 0.5.23 has no flag --speculative-num-stepz: did you mean --speculative-num-steps or "
        "--speculative-num-draft-tokens? "
        "no installed release has it")


def test_wrong_value_type_is_sglangs_own_message() -> None:
    require_release("0.5.23")
    exit_code, output = run("probe", "--sglang", "0.5.23", "--model", "llama-3.1-8b", "--draft", "none",
                            "--", "--tp-size", "eight")
    assert exit_code == 2
    line = assert_one_clear_line(output)
    assert line.startswith("Error: SGLang 0.5.23 rejects the flags: argument ")
    assert "invalid int value: 'eight'" in line


def test_sglang_that_does_not_import_names_the_missing_module(tmp_path: Path) -> None:
    require_release("0.5.23")
    real = environments.home() / "envs"
    fake_home = tmp_path / "home"
    (fake_home / "envs").mkdir(parents=True)
    base = next(real.glob("base-py*"))
    os.symlink(base, fake_home / "envs" / base.name)
    site = fake_home / "envs" / "sglang-9.9.9" / "site" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("import pybase64_that_is_missing\n")
    (site.parent.parent / "env.json").write_text(json.dumps({"release": "9.9.9"}))
    exit_code, output = run("probe", "--sglang", "9.9.9", "--", "--tp", "8",
                            env={"BISECT_SPEC_HOME": str(fake_home)})
    assert exit_code == 1
    assert assert_one_clear_line(output) == (
        "Error: SGLang does not import in this environment (ModuleNotFoundError: No module named "
        "'pybase64_that_is_missing'); reinstall it: bisect-spec env remove 9.9.9 && bisect-spec env install 9.9.9")


def test_debug_shows_the_traceback() -> None:
    result = CliRunner().invoke(main, ["--debug", "probe", "--model", "nope", "--", "--tp", "1"])
    assert result.exit_code == 2


# -- more of the bad-input catalogue: strategies, runs, profiles, environments ------------


def test_unknown_strategy_suggests_the_closest() -> None:
    exit_code, output = run("sweep", "--strategy", "quik")
    assert exit_code == 2
    assert assert_one_clear_line(output) == ("Error: unknown strategy 'quik': did you mean quick? choose one of default, "
                                             "eagle-core, interactions, nightly, pr-gate, quick, spec-env, or pass a .toml file")


def test_strategy_file_with_a_syntax_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('include = ["--page-size"\n')
    exit_code, output = run("sweep", "--strategy", str(bad))
    assert exit_code == 2
    assert assert_one_clear_line(output).startswith(f"Error: strategy file {bad}: ")


def test_strategy_file_that_does_not_exist(tmp_path: Path) -> None:
    exit_code, output = run("sweep", "--strategy", str(tmp_path / "nope.toml"))
    assert exit_code == 2
    assert assert_one_clear_line(output) == f"Error: strategy file {tmp_path / 'nope.toml'} does not exist"


def test_resume_of_a_run_that_does_not_exist(tmp_path: Path) -> None:
    exit_code, output = run("sweep", "--resume", "nope", "--runs-dir", str(tmp_path))
    assert exit_code == 1
    assert assert_one_clear_line(output) == f"Error: no run 'nope' in {tmp_path}"


def test_resume_of_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "stuff").mkdir()
    exit_code, output = run("sweep", "--resume", "stuff", "--runs-dir", str(tmp_path))
    assert exit_code == 1
    assert assert_one_clear_line(output) == f"Error: {tmp_path / 'stuff'} is not a bisect-spec run (no run.json)"


def test_corrupt_model_profile(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{ not json")
    exit_code, output = run("probe", "--model-path", str(tmp_path), "--", "--tp", "1")
    assert exit_code == 2
    assert assert_one_clear_line(output).startswith(f"Error: model config {tmp_path / 'config.json'} is unreadable: ")


def test_model_directory_without_config(tmp_path: Path) -> None:
    exit_code, output = run("probe", "--model-path", str(tmp_path), "--", "--tp", "1")
    assert exit_code == 2
    assert assert_one_clear_line(output) == (f"Error: --model-path {tmp_path}: no config.json there; "
                                             "pass a directory that holds the model's config.json")


def test_removing_a_release_that_is_not_installed(tmp_path: Path) -> None:
    exit_code, output = run("env", "remove", "0.4.6", env={"BISECT_SPEC_HOME": str(tmp_path)})
    assert exit_code == 1
    assert assert_one_clear_line(output) == "Error: SGLang 0.4.6 is not installed (installed: none)"


def test_shrink_with_no_flags() -> None:
    exit_code, output = run("shrink", "--")
    assert exit_code == 2
    assert assert_one_clear_line(output) == (
        "Error: no SGLang flags given: pass them after --, e.g. -- --speculative-algorithm EAGLE3")


def test_matrix_file_with_an_error_names_file_line_and_what(tmp_path: Path) -> None:
    matrix = tmp_path / "nightly.toml"
    matrix.write_text('name = "n"\nreleases = ["0.5.23"]\nmodels = ["deepseek-v4"]\n')
    exit_code, output = run("nightly", "--matrix", str(matrix), "--runs-dir", str(tmp_path / "out"))
    assert exit_code == 2
    assert assert_one_clear_line(output).startswith(
        f"Error: {matrix}:3: unknown model 'deepseek-v4' in models (closest: deepseek-v3, deepseek-v3.2); valid: ")


def test_matrix_file_that_is_not_toml(tmp_path: Path) -> None:
    matrix = tmp_path / "nightly.toml"
    matrix.write_text('name = "n"\nreleases = ["0.5.23"\n')
    exit_code, output = run("nightly", "--matrix", str(matrix), "--runs-dir", str(tmp_path / "out"))
    assert exit_code == 2
    assert assert_one_clear_line(output) == f"Error: {matrix}:2: not valid TOML: Unclosed array"


def test_resume_of_a_nightly_that_does_not_exist(tmp_path: Path) -> None:
    matrix = Path(__file__).parents[2] / "examples" / "nightly-matrix.toml"
    exit_code, output = run("nightly", "--matrix", str(matrix), "--runs-dir", str(tmp_path), "--resume", "yesterday")
    assert exit_code == 1
    assert assert_one_clear_line(output) == f"Error: {tmp_path / 'yesterday'} is not a nightly (no nightly.json)"


def test_corrupt_nightly_json_on_resume(tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "nightly.json").write_text("{not json")
    matrix = Path(__file__).parents[2] / "examples" / "nightly-matrix.toml"
    exit_code, output = run("nightly", "--matrix", str(matrix), "--runs-dir", str(tmp_path), "--resume", "n1")
    assert exit_code == 1
    line = assert_one_clear_line(output)
    assert line == (f"Error: {tmp_path / 'n1' / 'nightly.json'} is corrupt (line 1: Expecting property name enclosed "
                    "in double quotes): rerun bisect-spec nightly")

"""``--config FILE``: the release merges the file itself; releases without it, and files it refuses, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import error_line, run
from tests.conftest import require_release

pytestmark = pytest.mark.sglang

HARDWARE = ["--model", "deepseek-v3", "--hardware", "rtx-pro-6000"]


@pytest.fixture
def yaml_file(tmp_path: Path) -> Path:
    path = tmp_path / "serve.yaml"  # EAGLE3 with draft tokens but no steps: 0.5.23's _handle_eagle_family asserts
    path.write_text("speculative-algorithm: EAGLE3\nspeculative-num-draft-tokens: 3\nenable-mixed-chunk: false\n")
    return path


def test_a_config_file_is_evaluated_with_its_options(yaml_file: Path) -> None:
    require_release("0.5.23")
    code, output = run("probe", "--sglang", "0.5.23", *HARDWARE, "--", "--config", str(yaml_file), "--tp", "8")
    assert code == 3, output
    lines = output.splitlines()
    assert f"note: --config {yaml_file}: its options merged as SGLang 0.5.23 merges them (the command line wins): " \
           "--speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3" in lines
    assert "flags:    --speculative-algorithm EAGLE3 --speculative-draft-model-path @draft " \
           "--speculative-num-draft-tokens 3 --tp-size 8" in lines
    assert any(line.startswith("verdict:  FAILED  AssertionError (srt/arg_groups/speculative_hook.py:") for line in lines)


def test_the_command_line_wins_over_the_file(yaml_file: Path) -> None:
    require_release("0.5.23")
    code, output = run("probe", "--sglang", "0.5.23", *HARDWARE, "--", "--config", str(yaml_file),
                       "--speculative-algorithm", "NGRAM")
    assert code in (0, 3), output
    assert "flags:    --speculative-algorithm NGRAM --speculative-num-draft-tokens 3" in output.splitlines(), output


@pytest.mark.parametrize(("release", "file", "expected"), [
    ("0.5.1.post3", "serve.yaml", "Error: SGLang 0.5.1.post3 does not read config files: --config is new ("),
    ("0.5.23", "missing.yaml", "Error: --config {d}/missing.yaml: no such file here: give the path of the YAML file "
                               "the command reads"),
    ("0.5.23", "serve.json", "Error: SGLang 0.5.23 cannot read --config {d}/serve.json: ValueError: Config file must "
                             "be YAML format, got: .json"),
])
def test_config_files_that_cannot_be_read_are_refused_in_one_line(yaml_file: Path, release: str, file: str,
                                                                  expected: str) -> None:
    require_release(release)
    (yaml_file.parent / "serve.json").write_text('{"speculative-algorithm": "EAGLE3"}')
    code, output = run("probe", "--sglang", release, *HARDWARE, "--", "--config", str(yaml_file.parent / file))
    assert code == 2
    assert error_line(output).startswith(expected.format(d=yaml_file.parent)), output

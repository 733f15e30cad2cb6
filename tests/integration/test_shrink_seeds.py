"""Shrinking the seed episodes on real SGLang: 1-minimal, same signature, proven; fixes that pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisect_spec import api
from bisect_spec.cli.commands import main
from bisect_spec.model.flags import Config
from bisect_spec.reduce.shrink import Budget
from bisect_spec.runtime import environments
from tests.conftest import require_release, shared_session
from tests.schemas import assert_valid

pytestmark = pytest.mark.sglang

EPISODE1 = ["python", "-m", "sglang.launch_server", "--model-path", "/data/kimi-k2.5", "--tp", "8", "--trust-remote-code",
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3/output_100k_sglang/4",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "16", "--mem-fraction-static", "0.85",
            "--port", "30000", "--host", "0.0.0.0", "--disable-cuda-graph"]
EPISODE2 = """ExecStart=/root/venv/bin/python -m sglang.launch_server \\
    --model-path /root/models/Kimi-K2.6 --served-model-name kimi-k2.6 --tp 8 --trust-remote-code \\
    --speculative-algorithm EAGLE3 --speculative-draft-model-path /root/models/kimi-k2.6-eagle3 \\
    --speculative-num-steps 1 --speculative-num-draft-tokens 3 --mem-fraction-static 0.88 --port 8000"""


def speculative_flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--speculative-")]


def test_episode1_on_0_5_9_shrinks_to_two_speculative_flags_proven_minimal(tmp_path: Path) -> None:
    require_release("0.5.9")
    spec = api.TargetSpec(release="0.5.9", model="kimi-k2.5", draft="eagle3", hardware="rtx-pro-6000")
    report = api.shrink(EPISODE1, spec, budget=Budget(400, 300), out_dir=tmp_path)
    data = report.to_dict()
    assert data["status"] == "minimal"
    assert data["signature"]["exc_type"] == "AssertionError"
    assert data["signature"]["location"] == "srt/server_args.py::_handle_speculative_decoding"
    assert len(speculative_flags(data["minimal_argv"])) <= 2
    assert len(data["minimal_argv"]) < len(data["original_argv"])
    # proof: every flag's removal and every simpler value was evaluated and lost the signature
    assert {p["change"] for p in data["proof"]} >= {f"remove {f}" for f in speculative_flags(data["minimal_argv"])}
    assert all(p["outcome"] != data["signature"]["id"] for p in data["proof"])
    assert any("is not on this machine" in note for note in data["notes"])
    # the reproducers exist, and the standalone script really reproduces on this CPU machine
    files = data["files"]
    assert set(files) >= {"launch.sh", "repro.py", "test_regression.py", "bug_report.md"}
    env = environments.get("0.5.9")
    run = subprocess.run([env.python, files["repro.py"]], env=env.worker_spec(hardware=None, gpus=1).environment(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-2000:]  # git bisect run: 1 = the failure reproduces
    assert "reproduced: AssertionError in _handle_speculative_decoding" in run.stderr
    report_md = Path(files["bug_report.md"]).read_text()
    assert "## Reproduction" in report_md and "Workarounds, best first" in report_md  # SGLang's form (test_bug_report.py)


@pytest.mark.parametrize("release", ["0.5.12", "0.5.23"])
def test_episode2_shrinks_and_its_nearest_working_config_passes(release: str, tmp_path: Path) -> None:
    require_release(release)
    result = CliRunner().invoke(main, ["shrink", "--json", "--sglang", release, "--model", "kimi-k2.6",
                                       "--hardware", "rtx-pro-6000", "--out", str(tmp_path), "--", EPISODE2])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert_valid(data, "shrink")
    assert data["status"] == "minimal"
    assert data["signature"]["exc_type"] == "TypeError"
    assert len(speculative_flags(data["minimal_argv"])) <= 2
    fixes = data["nearest_working"]["fixes"]
    assert fixes, "a verified working configuration must be offered"
    best = fixes[0]
    assert best["verified"] and best["keeps_intent"]
    # never "just add --speculative-num-steps 1": that is the TypeError itself
    assert best["edits"] != ["add --speculative-num-steps 1"]
    # and it really passes when evaluated again, keeping EAGLE3 and the 3 draft tokens
    session = shared_session(release)
    again = session.evaluate(Config.from_argv(best["argv"]))
    assert again.passed, again.headline
    assert again.resolved["speculative_algorithm"] == "EAGLE3"
    assert again.resolved["speculative_num_draft_tokens"] == 3


def test_shrink_of_a_passing_config_is_a_clear_usage_error() -> None:
    require_release("0.5.23")
    result = CliRunner().invoke(main, ["shrink", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--", "--tp", "8"])
    assert result.exit_code == 2
    assert "resolves without error on SGLang 0.5.23: nothing to shrink" in result.output


def test_regression_test_file_is_a_strict_xfail(tmp_path: Path) -> None:
    require_release("0.5.23")
    spec = api.TargetSpec(release="0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    report = api.shrink(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"], spec,
                        fix=False, out_dir=tmp_path)
    text = Path(report.files["test_regression.py"]).read_text()
    assert "xfail(strict=True, raises=AssertionError" in text
    compile(text, "test_regression.py", "exec")
    assert sys.version_info >= (3, 11)


def test_repro_py_speaks_git_bisect_run_through_env_run(tmp_path: Path) -> None:
    """The TypeError reproducer exits 1 where it fails (0.5.12) and 0 where it passes (0.5.1.post3)."""
    for release in ("0.5.12", "0.5.1.post3"):
        require_release(release)
    # llama: on 0.5.1.post3 DeepSeek-V3's class has no EAGLE3 capture hook yet (it fails differently there)
    spec = api.TargetSpec(release="0.5.12", model="llama-3.1-8b", draft="eagle3", hardware="rtx-pro-6000")
    report = api.shrink(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1",
                         "--speculative-num-draft-tokens", "3"], spec, budget=Budget(80, 120), out_dir=tmp_path, fix=False)
    repro = report.to_dict()["files"]["repro.py"]
    codes = {}
    for release in ("0.5.12", "0.5.1.post3"):
        result = CliRunner().invoke(main, ["env", "run", release, "--", "python", repro])
        codes[release] = result.exit_code
    assert codes == {"0.5.12": 1, "0.5.1.post3": 0}

"""``runs list``, ``runs show`` and ``--resume`` on a run a real sweep stored (SGLang 0.5.23).

The sweep is llama-3.1-8b + eagle3 on one H100: what is checked is the run store and its commands, whatever the
model, and it builds its model on meta in ~0.14 s where Kimi-K2.6 at its deployment shape takes 0.6-1 s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bisect_spec.report.summary import users_failures
from bisect_spec.runtime import store
from tests.cli.helpers import error_line, run
from tests.conftest import require_release
from tests.once import once_per_run
from tests.schemas import assert_valid

pytestmark = pytest.mark.sglang

TARGET = ["--sglang", "0.5.23", "--model", "llama-3.1-8b", "--draft", "eagle3", "--hardware", "h100", "--gpus", "1"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A finished quick sweep (small search budget, real evaluations) and its --json output."""
    require_release("0.5.23")

    def sweep(runs_dir: Path) -> tuple[Path, dict[str, Any]]:
        code, output = run("sweep", *TARGET, "--strategy", "quick", "--budget", "5", "--jobs", "2", "--no-cache",
                           "--runs-dir", str(runs_dir), "--json")
        assert code == 0, output
        document: dict[str, Any] = json.loads(output[output.index("{"):])
        return runs_dir, document

    return once_per_run(tmp_path_factory, "runs-swept", sweep)


def test_sweep_json(swept: tuple[Path, dict[str, Any]]) -> None:
    runs_dir, document = swept
    assert document["schema"] == "bisect-spec/sweep/1"
    assert_valid(document, "sweep")
    assert Path(document["path"]) == runs_dir / document["run"]
    assert (document["reused"], document["torn_records"]) == (0, 0)
    # resolution's assert and TypeError (and the launcher's and the STANDALONE worker's TypeErrors); and, once the
    # model is built, EAGLE3 with no draft path: the target's own class (LlamaForCausalLM) built as the draft has no
    # hot_token_id (the EAGLE worker's init_lm_head); and the draft worker's own buffers for a step count resolution
    # accepted (--speculative-num-steps -1):
    # torch.arange's bound check, raised in SGLang's EAGLE worker once its device buffers are made (on meta here)
    assert {s["exc_type"] for s in document["summary"]["signatures"]} == {"AssertionError", "TypeError", "AttributeError",
                                                                         "RuntimeError"}
    arange = next(s for s in document["summary"]["signatures"] if s["exc_type"] == "RuntimeError")
    assert "inconsistent with step sign" in arange["message"], arange
    assert arange["location"].startswith("srt/speculative/"), arange["location"]
    # that last one only without a draft path: the shrink gave its reproducer the eagle3 draft's path and it passed,
    # so it is not the draft's own failure (the main job used to lead "your draft (eagle3)" with it)
    by_type = {s["exc_type"]: s for s in document["summary"]["signatures"]}
    assert by_type["AttributeError"]["shrink"]["minimal_argv"] == ["--speculative-algorithm", "EAGLE3"]
    assert by_type["AttributeError"]["shrink"]["draft_path_avoids"] is True
    target = {**document["summary"]["target"], "draft_algorithm": "EAGLE3"}
    mine, _ = users_failures(document["summary"]["signatures"], target)
    assert "AttributeError" not in {s["exc_type"] for s in mine} and mine
    # resolution's failures happen with the path too
    resolution = [s for s in document["summary"]["signatures"] if s["location"].endswith("::_handle_eagle_family")]
    assert {s["exc_type"] for s in resolution} == {"AssertionError", "TypeError"}
    assert all(s["shrink"].get("draft_path_avoids") is not True for s in resolution)


def test_runs_list_json(swept: tuple[Path, dict[str, Any]]) -> None:
    runs_dir, document = swept
    code, output = run("runs", "list", "--runs-dir", str(runs_dir), "--json")
    assert code == 0, output
    listed = json.loads(output)
    assert listed["schema"] == "bisect-spec/runs/1"
    assert_valid(listed, "runs")
    [row] = listed["runs"]
    meta = json.loads((runs_dir / document["run"] / "run.json").read_text())
    assert row == {"id": document["run"], "target": document["summary"]["target"], "strategy": "quick",
                   "planned": meta["plan_size"], "recorded": document["summary"]["evaluated"], "complete": True,
                   "signatures": len(document["summary"]["signatures"])}
    code, text = run("runs", "list", "--runs-dir", str(runs_dir))
    assert code == 0 and document["run"] in text and f"{row['recorded']}/{row['planned']}+" in text


def test_runs_show_json(swept: tuple[Path, dict[str, Any]]) -> None:
    runs_dir, document = swept
    code, output = run("runs", "show", document["run"], "--runs-dir", str(runs_dir), "--json")
    assert code == 0, output
    shown = json.loads(output)
    assert shown["schema"] == "bisect-spec/run-show/1" and shown["run"] == document["run"]
    assert_valid(shown, "run-show")
    assert shown["summary"] == document["summary"]
    assert shown["recorded"] == document["summary"]["evaluated"]
    assert shown["meta"]["strategy"]["name"] == "quick" and shown["meta"]["search_budget"] == 5
    # a run directory given as a path works too
    code, text = run("runs", "show", str(runs_dir / document["run"]))
    count = len(document["summary"]["signatures"])
    assert code == 0 and f"{count} failure signatures" in text, text


def test_the_report_of_the_run_follows_its_schema_and_shows_source_statements(swept: tuple[Path, dict[str, Any]]) -> None:
    runs_dir, document = swept
    code, output = run("report", document["run"], "--runs-dir", str(runs_dir), "--format", "json")
    assert code == 0, output
    model = json.loads(output)
    assert_valid(model, "report")
    statements = [s["statement"] for s in model["cells"][0]["signatures"] if s["statement"]]
    assert statements and not any(re.search(r"(?<![\w.])_\.", statement) for statement in statements)  # never '_.x'


def test_summary_holds_no_path_of_its_run(swept: tuple[Path, dict[str, Any]]) -> None:
    runs_dir, document = swept
    assert any("shrink" in s for s in document["summary"]["signatures"])  # the CLI shrinks by default
    assert str(runs_dir) not in (runs_dir / document["run"] / "summary.json").read_text()


def test_runs_show_an_unfinished_run(tmp_path: Path) -> None:
    with store.create_run(tmp_path, {"plan_size": 10, "target": {}, "strategy": {"name": "quick"}}, run_id="half") as half:
        half.append({"key": "[]"})
    code, output = run("runs", "show", "half", "--runs-dir", str(tmp_path))
    assert code == 0
    assert output.strip() == ("run half did not finish: 1 of 10+ results recorded; "
                              "continue with: bisect-spec --resume half")


def test_runs_show_unknown_run(tmp_path: Path) -> None:
    code, output = run("runs", "show", "nope", "--runs-dir", str(tmp_path))
    assert code == 2
    assert error_line(output) == f"Error: no run 'nope' in {tmp_path}; {tmp_path} has no runs"


def test_resume_unknown_run(swept: tuple[Path, dict[str, Any]]) -> None:
    runs_dir, document = swept
    code, output = run("sweep", "--resume", "nope", "--runs-dir", str(runs_dir))
    assert code == 1
    assert error_line(output) == f"Error: no run 'nope' in {runs_dir}; recent runs: {document['run']}"
    code, output = run("--resume", "nope", "--runs-dir", str(runs_dir))  # the bare command sweeps too
    assert code == 1 and error_line(output).startswith("Error: no run 'nope' in ")


def test_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "stuff").mkdir()
    expected = f"Error: {tmp_path / 'stuff'} is not a bisect-spec run (no run.json)"
    for args in (["runs", "show", "stuff"], ["sweep", "--resume", "stuff"]):
        code, output = run(*args, "--runs-dir", str(tmp_path))
        assert code == 1
        assert error_line(output) == expected


def test_resume_a_run_in_use(tmp_path: Path) -> None:
    with store.create_run(tmp_path, {"plan_size": 10, "target": {}, "strategy": {"name": "quick"}}, run_id="busy"):
        code, output = run("sweep", "--resume", "busy", "--runs-dir", str(tmp_path))
    assert code == 1
    assert error_line(output).startswith("Error: run busy is in use by another bisect-spec process (pid ")


def test_fail_on_new_exits_3_for_a_failure_the_previous_run_lacked(swept: tuple[Path, dict[str, Any]],
                                                                    tmp_path: Path) -> None:
    import shutil

    runs_dir, document = swept
    shutil.copytree(runs_dir / document["run"], tmp_path / document["run"])
    previous = json.loads((tmp_path / document["run"] / "summary.json").read_text())
    dropped = previous["signatures"].pop()
    (tmp_path / document["run"] / "summary.json").write_text(json.dumps(previous))
    code, output = run("sweep", *TARGET, "--strategy", "quick", "--budget", "5", "--jobs", "2", "--no-shrink",
                       "--runs-dir", str(tmp_path), "--fail-on", "new")
    assert code == 3, output
    assert f"--fail-on new: 1 new failure signature: {dropped['id']}" in output
    yours = output.index("your draft (eagle3, EAGLE3): ")  # the default draft's own failures first
    assert yours < output.index("everything else: ")
    assert "HTML report:  " in output and (tmp_path / output.split("run ")[-1].split()[0] / "report.html").is_file()


def test_runs_show_and_report_narrow_to_an_algorithm_a_flag_or_a_pattern(swept: tuple[Path, dict[str, Any]]) -> None:
    runs_dir, document = swept
    signatures = document["summary"]["signatures"]
    eagle = [s for s in signatures if "EAGLE" in (s.get("algorithms") or {})]
    assert eagle, [s.get("algorithms") for s in signatures]
    code, text = run("runs", "show", document["run"], "--runs-dir", str(runs_dir), "--algorithm", "EAGLE")
    assert code == 0, text
    assert text.splitlines()[0].startswith(f"{len(eagle)} of {len(signatures)} failure signatures match --algorithm EAGLE")
    assert all(s["id"] in text for s in eagle)
    code, output = run("report", document["run"], "--runs-dir", str(runs_dir), "--format", "json", "--grep", "NoneType")
    assert code == 0, output
    kept = json.loads(output)["cells"][0]["signatures"]
    assert kept and all("NoneType" in s["message"] for s in kept) and len(kept) < len(signatures)
    code, output = run("runs", "show", document["run"], "--runs-dir", str(runs_dir), "--grep", "(")
    assert code == 2 and error_line(output).startswith("Error: --grep '(' is not a regular expression:")

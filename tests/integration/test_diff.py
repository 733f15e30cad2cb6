"""``bisect-spec diff`` on real SGLang releases.

The oracles are SGLang's own history, which we did not write: the seed's TypeError
(``'>' not supported between instances of 'NoneType' and 'int'``, EAGLE3 with
``--speculative-num-steps 1 --speculative-num-draft-tokens 3``) exists in 0.5.2 and not in 0.5.1.post3,
where the same flags get past the server arguments and crash later, in ``init_memory_pool`` (``speculative_eagle_topk``
is None there too); the K2.6 episode's bare ``assert self.speculative_eagle_topk is None and
self.speculative_num_draft_tokens is None`` is in both 0.5.11 and 0.5.12, on another line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bisect_spec import api
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.runtime import store
from tests.cli.helpers import run
from tests.conftest import require_release
from tests.schemas import assert_valid

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SEED = Config.from_argv(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3",
                         "--speculative-num-steps", "1"])
SEED_MESSAGE = "'>' not supported between instances of 'NoneType' and 'int'"
TARGET = ["--model", "deepseek-v3", "--draft", "eagle3", "--hardware", "h200"]
#: where a test checks the diff's own machinery, not a release's history: llama-3.1-8b + eagle3 on one H100 builds
#: its model on meta in ~0.14 s, where Kimi-K2.6 at its deployment shape takes 0.6-1 s
CHEAP = ["--model", "llama-3.1-8b", "--draft", "eagle3", "--hardware", "h100", "--gpus", "1"]
TINY_STRATEGY = Path(__file__).parents[1] / "resources" / "matrices" / "tiny-strategy.toml"
CHEAP_SPEC = api.TargetSpec(model="llama-3.1-8b", draft="eagle3", hardware="h100", gpus=1)


def test_the_seeds_typeerror_is_new_in_0_5_2_with_a_minimal_reproducer_checked_on_0_5_1_post3(
        tmp_path: Path) -> None:
    require_release("0.5.1.post3")
    require_release("0.5.2")
    spec = api.TargetSpec(model="deepseek-v3", draft="eagle3", hardware="h200")
    report = api.diff("0.5.1.post3", "0.5.2", spec, runs_dir=tmp_path, jobs=1)
    new = [g for g in report.changes.of("new") if g.new.exception.get("type") == "TypeError"]
    assert len(new) == 1, [g.to_dict()["new"]["headline"] for g in report.changes.groups]
    group = new[0]
    # the seed's flags are in the group (with or without the draft's path, as the plan has them)
    assert any(set(SEED.items) <= set(c.items) for c in group.configs)
    assert group.new.exception["message"] == SEED_MESSAGE
    reproducer = group.reproducer or {}
    assert reproducer["status"] == "minimal" and reproducer["here"] == "new"
    # on 0.5.1.post3 the minimal flags get past the server arguments (no such comparison there) and crash later,
    # in init_memory_pool, where draft_runner_cache_size multiplies speculative_eagle_topk (None: no topk given)
    # by an int (model_runner.py, read from that release's source): a different failure, so the 0.5.2 one is new
    assert reproducer["there_status"] in ("passed", "failed"), reproducer
    if reproducer["there_status"] == "failed":
        assert "init_memory_pool" in reproducer["there_headline"] and SEED_MESSAGE not in reproducer["there_headline"]
    assert group in report.gating
    # the code on both sides: 0.5.1.post3's __post_init__ has no such statement (its topk check is another one)
    there = group.detail["there_code"]
    assert (there["function"], there["found"]) == ("__post_init__", "function without the statement"), there
    # the stored document is valid, and the pull-request comment carries SGLang's words and the reproducer
    stored = json.loads((report.path / "diff.json").read_text())  # type: ignore[operator]
    assert_valid(stored, "diff")
    text = (report.path / "diff.md").read_text()  # type: ignore[operator]
    assert f"TypeError: {SEED_MESSAGE}" in text and " ".join(reproducer["argv"]) in text

    # the CLI: the same diff (from the cache), exit status 3, --json valid
    code, output = run("diff", "0.5.1.post3", "0.5.2", *TARGET, "--runs-dir", str(tmp_path), "--json")
    assert code == 3, output
    data = json.loads(output[output.index("{"):])
    assert_valid(data, "diff")
    assert data["counts"]["new"] >= 1 and data["gating"]
    # --allow takes a gated change out of the gate; every gated change allowed: exit 0
    allowed = [arg for key in data["gating"] for arg in ("--allow", key)]
    code, output = run("diff", "0.5.1.post3", "0.5.2", *TARGET, "--runs-dir", str(tmp_path), *allowed)
    assert code == 0, output
    assert "**The gate passes**" in output


def test_the_k26_episodes_assert_is_moved_from_0_5_11_to_0_5_12_not_new(tmp_path: Path) -> None:
    require_release("0.5.11")
    require_release("0.5.12")
    # the episode is the model's (Kimi-K2.6 at its deployment shape, 0.6-1 s an evaluation): a small plan, the core
    # EAGLE3 flags pairwise, has the assert's rows
    report = api.diff("0.5.11", "0.5.12", api.TargetSpec(model="kimi-k2.6", draft="eagle3"), runs_dir=tmp_path, jobs=1,
                      strategy=str(TINY_STRATEGY))

    def is_episode(outcome: Outcome) -> bool:
        statement = " ".join(str(outcome.frame.get("statement", "")).split())
        return (outcome.exception.get("type") == "AssertionError" and "speculative_eagle_topk is None" in statement
                and "speculative_num_draft_tokens is None" in statement)

    moved = [g for g in report.changes.of("moved") if is_episode(g.new)]
    assert len(moved) == 1, [g.to_dict()["new"]["headline"] for g in report.changes.groups]
    assert moved[0].detail["old_place"] != moved[0].detail["new_place"]
    assert is_episode(moved[0].old)
    assert not [g for g in report.changes.groups if g.kind in ("new", "fixed") and (is_episode(g.new) or is_episode(g.old))]


def test_a_release_against_itself_reports_nothing_and_exits_0(tmp_path: Path) -> None:
    require_release("0.5.12")
    code, output = run("diff", "0.5.12", "0.5.12", *CHEAP, "--runs-dir", str(tmp_path))
    assert code == 0, output
    assert "No change of verdict, failure, place, message or resolved value." in output
    stored = json.loads(next(tmp_path.glob("diff-*/diff.json")).read_text())
    assert stored["groups"] == [] and stored["gating"] == [] and stored["compared"] > 100


def test_flags_after_the_double_dash_are_in_every_configuration(tmp_path: Path) -> None:
    require_release("0.5.12")
    report = api.diff("0.5.12", "0.5.12", CHEAP_SPEC, runs_dir=tmp_path, flags=["--tp", "1", "--page-size", "16"],
                      jobs=1)
    runs = store.read_results(Path(report.runs["new"]), "") or []
    assert runs
    configs = [Config.from_argv(r["config"]) for r in runs]
    assert all(c.get("--tp") == ("1",) and c.get("--page-size") == ("16",) for c in configs)
    assert report.changes.compared > 0 and report.changes.groups == []


def test_the_pr_gate_script_catches_the_commit_that_brought_the_seeds_typeerror(tmp_path: Path) -> None:
    """examples/sglang-pr-gate.sh on a pull request made of one commit: the one that changed server_args.py
    between 0.5.1.post3 and 0.5.2 (the synthetic history of test_commit_bisect), merge base its parent."""
    from tests.integration.test_commit_bisect import history

    require_release("0.5.2")
    made = history("0.5.1.post3", "0.5.2")
    culprit = made.commit_touching("srt/server_args.py")
    script = Path(__file__).resolve().parents[2] / "examples" / "sglang-pr-gate.sh"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "BISECT_SPEC_PR_TARGETS": "deepseek-v3:eagle3"}
    done = subprocess.run(["bash", str(script), str(made.repo), f"{culprit}^", culprit, str(tmp_path / "gate")],
                          env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 3, done.stderr[-2000:]
    comment = (tmp_path / "gate" / "comment.md").read_text()
    assert "**The gate fails**" in comment
    new = comment.split("\n### New failures", 1)[1].split("\n### ", 1)[0]
    assert f"TypeError: {SEED_MESSAGE}" in new
    assert f"1-minimal on {made.new}+g{culprit[:12]}" in new  # the head's tree (its version.py says 0.5.2)


@pytest.mark.parametrize(("args", "line", "code"), [
    (["0.5.1.post3", "0.5.2", "--model", "kimi-k2.6"],
     "Error: SGLang 0.5.1.post3 does not know the architecture KimiK25ForConditionalGeneration of kimi-k2.6 (first "
     "known in 0.5.9); make OLD a release that knows it, or pick another --model", 1),
    (["0.5.1.post3", "0.5.2", "--model", "deepseek-v3", "--", "--nope", "3"],
     "Error: SGLang 0.5.1.post3 has no flag --nope", 2),
    (["0.5.1.post3", "0.5.2", "--strategy", "nope"], "Error: unknown strategy 'nope'", 2),
])
def test_bad_input_is_one_line_naming_the_fix(tmp_path: Path, args: list[str], line: str, code: int) -> None:
    from tests.cli.helpers import error_line

    require_release("0.5.1.post3")
    require_release("0.5.2")
    exit_code, output = run("diff", *args[:2], "--runs-dir", str(tmp_path), *args[2:])
    assert exit_code == code, output
    assert error_line(output).startswith(line)

"""The main job's answer to "what do I launch?", pure parts: the plan focused on the named draft's algorithms,
the configuration a user of that draft launches, the draft's knobs by verdict, the estimate said up front, and
findings folded to one line. No SGLang here: the records are shaped as the evaluator writes them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.report import text
from bisect_spec.report.summary import knob_map, starts_on_the_box
from bisect_spec.runtime.profiles import SERVES, DraftProfile
from bisect_spec.search.plan import Strategy, covering_plan
from bisect_spec.search.space import ABSENT, Branch, build_space, focused
from bisect_spec.workflows.sweep import FIRST_GUESS, estimate_line, remember_rate
from tests.unit.test_space_plan import TABLE

EAGLE3 = frozenset({"EAGLE3"})
BASE = Config.of({"--tp-size": ("8",)})


def outcome(flags: Mapping[str, str | None], *, stage: str = "draft_model", stopped: dict[str, str] | None = None,
            status: Status = Status.PASSED, **record: Any) -> Outcome:
    config = Config.of({"--tp-size": ("8",), **{k: (v,) if v else () for k, v in flags.items()}})
    return Outcome(config, status, "0.5.23", "3.11", "simulated:rtx-pro-6000x8",
                   {"status": status.value, "stage": stage, "needs_gpu": stopped or {}, **record})


def test_the_focused_space_sweeps_the_drafts_algorithms_and_none() -> None:
    space = build_space(TABLE, include=["--speculative-*"])
    every = space.spec("--speculative-algorithm")
    assert every is not None and ("NGRAM",) in every.values
    space = space.__class__(space.specs, space.core, space.fixed, space.groups,
                            (Branch("a:1", ("DFLASH",), ("--x",), ()), Branch("b:2", ("EAGLE3", "EAGLE"), ("--y",), ())))
    mine = focused(space, ["eagle3"])
    spec = mine.spec("--speculative-algorithm")
    assert spec is not None and spec.values == (ABSENT, ("EAGLE3",))  # the draft's own, and no speculative decoding
    assert [b.where for b in mine.branches] == ["b:2"]  # the branches other algorithms open are gone with them
    assert focused(space, []) is space
    plan = covering_plan(mine, Strategy(name="t", include=("--speculative-*",)))
    assert {c.get("--speculative-algorithm") for c in plan} == {None, ("EAGLE3",)}


def test_each_draft_kind_serves_its_algorithms() -> None:
    assert DraftProfile("x", "eagle3", "EAGLE3", None).algorithms == ("EAGLE3",)
    assert DraftProfile("x", "nextn", "NEXTN", None).algorithms == SERVES["nextn"] == ("NEXTN", "EAGLE")
    assert DraftProfile("mine", "user", "STANDALONE", None).algorithms == ("STANDALONE",)


def test_starts_on_the_box_prefers_every_check_run_then_the_furthest_stage_then_the_fewest_flags() -> None:
    draft = {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "@draft"}
    outcomes = [
        outcome({"--speculative-algorithm": "NGRAM"}),  # another algorithm: never the answer
        outcome(draft, stage="memory_pool", stopped={"memory_pool": "a GPU kernel"}),  # simplest, but partial
        outcome({**draft, "--speculative-num-steps": "3", "--page-size": "16"}),
        outcome({**draft, "--speculative-num-steps": "3"}, resolved={"speculative_num_steps": 3,
                                                                     "speculative_eagle_topk": 1},
                memory_pool={"max_total_num_tokens": 1000}, cuda_graphs={"capture_bs": [1, 2, 4]}),
        outcome({**draft, "--page-size": "0"}, status=Status.FAILED),
    ]
    starts = starts_on_the_box(outcomes, None, EAGLE3)
    assert starts is not None
    assert Config.from_argv(starts["argv"]) == outcomes[3].config  # every check ran, and fewer flags than the other
    assert starts["verdict"] == "PASSED" and starts["full_passes"] == 2 and starts["passes"] == 3
    assert starts["resolved"] == {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
    assert starts["memory_pool"]["max_total_num_tokens"] == 1000
    # where nothing ran every check, the furthest partial pass, saying so
    partial = starts_on_the_box(outcomes[:2], None, EAGLE3)
    assert partial is not None and partial["verdict"] == "PASSED UP TO" and partial["full_passes"] == 0
    assert starts_on_the_box(outcomes[:1], None, EAGLE3) is None  # no row of the draft's algorithm passed


def test_the_knob_map_has_one_cell_per_setting_at_the_base_with_its_worst_verdict() -> None:
    steps = "--speculative-num-steps"
    outcomes = [
        outcome({"--speculative-algorithm": "EAGLE3", steps: "1"}),
        outcome({"--speculative-algorithm": "EAGLE3", steps: "1", "--speculative-draft-model-path": "@draft"},
                status=Status.FAILED),
        outcome({"--speculative-algorithm": "EAGLE3", steps: "2"}, stopped={"memory_pool": "a GPU kernel"}),
        outcome({"--speculative-algorithm": "EAGLE3", steps: "3", "--page-size": "16"}),  # another flag: not a knob
        outcome({"--speculative-algorithm": "EAGLE3", steps: "4"}, status=Status.FAILED,
                will_not_start={"cause": "weights"}),
    ]
    cells = {c["steps"]: c["verdict"] for c in knob_map(outcomes, EAGLE3, BASE)}
    assert cells == {"1": "failed"}  # rows with the draft's path only, where any row gave it (the user passes it)
    outcomes = [o for o in outcomes if "@draft" not in o.config.flag_argv()]
    cells = {c["steps"]: c["verdict"] for c in knob_map(outcomes, EAGLE3, BASE)}
    assert cells == {"1": "will_start", "2": "passed_up_to", "4": "will_not_start"}
    lines = text.knob_lines(knob_map(outcomes, EAGLE3, BASE), 100)
    assert any("ok*" in line for line in lines) and any("OOM" in line for line in lines)


def test_the_first_lines_are_the_command_to_launch() -> None:
    starts = {"argv": ["--speculative-algorithm", "EAGLE3", "--tp-size", "8"], "verdict": "PASSED",
              "reached": "the draft model", "stopped": {}, "full_passes": 3, "passes": 4, "algorithms": ["EAGLE3"],
              "command": "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.6 --tp-size 8",
              "resolved": {"speculative_num_steps": 3}, "knobs": []}
    target = {"model": "kimi-k2.6", "draft": "eagle3", "hardware": "rtx-pro-6000x8", "release": "0.5.23"}
    lines = text.starts_lines(starts, target, 120, None)
    assert lines[0].startswith("starts on your box (EAGLE3, rtx-pro-6000x8, SGLang 0.5.23): 3 of 4")
    assert lines[1].strip() == starts["command"]
    assert any("bisect-spec probe --model kimi-k2.6 --draft eagle3" in line for line in lines)
    assert text.starts_lines(None, target, 120, None) == []


def test_findings_fold_to_one_line_per_kind() -> None:
    findings = [{"kind": "override", "count": 3}, {"kind": "ignored", "count": 1}, {"kind": "override", "count": 2}]
    assert text.folded_findings(findings) == "3 findings in passing configurations (override ×5, ignored ×1)"


def test_the_estimate_comes_from_the_last_run_of_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))
    first = estimate_line(1000, "0.5.23 kimi-k2.6 x8 default EAGLE3", 2)
    rows = round(1000 * FIRST_GUESS["rows_per_plan_row"])
    assert first.startswith(f"plan: 1000 rows, then about {rows - 1000} from the later phases") and "first guess" in first
    remember_rate("0.5.23 kimi-k2.6 x8 default EAGLE3", seconds=100.0, rows=2000, plan=1000, jobs=2)
    assert estimate_line(1000, "0.5.23 kimi-k2.6 x8 default EAGLE3", 2) == \
        "plan: 1000 rows, then about 1000 from the later phases: about 2 min on 2 workers (from the last run of this target)"
    assert "first guess" in estimate_line(1000, "another target", 1)

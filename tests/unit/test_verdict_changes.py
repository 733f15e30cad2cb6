"""The grouping of ``bisect-spec diff`` (reduce/verdict_changes.py) on outcomes built by hand: every kind of
change, what is not compared, and what the gate refuses. SGLang's behaviour is tested on real releases in
tests/integration/test_diff.py; these test the comparison's own rules."""

from __future__ import annotations

from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.reduce.verdict_changes import compare
from bisect_spec.report.diff_text import diff_markdown

ASSERT = "assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None"


def _outcome(argv: list[str], status: str = "passed", *, release: str = "old", line: int = 10, file: str = "srt/a.py",
             function: str = "check", statement: str = ASSERT, message: str = "", exc: str = "AssertionError",
             resolved: dict[str, Any] | None = None, tool_fault: str | None = None) -> Outcome:
    record: dict[str, Any] = {"status": status, "resolved": resolved or {}}
    if status != "passed":
        record["exception"] = {"type": exc, "module": "builtins", "message": message}
        record["frame"] = {"file": file, "line": line, "function": function, "statement": statement,
                           "context": [[line, f"        {statement}"]]}
    if tool_fault:
        record.update(status="crashed", tool_fault=tool_fault, crash="tool fault")
    return Outcome.from_record(Config.from_argv(argv), record, release=release, python="3.11", hardware="h200x8")


def _by_key(*outcomes: Outcome) -> dict[str, Outcome]:
    return {o.config.key(): o for o in outcomes}


A = ["--speculative-algorithm", "EAGLE3"]
B = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1"]
C = ["--speculative-algorithm", "EAGLE"]


def test_a_failure_only_the_new_side_raises_is_new_and_gated_until_allowed() -> None:
    old = _by_key(_outcome(A), _outcome(B))
    new = _by_key(_outcome(A, release="new"), _outcome(B, "failed", release="new", exc="TypeError", statement="x > 1",
                                                       message="'>' not supported between instances of 'NoneType' and 'int'"))
    changes = compare(old, new)
    assert [g.kind for g in changes.groups] == ["new"]
    group = changes.groups[0]
    assert group.example == Config.from_argv(B) and group.old.passed
    assert changes.gating() == [group]
    assert changes.gating([group.new.signature.id]) == []  # type: ignore[union-attr]
    assert changes.gating([group.key]) == []


def test_the_same_statement_on_another_line_is_moved_not_new_nor_fixed() -> None:
    old = _by_key(_outcome(A, "failed", line=649))
    new = _by_key(_outcome(A, "failed", release="new", line=757))
    changes = compare(old, new)
    assert [g.kind for g in changes.groups] == ["moved"]
    assert changes.groups[0].detail == {"old_place": "srt/a.py:649 in check", "new_place": "srt/a.py:757 in check"}
    assert changes.gating() == []


def test_a_function_renamed_around_the_same_statement_is_moved() -> None:
    old = _by_key(_outcome(A, "failed", function="_handle_speculative_decoding", file="srt/server_args.py"))
    new = _by_key(_outcome(A, "failed", release="new", function="_handle_eagle_family",
                           file="srt/arg_groups/speculative_hook.py"))
    assert [g.kind for g in compare(old, new).groups] == ["moved"]


def test_other_words_at_the_same_place_are_a_changed_message() -> None:
    old = _by_key(_outcome(A, "failed", exc="ValueError", statement="raise ValueError(f'bad {x}')", message="bad 3"))
    new = _by_key(_outcome(A, "failed", release="new", exc="ValueError", statement="raise ValueError(f'bad {x}')",
                           message="bad 4"))
    changes = compare(old, new)
    assert [g.kind for g in changes.groups] == ["message"]
    assert changes.groups[0].detail == {"old_message": "bad 3", "new_message": "bad 4"}


def test_a_known_failure_catching_a_configuration_the_old_side_passed_is_wider_and_gated() -> None:
    old = _by_key(_outcome(A, "failed"), _outcome(C))
    new = _by_key(_outcome(A, "failed", release="new"), _outcome(C, "failed", release="new"))
    changes = compare(old, new)
    assert [g.kind for g in changes.groups] == ["wider"]
    assert changes.groups[0].configs == [Config.from_argv(C)]
    assert len(changes.gating()) == 1


def test_fixed_and_narrower_are_reported_and_not_gated() -> None:
    old = _by_key(_outcome(A, "failed"), _outcome(C, "failed", statement="assert other", line=20))
    new = _by_key(_outcome(A, release="new"), _outcome(C, release="new"))
    changes = compare(old, new)
    assert sorted(g.kind for g in changes.groups) == ["fixed", "fixed"]
    assert changes.gating() == []
    old = _by_key(_outcome(A, "failed"), _outcome(C, "failed"))
    new = _by_key(_outcome(A, "failed", release="new"), _outcome(C, release="new"))
    assert [g.kind for g in compare(old, new).groups] == ["narrower"]


def test_a_resolved_value_that_differs_with_the_same_flags_is_a_changed_default_named_by_its_field() -> None:
    old = _by_key(_outcome(A, resolved={"speculative_num_steps": 3, "page_size": 1}),
                  _outcome(C, resolved={"speculative_num_steps": 3}))
    new = _by_key(_outcome(A, release="new", resolved={"speculative_num_steps": 5, "page_size": 1}),
                  _outcome(C, release="new", resolved={"speculative_num_steps": 5}))
    changes = compare(old, new)
    assert [g.kind for g in changes.groups] == ["defaults"]
    group = changes.groups[0]
    assert group.detail["field"] == "speculative_num_steps" and len(group.configs) == 2
    assert (group.detail["old_value"], group.detail["new_value"]) == (3, 5)
    assert changes.gating(["speculative_num_steps"]) == []


def test_usage_errors_and_faults_of_ours_are_not_compared_and_say_why() -> None:
    old = _by_key(_outcome(A, "usage", exc="SystemExit", message="argument --speculative-algorithm: invalid choice: "
                           "'NGRAM' (choose from 'EAGLE')"), _outcome(C))
    new = _by_key(_outcome(A, release="new"), _outcome(C, release="new", tool_fault="draft_worker"))
    changes = compare(old, new)
    assert changes.groups == [] and changes.compared == 0
    assert changes.not_compared == {
        "old refuses a flag or value: argument --speculative-algorithm: invalid choice: 'NGRAM'": 1,
        "new: a fault of bisect-spec's emulation (draft_worker)": 1}


def test_the_same_outcomes_on_both_sides_are_no_change() -> None:
    outcomes = _by_key(_outcome(A, "failed"), _outcome(C, resolved={"page_size": 1}))
    changes = compare(outcomes, outcomes)
    assert changes.groups == [] and changes.compared == 2 and changes.gating() == []


def test_the_markdown_carries_sglangs_own_message_and_a_bare_asserts_statement() -> None:
    message = "'>' not supported between instances of 'NoneType' and 'int'"
    old = _by_key(_outcome(A, "failed", line=649), _outcome(B))
    new = _by_key(_outcome(A, "failed", release="new", line=757),
                  _outcome(B, "failed", release="new", exc="TypeError", statement="if x > 1:", message=message))
    changes = compare(old, new)
    data = {"old": "0.5.1.post3", "new": "0.5.2", "target": {"model": "deepseek-v3", "draft": "eagle3"},
            "strategy": "quick", "flags": [], "allow": [], "runs": {"old": "r1", "new": "r2"},
            "compared": changes.compared, "not_compared": {}, "counts": changes.counts(),
            "gating": [g.key for g in changes.gating()], "groups": [g.to_dict() for g in changes.groups]}
    text = diff_markdown(data)
    assert "**The gate fails**" in text
    assert f"`TypeError: {message}`" in text  # SGLang's words, not the normal form (<type>)
    assert "<type>" not in text and "<n>" not in text
    assert f"(no message) at `{ASSERT}`" in text
    assert "`srt/a.py:649 in check`" in text and "`srt/a.py:757 in check`" in text


def test_a_configuration_failing_on_both_sides_in_two_known_ways_is_replaced_and_not_gated() -> None:
    other = "assert other"
    old = _by_key(_outcome(A, "failed"), _outcome(B, "failed", statement=other), _outcome(C, "failed"))
    new = _by_key(_outcome(A, "failed", release="new"), _outcome(B, "failed", release="new", statement=other),
                  _outcome(C, "failed", release="new", statement=other))
    changes = compare(old, new)
    assert [g.kind for g in changes.groups] == ["replaced"]
    assert changes.groups[0].configs == [Config.from_argv(C)]
    assert changes.gating() == []  # it failed before too: not a configuration that stopped working


def _staged(outcome: Outcome, stage: str, passed: list[str]) -> Outcome:
    outcome.record.update(stage=stage, stages_passed=passed)
    return outcome


def test_a_failure_of_a_stage_the_other_release_does_not_run_is_not_compared() -> None:
    # 0.5.13 sizes the memory pool; 0.5.14 does not yet, and its configuration went past where it would
    old = _by_key(_staged(_outcome(A, "failed", message="Not enough memory.", exc="RuntimeError"), "memory_pool",
                          ["parse", "model_runner"]))
    new = _by_key(_staged(_outcome(A, release="new"), "draft_model", ["parse", "model_runner", "target_model"]))
    changes = compare(old, new)
    assert changes.groups == []
    assert changes.not_compared == {"old failed in stage memory_pool, which new's release does not run": 1}
    # where the other side stopped before that stage, the failures compare as before
    early = _by_key(_staged(_outcome(A, "failed", release="new", line=3), "parse", []))
    assert [g.kind for g in compare(old, early).groups] == ["new", "fixed"]

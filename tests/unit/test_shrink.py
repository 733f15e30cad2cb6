"""Shrinking with made-up predicates whose minimal answer is known."""

from __future__ import annotations

import pytest

from bisect_spec.errors import BudgetExhausted
from bisect_spec.model.flags import Config
from bisect_spec.model.signature import Signature
from bisect_spec.reduce.shrink import Budget, shrink
from bisect_spec.search.space import FlagSpace, FlagSpec

BUG = Signature("failed", "AssertionError", "srt/x.py::f", "assert _.a is None", "")
OTHER = Signature("failed", "TypeError", "srt/x.py::g", "if _.b > 1:", "boom")

SPACE = FlagSpace(tuple(FlagSpec(f"--f{i}", (None, ("1",), ("2",), ("3",), ("8",))) for i in range(10)))


def needs(*flags: str, min_value: int = 1) -> object:
    def test(config: Config) -> Signature | None:
        values = config.as_dict()
        if all(f in values and int(values[f][0]) >= min_value for f in flags):
            return BUG
        return None
    return test


def full(n: int = 10, value: str = "8") -> Config:
    return Config.of({f"--f{i}": value for i in range(n)})


def test_finds_the_two_necessary_flags_and_simplest_values() -> None:
    result = shrink(full(), needs("--f3", "--f7"), space=SPACE)  # type: ignore[arg-type]
    assert result.status == "minimal"
    assert result.minimal == Config.of({"--f3": "1", "--f7": "1"})
    assert result.signature == BUG


def test_value_threshold_keeps_the_simplest_failing_value() -> None:
    result = shrink(full(), needs("--f2", min_value=3), space=SPACE)  # type: ignore[arg-type]
    assert result.minimal == Config.of({"--f2": "3"})
    changes = {p.change: p.outcome for p in result.proof}
    assert changes == {"remove --f2": "passed", "--f2 1": "passed", "--f2 2": "passed"}


def test_never_slides_onto_another_signature() -> None:
    def test(config: Config) -> Signature | None:
        flags = set(config.flags())
        if {"--f1", "--f2"} <= flags:
            return BUG
        if "--f1" in flags:
            return OTHER  # simpler, but a different bug
        return None

    result = shrink(full(), test, space=SPACE)
    assert result.minimal.flags() == ["--f1", "--f2"]
    assert result.signature == BUG
    assert OTHER in result.others and result.others[OTHER].flags() == ["--f1"]


def test_flaky_original_is_not_shrunk() -> None:
    calls = iter([BUG, None, BUG, BUG])
    result = shrink(full(), lambda c: next(calls), space=SPACE)
    assert result.status == "flaky"
    assert result.minimal == full()


def test_passing_original_is_reported_not_shrunk() -> None:
    assert shrink(full(), lambda c: None, space=SPACE).status == "passes"


def test_budget_raises_with_the_best_result_so_far() -> None:
    with pytest.raises(BudgetExhausted) as caught:
        shrink(full(), needs("--f3", "--f7"), space=SPACE, budget=Budget(max_evaluations=6))  # type: ignore[arg-type]
    best = caught.value.result
    assert best.status == "stopped" and "evaluation budget of 6 spent" in best.stop_reason
    assert needs("--f3", "--f7")(best.minimal) == BUG  # type: ignore[operator]
    assert len(best.minimal) <= len(full())


def test_hints_reach_the_answer_in_few_evaluations() -> None:
    blind = shrink(full(), needs("--f3", "--f7"), space=SPACE)  # type: ignore[arg-type]
    hinted = shrink(full(), needs("--f3", "--f7"), space=SPACE, hints={"--f3", "--f7"})  # type: ignore[arg-type]
    assert hinted.minimal == blind.minimal
    assert hinted.removal_evaluations < blind.removal_evaluations


def test_sweep_evidence_is_tried_first() -> None:
    evidence = {"--f3", "--f7"}  # present in every configuration a sweep saw failing this way
    result = shrink(full(), needs("--f3", "--f7"), space=SPACE, evidence=evidence)  # type: ignore[arg-type]
    assert result.minimal == Config.of({"--f3": "1", "--f7": "1"})
    assert result.history[0][0] == "keep only the 2 flags present in every configuration seen failing this way"
    # the guess, two removals proving it; after values simplify, two removals proving the new ones
    assert result.removal_evaluations <= 5


def test_wrong_evidence_costs_one_evaluation_and_no_correctness() -> None:
    right = shrink(full(), needs("--f3", "--f7"), space=SPACE)  # type: ignore[arg-type]
    wrong = shrink(full(), needs("--f3", "--f7"), space=SPACE, evidence={"--f1"})  # type: ignore[arg-type]
    assert wrong.minimal == right.minimal
    assert wrong.evaluations <= right.evaluations + 1


@pytest.mark.parametrize("hints", [set(), {"--f3", "--f7"}, {"--f3"}, {"--f1", "--f2"}, {"--f3", "--f7", "--f9"},
                                   {"--nope"}], ids=["empty", "right", "part", "misleading", "superset", "unknown"])
def test_any_hint_gives_the_same_one_minimal_result(hints: set[str]) -> None:
    blind = shrink(full(), needs("--f3", "--f7"), space=SPACE)  # type: ignore[arg-type]
    hinted = shrink(full(), needs("--f3", "--f7"), space=SPACE, hints=hints)  # type: ignore[arg-type]
    assert hinted.status == "minimal" and hinted.signature == BUG
    assert hinted.minimal == blind.minimal == Config.of({"--f3": "1", "--f7": "1"})
    assert {p.outcome for p in hinted.proof} == {"passed"}


def test_a_right_hint_costs_the_guess_and_the_proof_only() -> None:
    result = shrink(full(), needs("--f3", "--f7", min_value=3), space=SPACE,  # type: ignore[arg-type]
                    hints={"--f3", "--f7"})
    assert result.minimal == Config.of({"--f3": "3", "--f7": "3"})
    assert result.history[0][0] == "keep only the 2 flags named by the failure"
    # original + re-check + guess; 2 removals; per flag 2 failing simpler values and 1 that holds;
    # after the values moved, the 2 removals and the simpler values of the other flag again
    assert result.evaluations <= 3 + 2 + 2 * 3 + 2 + 2


def test_a_misleading_hint_costs_at_most_two_evaluations_more_than_none() -> None:
    blind = shrink(full(), needs("--f3", "--f7"), space=SPACE)  # type: ignore[arg-type]
    wrong = shrink(full(), needs("--f3", "--f7"), space=SPACE, hints={"--f1", "--f2"})  # type: ignore[arg-type]
    assert wrong.minimal == blind.minimal
    # one wrong guess; the hinted flags, kept last, are removed in the one-at-a-time pass
    assert wrong.evaluations <= blind.evaluations + 2


def test_hint_and_evidence_together_guess_their_intersection_first() -> None:
    result = shrink(full(), needs("--f3", "--f7"), space=SPACE,  # type: ignore[arg-type]
                    hints={"--f3", "--f7", "--f1"}, evidence={"--f3", "--f7", "--f9"})
    assert result.history[0] == ("keep only the 2 flags named by the failure and present in every configuration "
                                 "seen failing this way", Config.of({"--f3": "8", "--f7": "8"}))


def test_a_learnt_reproducer_the_configuration_holds_is_the_first_guess_and_still_proven() -> None:
    wide = Config.of({f"--g{i}": "1" for i in range(60)})
    test = needs("--g5", "--g41")
    learnt = Config.of({"--g5": "1", "--g41": "1"})
    cold = shrink(wide, test)  # type: ignore[arg-type]
    warm = shrink(wide, test, learnt=[learnt])  # type: ignore[arg-type]
    assert warm.minimal == cold.minimal == learnt
    assert warm.history[0][0] == "keep only the flags of a reproducer already learnt"
    assert warm.evaluations < cold.evaluations
    assert [p.change for p in warm.proof] == ["remove --g41", "remove --g5"]  # 1-minimality is still shown


def test_a_learnt_reproducer_that_does_not_reproduce_here_costs_one_evaluation_and_changes_nothing() -> None:
    wide = Config.of({f"--g{i}": "1" for i in range(60)})
    test = needs("--g5", "--g41")
    cold = shrink(wide, test)  # type: ignore[arg-type]
    wrong = shrink(wide, test, learnt=[Config.of({"--g5": "1", "--g7": "1"})])  # type: ignore[arg-type]
    absent = shrink(wide, test, learnt=[Config.of({"--g5": "1", "--g99": "1"})])  # type: ignore[arg-type]
    assert wrong.minimal == absent.minimal == cold.minimal
    assert wrong.evaluations == cold.evaluations + 1
    assert absent.evaluations == cold.evaluations  # not held by the configuration: not tried

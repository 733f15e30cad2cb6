"""The commit search (binary search with skips) and the small pure pieces of a commit report."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisect_spec.reduce.commits import first_change
from bisect_spec.runtime.sources import function_source, pr_number

COMMITS = [f"c{i:03d}" for i in range(249)]
Observe = Callable[[str], tuple[Hashable | None, str]]


def history(first_new: int, skipped: dict[int, str] | None = None, *, third: int | None = None) -> tuple[list[int], Observe]:
    """Commits before ``first_new`` are old, the rest new; ``skipped`` maps an index to its skip reason."""
    calls: list[int] = []

    def observe(commit: str) -> tuple[Hashable | None, str]:
        index = COMMITS.index(commit)
        calls.append(index)
        if skipped and index in skipped:
            return None, skipped[index]
        if third is not None and first_new <= index < third:
            return "failed:other", ""
        return ("passed" if index < first_new else "failed:d4b68cd739"), ""

    return calls, observe


@pytest.mark.parametrize("first_new", [0, 1, 101, 124, 247, 248])
def test_without_skips_the_first_new_commit_is_exact_in_log2_probes(first_new: int) -> None:
    calls, observe = history(first_new)
    found = first_change(COMMITS, observe, old_key="passed", new_key="failed:d4b68cd739")
    assert found.exact and found.candidates == [COMMITS[first_new]]
    assert len(calls) <= math.ceil(math.log2(len(COMMITS)))  # 8 for 249: the ends make it 10
    assert len(calls) == len(set(calls)) and len(COMMITS) - 1 not in calls  # the new end is never probed


def test_one_commit_needs_no_probe() -> None:
    calls, observe = history(0)
    found = first_change(["c000"], observe, old_key="passed", new_key="failed:d4b68cd739")
    assert calls == [] and found.exact and found.candidates == ["c000"]


def test_a_skipped_commit_right_before_the_change_makes_a_range_as_git_reports_it() -> None:
    _calls, observe = history(101, {100: "does not import: ImportError: cannot import name 'X'"})
    found = first_change(COMMITS, observe, old_key="passed", new_key="failed:d4b68cd739")
    assert not found.exact and found.candidates == COMMITS[100:102]
    assert [p.index for p in found.skipped] == [100] and found.untested == []


def test_a_run_skipped_for_one_reason_is_bracketed_not_walked() -> None:
    """54 broken commits ending at the culprit (it fixes the import it broke): found as a range in ~log2 probes."""
    broken = {i: "does not import: AttributeError: ServerArgs has no 'speculative_attention_mode'" for i in range(169, 223)}
    calls, observe = history(223, broken)
    found = first_change(COMMITS, observe, old_key="passed", new_key="failed:d4b68cd739")
    assert COMMITS[223] in found.candidates and found.candidates[0] == COMMITS[169]
    assert found.last_old == 168 and found.first_new == 223
    assert len(calls) <= 2 * math.ceil(math.log2(len(COMMITS)))  # not 54
    assert set(found.untested) <= set(broken) and found.untested  # assumed skipped, and said so


def test_a_gap_between_skips_with_different_reasons_is_searched() -> None:
    """Two separate broken runs with old commits between them: the range does not swallow the old ones."""
    broken = {**{i: "MoeRunner" for i in range(118, 126)}, **{i: "speculative_attention_mode" for i in range(169, 223)}}
    _calls, observe = history(223, broken)
    found = first_change(COMMITS, observe, old_key="passed", new_key="failed:d4b68cd739")
    assert found.last_old == 168 and found.first_new == 223


def test_a_third_verdict_is_new_and_marked() -> None:
    _calls, observe = history(60, third=90)
    found = first_change(COMMITS, observe, old_key="passed", new_key="failed:d4b68cd739")
    assert found.exact and found.first_new == 60
    assert next(p for p in found.probes if p.index == 60).other


def test_max_probes_stops_with_the_range_so_far() -> None:
    calls, observe = history(101)
    found = first_change(COMMITS, observe, old_key="passed", new_key="failed:d4b68cd739", max_probes=3)
    assert found.stopped and len(calls) == 3
    assert COMMITS[101] in found.candidates and len(found.candidates) < len(COMMITS)


@settings(max_examples=150, deadline=None)
@given(size=st.integers(2, 80), data=st.data())
def test_the_first_new_commit_is_always_among_the_candidates(size: int, data: st.DataObject) -> None:
    commits = COMMITS[:size]
    first_new = data.draw(st.integers(0, size - 1))
    skipped = data.draw(st.dictionaries(st.integers(0, size - 2), st.sampled_from(["a", "b"]), max_size=size))
    calls, observe = history(first_new, skipped)
    found = first_change(commits, observe, old_key="passed", new_key="failed:d4b68cd739")
    assert commits[first_new] in found.candidates
    assert len(calls) == len(set(calls)) and size - 1 not in calls
    # every candidate but the last was probed skipped or is untested between skips
    inside = set(range(found.last_old + 1, found.first_new))
    assert inside == {p.index for p in found.skipped if p.index in inside} | set(found.untested)
    if not skipped:
        assert found.exact and len(calls) <= math.ceil(math.log2(size))


@pytest.mark.parametrize(("subject", "number"), [
    ("[Spec] Fix topk check for EAGLE3 (#12345)", 12345), ("Revert \"x (#1)\" (#2)", 2), ("no number", None),
    ("Update srt/server_args.py (#20102)", 20102)])
def test_pull_request_number_from_the_subject(subject: str, number: int | None) -> None:
    assert pr_number(subject) == number


def test_function_source_finds_methods_with_their_decorators() -> None:
    text = "class A:\n    @staticmethod\n    def f(x):\n        return x > 1\n\ndef g():\n    pass\n"
    assert function_source(text, "f") == (2, "    @staticmethod\n    def f(x):\n        return x > 1")
    assert function_source(text, "h") is None and function_source("def (", "f") is None

"""Covering arrays: every required t-tuple is covered, deterministically, with valid rows."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisect_spec.search.covering import covering_array, missing_tuples

Subsets = list[tuple[list[int], int]]


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[int], int, Subsets]:
    """Small domain lists (2-7 parameters, 1-5 values), a strength 1-3, maybe a stronger subset."""
    domains = draw(st.lists(st.integers(1, 5), min_size=2, max_size=7))
    strength = draw(st.integers(1, 3))
    subsets: Subsets = []
    if draw(st.booleans()):
        params = draw(st.lists(st.integers(0, len(domains) - 1), min_size=2, max_size=len(domains), unique=True))
        subsets.append((params, draw(st.integers(strength + 1, strength + 2))))
    return domains, strength, subsets


def two_largest_product(domains: Sequence[int]) -> int:
    largest = sorted(domains, reverse=True)
    return largest[0] * largest[1]


@settings(max_examples=150, deadline=None)
@given(problems(), st.integers(0, 2**16))
def test_every_required_tuple_is_covered(problem: tuple[list[int], int, Subsets], seed: int) -> None:
    domains, strength, subsets = problem
    rows = covering_array(domains, strength, subsets=subsets, seed=seed)
    assert missing_tuples(rows, domains, strength, subsets=subsets) == 0


@settings(max_examples=100, deadline=None)
@given(problems(), st.integers(0, 2**16))
def test_rows_are_valid_and_deterministic(problem: tuple[list[int], int, Subsets], seed: int) -> None:
    domains, strength, subsets = problem
    rows = covering_array(domains, strength, subsets=subsets, seed=seed)
    assert rows, "a non-empty space needs at least one row"
    for row in rows:
        assert len(row) == len(domains)
        assert all(0 <= value < size for value, size in zip(row, domains, strict=True)), row
    assert covering_array(list(domains), strength, subsets=[(list(p), t) for p, t in subsets], seed=seed) == rows
    if strength >= 2:
        assert len(rows) >= two_largest_product(domains)
    else:
        assert len(rows) >= max(domains)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=5), st.integers(0, 100))
def test_missing_tuples_detects_a_dropped_row(domains: list[int], seed: int) -> None:
    """The checker the other properties rely on is not vacuous: removing a needed row is noticed."""
    rows = covering_array(domains, 2, seed=seed)
    # the pair (0, 0) of the two largest parameters is covered by exactly the rows holding it
    first, second = sorted(range(len(domains)), key=lambda p: -domains[p])[:2]
    holding = [r for r in rows if r[first] == 0 and r[second] == 0]
    assert holding
    rest = [r for r in rows if not (r[first] == 0 and r[second] == 0)]
    assert missing_tuples(rest, domains, 2) >= 1


def test_the_documented_eight_flag_sizes() -> None:
    """covering.py's table: 8 flags at t=3 gives 754 rows and no missing tuple; t=2 + t=3 on the
    first four flags (the largest domains) needs no more rows than that."""
    domains = [7, 9, 9, 9, 2, 5, 3, 4]
    full = covering_array(domains, 3)
    assert (len(full), missing_tuples(full, domains, 3)) == (754, 0)
    mixed_subsets: Subsets = [([0, 1, 2, 3], 3)]
    mixed = covering_array(domains, 2, subsets=mixed_subsets)
    assert (len(mixed), missing_tuples(mixed, domains, 2, subsets=mixed_subsets)) == (754, 0)
    # a mixed-strength array is not a full 3-way array: some triple outside the subset is missing
    assert missing_tuples(mixed, domains, 3) > 0
    pairs = covering_array(domains, 2)
    assert missing_tuples(pairs, domains, 2) == 0
    assert 81 <= len(pairs) < 100


def test_bad_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="every domain needs at least one value"):
        covering_array([2, 0, 3], 2)
    with pytest.raises(ValueError, match="subset parameter out of range"):
        covering_array([2, 2, 3], 2, subsets=[([0, 3], 2)])
    assert covering_array([], 2) == []

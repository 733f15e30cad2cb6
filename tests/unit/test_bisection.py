"""The release bisection algorithm, on made-up step functions whose changes are known."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from bisect_spec.reduce.bisection import Observation, find_changes
from bisect_spec.runtime.environments import version_key

RELEASES = [f"0.{i // 10}.{i % 10}" for i in range(64)]


def step(boundaries: list[int], skipped: frozenset[int] = frozenset()) -> tuple[list[int], object]:
    calls: list[int] = []

    def observe(release: str) -> Observation:
        i = RELEASES.index(release)
        calls.append(i)
        if i in skipped:
            return Observation(release, None, reason="does not build")
        return Observation(release, sum(1 for b in boundaries if i >= b))

    return calls, observe


def test_single_change_is_found_in_log_probes() -> None:
    calls, observe = step([37])
    search = find_changes(RELEASES, observe)  # type: ignore[arg-type]
    assert [(c.before.release, c.after.release) for c in search.changes] == [(RELEASES[36], RELEASES[37])]
    assert len(calls) <= 2 + math.ceil(math.log2(len(RELEASES) - 1))
    assert len(calls) == len(set(calls))


def test_no_change_costs_the_two_ends() -> None:
    calls, observe = step([])
    search = find_changes(RELEASES, observe)  # type: ignore[arg-type]
    assert search.changes == [] and sorted(calls) == [0, 63]
    assert search.segments()[0][0] == RELEASES


def test_skipped_release_next_to_the_change_is_reported_between() -> None:
    _calls, observe = step([20], skipped=frozenset({19}))
    search = find_changes(RELEASES, observe)  # type: ignore[arg-type]
    (change,) = search.changes
    assert (change.before.release, change.after.release) == (RELEASES[18], RELEASES[20])
    assert [o.release for o in search.skipped] == [RELEASES[19]]


def test_skipped_ends_move_inwards() -> None:
    _calls, observe = step([30], skipped=frozenset({0, 1, 63}))
    search = find_changes(RELEASES, observe)  # type: ignore[arg-type]
    assert [(c.before.release, c.after.release) for c in search.changes] == [(RELEASES[29], RELEASES[30])]
    assert search.segments()[0][0][0] == RELEASES[2]


def test_a_free_release_near_the_middle_is_preferred() -> None:
    calls, observe = step([10])
    free = {RELEASES[28]}
    find_changes(RELEASES, observe, free=lambda r: r in free)  # type: ignore[arg-type]
    assert calls[2] == 28  # middle of 0..63 is 31.5; 28 is within a quarter width and costs nothing


def test_known_observations_are_not_repeated() -> None:
    calls, observe = step([5])
    known = [observe(RELEASES[0]), observe(RELEASES[63])]  # type: ignore[operator]
    calls.clear()
    find_changes(RELEASES, observe, known=known)  # type: ignore[arg-type]
    assert 0 not in calls and 63 not in calls


def test_post_releases_sort_after_their_release() -> None:
    assert sorted(["0.5.10.post1", "0.5.11", "0.5.10", "0.4.6.post5", "0.4.6"], key=version_key) == [
        "0.4.6", "0.4.6.post5", "0.5.10", "0.5.10.post1", "0.5.11"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 63), max_size=5, unique=True), st.frozensets(st.integers(0, 63), max_size=10),
       st.frozensets(st.integers(0, 63), max_size=8))
def test_every_change_of_a_monotone_step_function_is_found(boundaries: list[int], skipped: frozenset[int],
                                                            free: frozenset[int]) -> None:
    calls, observe = step(sorted(boundaries), skipped)
    search = find_changes(RELEASES, observe, free=lambda r: RELEASES.index(r) in free)  # type: ignore[arg-type]
    usable = [i for i in range(64) if i not in skipped]
    truth = [(a, b) for a, b in itertools.pairwise(usable)
             if sum(1 for x in boundaries if a >= x) != sum(1 for x in boundaries if b >= x)]
    assert [(RELEASES.index(c.before.release), RELEASES.index(c.after.release)) for c in search.changes] == truth
    assert len(calls) == len(set(calls))  # each release evaluated at most once
    spans = [r for span, _ in search.segments() for r in span]
    seen_skipped = {o.release for o in search.skipped}
    assert spans == [r for r in RELEASES if r not in seen_skipped]  # every other release is in exactly one segment


def test_builds_stay_within_log2_n_plus_one_when_the_newest_is_built() -> None:
    worst = 0
    for boundary in range(1, 64):
        calls, observe = step([boundary])
        find_changes(RELEASES, observe, free=lambda r: r == RELEASES[-1])  # type: ignore[arg-type]
        worst = max(worst, len([c for c in calls if c != 63]))
    assert worst <= math.ceil(math.log2(len(RELEASES))) + 1


def test_a_failure_only_in_middle_releases_is_found_once_the_middle_is_known() -> None:
    """A→B→A: the ends agree, so bisection alone sees no change; known middle observations split it (--scan)."""
    calls, _observe = step([20, 40])
    middle = {i: 1 if 20 <= i < 40 else 0 for i in range(64)}

    def non_monotone(release: str) -> Observation:
        calls.append(RELEASES.index(release))
        return Observation(release, middle[RELEASES.index(release)])

    assert find_changes(RELEASES, non_monotone).changes == []  # two probes, no change seen
    known = [non_monotone(RELEASES[i]) for i in (0, 16, 32, 48, 63)]  # say, the installed releases
    search = find_changes(RELEASES, non_monotone, known=known)
    assert [(c.before.release, c.after.release) for c in search.changes] == [
        (RELEASES[19], RELEASES[20]), (RELEASES[39], RELEASES[40])]


def test_releases_left_shrink_to_zero_at_the_change() -> None:
    _calls, observe = step([37])
    reported: list[tuple[str, int]] = []
    find_changes(RELEASES, observe, on_probe=lambda o, left: reported.append((o.release, left)))  # type: ignore[arg-type]
    lefts = [left for _, left in reported]
    assert reported[0] == (RELEASES[0], 63)  # one end known: every other release is still in question
    assert reported[1] == (RELEASES[63], 62)  # both ends known, and they differ: all between
    assert lefts == sorted(lefts, reverse=True) and lefts[-1] == 0
    assert all(b <= a // 2 + 1 for a, b in itertools.pairwise(lefts[1:]))  # halves each step


def test_an_installed_neighbour_of_the_middle_is_probed_instead_of_building_the_middle() -> None:
    """0.5.15 … 0.5.20 with 0.5.16 installed: 0.5.17 (the middle) would need a build; 0.5.16 is one step away."""
    releases = [f"0.5.{n}" for n in range(15, 21)]
    probed: list[str] = []

    def observe(release: str) -> Observation:
        probed.append(release)
        return Observation(release, release >= "0.5.18")

    find_changes(releases, observe, free=lambda r: r in {"0.5.15", "0.5.16", "0.5.20"})
    assert probed[:3] == ["0.5.15", "0.5.20", "0.5.16"]

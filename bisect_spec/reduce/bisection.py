"""Finding where a step function over ordered releases changes, with as few probes as possible.

Pure, like picire's DD: the caller passes ``observe(release) -> Observation`` and this module
never builds environments or starts processes. An observation carries a *key* (what must
stay equal for two releases to count as "the same": a verdict, or a verdict plus a location)
or is a *skip* (the release could not be evaluated, like ``git bisect skip``).

Assumption, the same one ``git bisect`` makes: inside an interval whose two ends look the
same, nothing changed (no A→B→A between two probes). Under it, :func:`find_changes` finds
every change between the two ends. Where the history may not be monotone (a failure only in
middle releases), the caller probes more releases first and passes them as ``known``: every
pair of neighbouring known observations is an interval of its own, so a change between two
of them is found even when the two ends agree (``bisect --scan``).

Each probe of a release that is not yet built costs an environment build (minutes), while a
built one costs seconds, so an already built (``free``) release within a third of the
interval's width of the middle (and always a neighbour of the middle) is probed instead of
the middle: at worst the interval shrinks to 5/6 instead of 1/2, under one probe more.

``on_probe(observation, left)`` reports each probe and how many releases are still left to
test: the unprobed releases inside intervals whose ends differ (before both ends are known,
every unprobed release of the range), like ``git bisect``'s "N revisions left to test".

With a single change in ``N`` releases and both ends probed, a search costs
``2 + ceil(log2(N - 1))`` probes at most; with the newest release already built (the usual
case) that is ``ceil(log2 N) + 1`` builds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Observation:
    """What one release said. ``key`` is None for a skipped release (``reason`` says why)."""

    release: str
    key: Hashable | None
    detail: dict[str, Any] = field(default_factory=dict, compare=False)
    reason: str = ""

    @property
    def skipped(self) -> bool:
        return self.key is None


@dataclass(frozen=True)
class Change:
    """Two neighbouring probed releases (no release between them left unprobed) that differ."""

    before: Observation
    after: Observation


@dataclass
class Search:
    """The probes made, in order, and the changes found (oldest first)."""

    releases: list[str]
    probes: list[Observation]
    changes: list[Change]

    @property
    def observed(self) -> list[Observation]:
        """Non-skipped observations in release order."""
        order = {r: i for i, r in enumerate(self.releases)}
        return sorted((o for o in self.probes if not o.skipped), key=lambda o: order[o.release])

    @property
    def skipped(self) -> list[Observation]:
        return [o for o in self.probes if o.skipped]

    def segments(self) -> list[tuple[list[str], Observation]]:
        """Runs of releases assumed to share a key: (releases, first observation of the run).

        A release between two probes with the same key belongs to that run; releases between
        the two sides of a change were all probed (or skipped), so no release is unaccounted for.
        """
        observed = self.observed
        if not observed:
            return []
        index = {r: i for i, r in enumerate(self.releases)}
        skipped = {o.release for o in self.skipped}
        out: list[tuple[list[str], Observation]] = []
        start = observed[0]
        for left, right in zip(observed, [*observed[1:], None], strict=True):
            if right is None or right.key != start.key:
                span = [r for r in self.releases[index[start.release]: index[left.release] + 1] if r not in skipped]
                out.append((span, start))
                if right is not None:
                    start = right
        return out


def find_changes(releases: Sequence[str], observe: Callable[[str], Observation], *,
                 free: Callable[[str], bool] = lambda release: False, lo: int = 0, hi: int | None = None,
                 known: Sequence[Observation] = (),
                 on_probe: Callable[[Observation, int], None] | None = None) -> Search:
    """Every change of ``observe``'s key over ``releases[lo..hi]`` (both ends included).

    :param releases: oldest first.
    :param observe: evaluates one release; called at most once per release.
    :param free: True for a release whose probe costs no build (preferred near the middle).
    :param known: observations already made (reused, never repeated); neighbouring known
        observations inside the range bound intervals of their own.
    :param on_probe: called after each new probe with the observation and the releases left to test.
    """
    hi = len(releases) - 1 if hi is None else hi
    cache: dict[str, Observation] = {o.release: o for o in known}
    probes: list[Observation] = list(known)

    def probe(i: int) -> Observation:
        release = releases[i]
        if release not in cache:
            cache[release] = observe(release)
            probes.append(cache[release])
            if on_probe is not None:
                on_probe(cache[release], left_to_test(releases, cache, lo, hi))
        return cache[release]

    def first_usable(indices: range) -> int | None:
        for i in indices:
            if not probe(i).skipped:
                return i
        return None

    left = first_usable(range(lo, hi + 1))
    if left is None:
        return Search(list(releases), probes, [])
    right = first_usable(range(hi, left, -1)) or left
    changes: list[Change] = []
    inside = [k for k in range(left, right + 1) if releases[k] in cache and not cache[releases[k]].skipped]
    stack = list(itertools.pairwise(inside))[::-1] or [(left, right)]
    while stack:
        i, j = stack.pop()
        a, b = probe(i), probe(j)
        if a.key == b.key or i == j:
            continue
        candidates = [k for k in range(i + 1, j) if releases[k] not in cache or not cache[releases[k]].skipped]
        untried = [k for k in candidates if releases[k] not in cache]
        if not untried:
            changes.append(Change(a, b))
            continue
        m = _pick(untried, i, j, releases, free)
        observation = probe(m)
        if observation.skipped:
            stack.append((i, j))  # try another release of the same interval
            continue
        stack.append((m, j))
        stack.append((i, m))
    changes.sort(key=lambda c: releases.index(c.before.release))
    return Search(list(releases), probes, changes)


def left_to_test(releases: Sequence[str], cache: dict[str, Observation], lo: int, hi: int) -> int:
    """Unprobed releases of ``releases[lo..hi]`` that may still hold a change.

    Those between two neighbouring observations that differ; every unprobed one until both
    ends of the range are observed.
    """
    seen = [k for k in range(lo, hi + 1) if releases[k] in cache and not cache[releases[k]].skipped]
    unprobed = [k for k in range(lo, hi + 1) if releases[k] not in cache]
    if len(seen) < 2 or any(k < seen[0] or k > seen[-1] for k in unprobed):
        return len(unprobed)
    return sum(1 for a, b in itertools.pairwise(seen) if cache[releases[a]].key != cache[releases[b]].key
               for k in unprobed if a < k < b)


def _pick(untried: list[int], i: int, j: int, releases: Sequence[str], free: Callable[[str], bool]) -> int:
    """The release to probe in (i, j): the middle one, or a free one almost as central.

    A free release within a third of the interval's width of the middle (a neighbour of the
    middle at least) costs under one extra probe at worst and saves a whole environment build.
    """
    middle = (i + j) / 2
    best = min(untried, key=lambda k: (abs(k - middle), k))
    slack = max(1.0, (j - i) / 3)
    cheap = [k for k in untried if free(releases[k]) and abs(k - middle) <= slack]
    if cheap and not free(releases[best]):
        return min(cheap, key=lambda k: (abs(k - middle), k))
    return best

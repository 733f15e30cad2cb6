"""Finding the first commit whose verdict differs from the old end's: binary search with skips.

Pure, like :mod:`bisect_spec.reduce.bisection` (and picire's ``DD(test)``): the caller passes
``observe(commit) -> (key, reason)`` and this module never touches git, files or processes.
A key of ``None`` is a **skip**: the commit could not be evaluated (it does not import, or
needs a dependency the environment lacks), like ``git bisect skip``; ``reason`` says why.

States, as ``git bisect`` has them: a commit is *old* when its key equals the old end's,
*skip* when it has no key, and *new* otherwise (usually the new end's key; a third key is
new too, and :attr:`Probe.other` marks it so a report can say the verdict changed twice).

Invariants of :func:`first_change`, over ``commits`` (oldest first; the old end lies before
``commits[0]``, the new end is ``commits[-1]``):

* ``observe`` is called at most once per commit, never for the new end (its key is given);
* the first new commit always lies in ``(last_old, first_new]``: ``last_old`` is the newest
  commit known old (-1 = the old end), ``first_new`` the oldest known new after it;
* without skips it costs at most ``ceil(log2 N)`` probes for ``N`` commits (each probe halves
  the commits that may be first), so with both ends ``ceil(log2 N) + 2`` evaluations;
* with skips it ends, as git does, when every commit in ``(last_old, first_new)`` is skipped,
  and reports them all as candidates ("the first new commit could be any of"), with one
  assumption git cannot make: commits between two probes skipped **for the same reason**
  are taken as skipped too, without a probe (a run of broken commits is broken the same
  way), and are reported as *untested* among the candidates. Skipped probes cut the range
  into gaps; the next probe is the middle of the widest gap still open (next to an end, or
  between skips with different reasons), so a run of broken commits costs about ``log2`` of
  the commits on each side of it, not its length;
* ``max_probes`` stops the search early with the range found so far (``stopped``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal

State = Literal["old", "new", "skip"]


@dataclass(frozen=True)
class Probe:
    """One evaluated commit."""

    index: int
    commit: str
    key: Hashable | None
    state: State
    reason: str = ""
    #: new, but with a key other than the new end's (the verdict changed more than once)
    other: bool = False


@dataclass
class CommitSearch:
    """Where the search ended: the first new commit is one of :attr:`candidates`."""

    commits: list[str]
    probes: list[Probe]
    last_old: int
    first_new: int
    stopped: bool = False
    untested: list[int] = field(default_factory=list)

    @property
    def candidates(self) -> list[str]:
        """Commits that may be the first new one, oldest first (one when the answer is exact)."""
        return self.commits[self.last_old + 1: self.first_new + 1]

    @property
    def exact(self) -> bool:
        return self.first_new == self.last_old + 1

    @property
    def skipped(self) -> list[Probe]:
        """Skipped probes, in commit order."""
        return sorted((p for p in self.probes if p.state == "skip"), key=lambda p: p.index)


def classify(key: Hashable | None, old_key: Hashable, new_key: Hashable) -> tuple[State, bool]:
    """The state of a key (and whether it is a third key, neither end's)."""
    if key is None:
        return "skip", False
    if key == old_key:
        return "old", False
    return "new", key != new_key


def first_change(commits: Sequence[str], observe: Callable[[str], tuple[Hashable | None, str]], *,
                 old_key: Hashable, new_key: Hashable, max_probes: int | None = None) -> CommitSearch:
    """The first commit of ``commits`` whose key differs from ``old_key`` (see the module's invariants).

    :param commits: candidates, oldest first; the last one is the new end (key ``new_key``).
    :param observe: ``commit -> (key, reason)``; a ``None`` key is a skip.
    :param old_key: the old end's key. :param new_key: the new end's key (must differ).
    :param max_probes: stop after this many probes with the range found so far.
    """
    assert commits, "at least the new end"
    assert old_key != new_key and old_key is not None and new_key is not None
    probes: list[Probe] = []
    last_old, first_new = -1, len(commits) - 1
    tested: dict[int, Probe] = {}
    while True:
        # every probe strictly inside (last_old, first_new) is a skip: they cut the range into gaps
        points = [last_old, *(k for k in sorted(tested) if last_old < k < first_new), first_new]
        gaps = [(a, b) for a, b in itertools.pairwise(points) if b - a > 1]
        # a gap between two commits skipped for the same reason is taken as one run of broken commits
        open_gaps = [(a, b) for a, b in gaps if a == last_old or b == first_new or tested[a].reason != tested[b].reason]
        untested = [k for a, b in gaps for k in range(a + 1, b)]
        if not open_gaps or (max_probes is not None and len(probes) >= max_probes):
            return CommitSearch(list(commits), probes, last_old, first_new, stopped=bool(open_gaps), untested=untested)
        a, b = max(open_gaps, key=lambda gap: (gap[1] - gap[0], gap[0] == last_old or gap[1] == first_new, -gap[0]))
        index = a + (b - a) // 2
        key, reason = observe(commits[index])
        state, other = classify(key, old_key, new_key)
        probe = Probe(index, commits[index], key, state, reason, other)
        probes.append(probe)
        tested[index] = probe
        if state == "old":
            last_old = index
        elif state == "new":
            first_new = index

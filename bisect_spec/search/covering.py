"""Covering arrays: every t-tuple of flag values appears in some configuration.

A small deterministic IPOG (in-parameter-order greedy) generator with mixed strength
(t=2 over all flags plus t=3 over the core speculative flags). Measured against the
libraries on our spaces before writing it (sizes / missing tuples / seconds):

=============  ===========  ===========  ============  ===============================
library        8 flags t=3  25 flags t=2 25 flags t=3  mixed (t=2 all + t=3 on 6)
=============  ===========  ===========  ============  ===============================
this module    754 / 0      88 / 0       830 / 0       756 / 0 (0.4 s)
covertable     823 / 0      99 / 0       942 / 0       809 / 0 (7.7 s; ~150 s at t=3)
pypict         803 / 0      92 / 0       906 / 0       4704 / 0 (sub-models: ~6x rows)
allpairspy     247 / 3754   100 / 0      289 / 21283   not supported
=============  ===========  ===========  ============  ===============================

pypict has no wheel for Python >= 3.11; allpairspy misses a third of the triples at t=3.
Pure: no I/O, no processes. :func:`missing_tuples` is the exhaustive checker tests use.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from itertools import combinations, product


def _interactions(n: int, strength: int,
                  subsets: Iterable[tuple[Sequence[int], int]]) -> set[tuple[int, ...]]:
    """All parameter sets that must be covered, minus those implied by a larger one."""
    req: set[tuple[int, ...]] = set(combinations(range(n), min(strength, n)))
    for params, t in subsets:
        ps = sorted(set(params))
        if any(not 0 <= p < n for p in ps):
            raise ValueError(f"subset parameter out of range: {params}")
        req.update(combinations(ps, min(t, len(ps))))
    big = [s for s in req if len(s) > 1]
    implied = {c for s in big for k in range(1, len(s)) for c in combinations(s, k)}
    return {s for s in req if s and s not in implied}


def covering_array(domains: list[int], strength: int, *,
                   subsets: Sequence[tuple[Sequence[int], int]] = (),
                   seed: int = 0) -> list[tuple[int, ...]]:
    """Generate a covering array with the IPOG strategy (greedy, in-parameter-order).

    Args:
        domains: number of values of each parameter; values are ``0..domains[i]-1``.
        strength: interaction strength ``t`` required over *all* parameters
            (clipped to ``len(domains)``; 0 means no global requirement).
        subsets: extra (mixed-strength) requirements, each ``(param_indices, t)``,
            e.g. ``[([0, 1, 2, 3, 4, 5], 3)]`` adds 3-way coverage over params 0..5.
        seed: seed for tie-breaking and for filling don't-care cells.  The same
            input and seed always give the same rows.

    Returns:
        Rows as tuples of value indices, one entry per parameter.  Every
        required t-tuple of (parameter, value) pairs appears in at least one row.
    """
    n = len(domains)
    if n == 0:
        return []
    if any(d < 1 for d in domains):
        raise ValueError("every domain needs at least one value")
    rng = random.Random(seed)
    # Process parameters largest-domain first (smaller arrays); map back at the end.
    order = sorted(range(n), key=lambda p: (-domains[p], p))
    pos = {p: i for i, p in enumerate(order)}
    dom = [domains[p] for p in order]
    req = {tuple(sorted(pos[p] for p in s))
           for s in _interactions(n, strength if strength > 0 else 0, subsets)}
    by_last: dict[int, list[tuple[int, ...]]] = {}
    for s in sorted(req):
        by_last.setdefault(s[-1], []).append(s[:-1])

    rows: list[list[int | None]] = []
    for k in range(n):
        prefixes = by_last.get(k, [])
        # uncovered[prefix] = set of (values of prefix params..., value of k)
        uncovered = {pre: set(product(*(range(dom[p]) for p in (*pre, k))))
                     for pre in prefixes}
        # Horizontal growth: give each existing row the value of k covering most.
        for row in rows:
            keys = [(pre, tuple(row[p] for p in pre)) for pre in prefixes]
            keys = [(pre, key) for pre, key in keys if None not in key]
            best, best_gain = [], -1
            for v in range(dom[k]):
                gain = sum(((*key, v)) in uncovered[pre] for pre, key in keys)
                if gain > best_gain:
                    best, best_gain = [v], gain
                elif gain == best_gain:
                    best.append(v)
            if best_gain == 0:
                continue  # leave as don't-care; vertical growth may use it
            v = best[0] if len(best) == 1 else rng.choice(best)
            row[k] = v
            for pre, key in keys:
                uncovered[pre].discard((*key, v))
        # Vertical growth: place each still-missing tuple in a compatible row or a new one.
        for pre in prefixes:
            cols = (*pre, k)
            for vals in sorted(uncovered[pre]):
                if vals not in uncovered[pre]:
                    continue  # covered meanwhile by a row filled for another prefix
                for row in rows:
                    if all(row[c] is None or row[c] == v for c, v in zip(cols, vals, strict=True)):
                        break
                else:
                    row = [None] * n
                    rows.append(row)
                for c, v in zip(cols, vals, strict=True):
                    row[c] = v
                for pre2 in prefixes:  # this row may now cover tuples of other prefixes
                    key = tuple(row[c] for c in (*pre2, k))
                    if None not in key:
                        uncovered[pre2].discard(key)
    if not rows:  # no requirement at all (e.g. strength 0): one arbitrary row
        rows.append([None] * n)
    out = []
    for row in rows:
        filled = [rng.randrange(dom[i]) if x is None else x for i, x in enumerate(row)]
        out.append(tuple(filled[pos[p]] for p in range(n)))
    return out


def missing_tuples(rows: Sequence[Sequence[int]], domains: Sequence[int], strength: int, *,
                   subsets: Sequence[tuple[Sequence[int], int]] = ()) -> int:
    """Count the required (parameter, value) t-tuples that no row covers (0 = a covering array)."""
    missing = 0
    for params in _interactions(len(domains), strength, subsets):
        seen = {tuple(row[p] for p in params) for row in rows}
        missing += sum(1 for values in product(*(range(domains[p]) for p in params)) if values not in seen)
    return missing

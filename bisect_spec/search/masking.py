"""Masking-aware covering: rounds of rows until every required tuple is seen unmasked.

A covering array puts every required t-tuple of flag values into some row. When that row
fails on another check first, the tuple was never tested: it is *masked*. Following
feedback-driven adaptive combinatorial testing (Yilmaz, Dumlu, Cohen, Porter, IEEE TSE 2014)
and constraints as PICT and ACTS handle them:

* every failure is shrunk as soon as it is found; its 1-minimal reproducer becomes a
  *forbidden combination* for the rows generated next;
* a required tuple is covered when it was seen in a row that passed, or in a row that failed
  with a signature whose minimal reproducer lies inside the tuple, or when the tuple itself
  contains a forbidden combination (it is proven to fail);
* rounds of new rows (greedy, one row at a time, each packing as many uncovered tuples as
  fit without forming a forbidden combination) go on until no tuple is left, a round covers
  nothing new, or the round or evaluation budget is spent.

**What a failure needs to be absent.** A reproducer shrunk by removing flags is 1-minimal, but
some failures also need a flag *not* given: ``--speculative-algorithm DFLASH`` alone fails with
"requires setting --speculative-draft-model-path"; FROZEN_KV_MTP alone multiplies two unset
fields. Taken as "DFLASH fails", that reproducer proved every tuple holding DFLASH and forbade
DFLASH in every later row, so no DFLASH check after the draft check was ever reached (measured
with ``scripts/bench_recall.py``: ``_handle_dflash``'s window check, DSPARK's block-size check).
So after a reproducer is learnt, the flags its failure names that it does not set (the caller's
``candidates``: the failing statement's and guard's fields) are given, all at once, with their
simplest value; when the failure then goes away, each one left out in turn tells which absence
it needs (:func:`needed_absent`, 1 + k evaluations). Such a flag joins the forbidden combination
as the item "not given" (value index 0), so the combination proves only tuples in which the flag
is not given, and a new row that holds the rest of it gets the flag filled in (a *repair*, as a
group fills ``--enable-lora``'s companions) instead of losing the algorithm.

**The row's own values.** Shrinking simplifies values as well as flags, so the reproducer of
``dwdp_size ({_.dwdp_size}) must equal tp_size`` is ``--dwdp-size 2``, whatever value the row held;
a row holding ``--dwdp-size 8`` fails the same way, is not explained by it, and shrinks to
``--dwdp-size 2`` again, which adds nothing: the rounds went on generating ``--dwdp-size 8``
rows (510 of 1,181 round rows on 0.5.23's default space failed so). So before shrinking, each
unexplained failing row is *projected* onto the flags of its signature's known reproducers, with
the row's own values (:meth:`Rounds.projections`), before the round's shrinks and again after
them; a projection that fails the same way while
each of its flags removed does not is learnt as one more reproducer: 1 + k evaluations, in one
batch, instead of a shrink, and the value is forbidden from then on.

Invariants: rows never contain a known forbidden combination; the result is deterministic
for deterministic predicates. Algorithms take predicates: ``evaluate`` (rows to outcome
keys) and ``shrink`` (a failing configuration to its minimal reproducer); no processes, no
files. Hand-written because the covering libraries measured in ``covering.py`` take
constraints only up front, not learnt between rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.search.covering import _interactions
from bisect_spec.search.space import FlagSpace

Item = tuple[int, int]  # (parameter index, value index)
Tuple = tuple[Item, ...]
#: Outcome key of a row: ``None`` passed, else the failure's signature id (``"crashed:…"`` for crashes).
Key = str | None


@dataclass
class MaskingResult:
    """What the rounds covered, and how."""

    required: int
    unmasked: int  # seen in a passing row
    proven: int  # contain a forbidden combination, or seen failing with their own minimal reproducer
    masked: int  # neither: every row that held them failed on something else
    rounds: list[dict[str, Any]] = field(default_factory=list)
    forbidden: dict[str, list[list[str]]] = field(default_factory=dict)  # signature -> minimal reproducers
    #: signature -> for each reproducer in ``forbidden``, the flags its failure needs not given, with the
    #: value that makes it go away (argv; [] for none); signatures with none at all are left out
    needs_absent: dict[str, list[list[str]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"required_tuples": self.required, "covered_without_mask": self.unmasked,
                "proven_to_fail": self.proven, "still_masked": self.masked, "rounds": self.rounds,
                "forbidden": self.forbidden, "needs_absent": self.needs_absent}


def required_tuples(space: FlagSpace, strength: int, core_strength: int) -> set[Tuple]:
    """Every (parameter, value) tuple the plan must cover: ``strength``-way over all flags,
    ``core_strength``-way over the core ones."""
    domains = space.domains()
    core = [i for i, flag in enumerate(space.flags) if flag in space.core]
    subsets = [(core, core_strength)] if len(core) >= 2 else []
    found: set[Tuple] = set()
    for params in _interactions(len(domains), strength, subsets):
        for values in product(*(range(domains[p]) for p in params)):
            found.add(tuple(zip(params, values, strict=True)))
    return found


def _items(space: FlagSpace, config: Config) -> frozenset[Item] | None:
    """A configuration as (parameter, value) items of ``space``; None if it has a flag or value outside it."""
    out = set()
    given = config.as_dict()
    filled = {item for flag, companions in space.groups.items() if flag in given for item in companions.items}
    for flag, value in config.items:
        if flag in space.fixed.as_dict() or (flag, value) in filled:
            continue
        spec = space.spec(flag)
        if spec is None or value not in spec.values:
            return None
        out.add((space.flags.index(flag), spec.values.index(value)))
    return frozenset(out)


def _row_items(row: Sequence[int]) -> frozenset[Item]:
    """Every (parameter, value) item of a row, "not given" (value 0) included: a learnt combination
    may need a flag absent."""
    return frozenset(enumerate(row))


def needed_absent(minimal: Config, signature: str, candidates: Sequence[tuple[str, Any]],
                  evaluate: Callable[[list[Config]], list[Key]],
                  complete: Callable[[Config], Config] = lambda c: c) -> list[Config]:
    """The flags whose absence the failure of ``minimal`` needs, each as a one-flag configuration
    holding the value that, given, makes the failure go away (see the module's design note).

    :param candidates: (flag, value) pairs to try; those ``minimal`` sets are skipped.
    :param evaluate: outcome keys of configurations (``None`` = passed, else a signature id).
    :param complete: what a configuration needs added to be evaluated (a space's groups).
    :returns: the needed flags N: ``minimal`` plus N does not fail with ``signature``, and plus N
        less any one of them does. [] when giving every candidate still fails with ``signature`` (no
        absence needed), or when the evidence does not hold on the reproducer alone (a narrower
        combination is never claimed without it). Costs 1 evaluation, or 2 + k + |N| for k candidates.
    """
    extra = [(flag, value) for flag, value in candidates if minimal.get(flag) is None]
    if not extra:
        return []

    def given(pairs: Sequence[tuple[str, Any]]) -> Config:
        config = minimal
        for flag, value in pairs:
            config = config.with_(flag, value)
        return complete(config)

    if evaluate([given(extra)])[0] == signature:
        return []
    needed = extra
    if len(extra) > 1:  # leave each out in turn: the failure comes back when its absence is needed
        keys = evaluate([given([e for e in extra if e != left]) for left in extra])
        needed = [left for left, key in zip(extra, keys, strict=True) if key == signature]
        if not needed:
            return []
        # confirm on the reproducer alone: the needed ones given defuse it, and each is needed
        # (a candidate that only triggers an earlier check together with another is no absence)
        checks = [given(needed)] + ([given([n for n in needed if n != left]) for left in needed]
                                    if len(needed) > 1 else [])
        keys = evaluate(checks)
        if keys[0] == signature or any(key != signature for key in keys[1:]):
            return []
    return [Config.of({flag: value}) for flag, value in needed]


def _tuples_of(row: Sequence[int], required: set[Tuple], arities: set[tuple[int, ...]]) -> list[Tuple]:
    out = []
    for params in arities:
        candidate = tuple((p, row[p]) for p in params)
        if candidate in required:
            out.append(candidate)
    return out


class Rounds:
    """The state of masking-aware covering over one space (see the module's design note)."""

    def __init__(self, space: FlagSpace, strength: int, core_strength: int) -> None:
        self.space = space
        self.required = required_tuples(space, strength, core_strength)
        self.arities = {tuple(p for p, _ in t) for t in self.required}
        #: each item, and the required tuples that hold it: the tuples holding a combination are the intersection
        #: of its items' sets (a set walk per combination, not a subset test per required tuple)
        self._holding: dict[Item, set[Tuple]] = {}
        for t in self.required:
            for item in t:
                self._holding.setdefault(item, set()).add(t)
        self.unmasked: set[Tuple] = set()
        self.proven: set[Tuple] = set()
        self.minimal: dict[str, list[frozenset[Item]]] = {}  # signature -> minimal reproducers (as items)
        self.minimal_argv: dict[str, list[list[str]]] = {}
        #: signature -> for each of its reproducers (as in ``minimal_argv``), the flags its failure needs
        #: absent, with the value that defuses it (:func:`needed_absent`)
        self.missing: dict[str, list[Config]] = {}
        self.fill: dict[int, int] = {}  # parameter -> the value index a repair gives it

    def _tuples_holding(self, items: frozenset[Item]) -> set[Tuple]:
        """The required tuples holding every item of ``items`` (each required tuple holds the empty set)."""
        if not items:
            return set(self.required)
        sets = sorted((self._holding.get(item, set()) for item in items), key=len)
        return set(sets[0]).intersection(*sets[1:])

    def forbidden(self) -> list[frozenset[Item]]:
        return [m for ms in self.minimal.values() for m in ms if m]

    def learn(self, signature: str, minimal: Config, absent: Sequence[Config] = ()) -> bool:
        """Record a minimal reproducer of ``signature``; False when it adds nothing.

        :param absent: flags the failure needs not given (:func:`needed_absent`); each makes one
            forbidden combination with ``minimal``, holding that flag as "not given".
        """
        items = _items(self.space, minimal)
        argv = minimal.argv()
        if argv in self.minimal_argv.get(signature, []):
            return False
        self.minimal_argv.setdefault(signature, []).append(argv)
        companions = Config()
        for companion in absent:
            for flag, given in companion.items:
                companions = companions.with_(flag, given)
        self.missing.setdefault(signature, []).append(companions)
        if items is None:
            return True
        variants = [items]
        fills = [_items(self.space, companion) for companion in absent]
        if fills and all(fill is not None and len(fill) == 1 for fill in fills):
            variants = []
            for fill in fills:
                assert fill is not None
                (parameter, value), = fill
                self.fill.setdefault(parameter, value)
                variants.append(items | {(parameter, 0)})
        for variant in variants:
            self.minimal.setdefault(signature, []).append(variant)
            self.proven |= self._tuples_holding(variant)
        return True

    def projections(self, rows: Sequence[Sequence[int]], keys: Sequence[Key]
                    ) -> list[tuple[str, tuple[int, ...], tuple[int, ...], list[Config]]]:
        """For each failing row no known reproducer of its signature explains: the row restricted to the
        flags of each such reproducer (as a row: the row's own values there, "not given" elsewhere),
        where the row holds all the flags it gives; a flag it needs absent that the row gives joins
        with the row's value (``--enable-return-aux-hidden-states`` learnt without an algorithm, the
        row's NGRAM: the pair fails too). Distinct, in order, never a reproducer already known; each
        with the parameters whose removal must lose the failure (the reproducer's own) and the flags it
        still needs absent, as :meth:`learn` takes them (each with the value a repair gives it)."""
        out: dict[tuple[str, tuple[int, ...]], tuple[tuple[int, ...], list[Config]]] = {}
        n = len(self.space.specs)
        for row, key in zip(rows, keys, strict=True):
            if key is None or key.startswith(("crashed", "timeout")) or self.explained(row, key):
                continue
            for known in self.minimal.get(key, []):
                given = [p for p, v in known if v]
                if not given or any(not row[p] for p in given):
                    continue
                named = set(given) | {p for p, v in known if not v}
                projected = tuple(row[p] if p in named else 0 for p in range(n))
                if frozenset((p, projected[p]) for p in named) not in self.minimal[key]:
                    absent = [Config.of({self.space.specs[p].flag: self.space.specs[p].values[self.fill[p]]})
                              for p in sorted(named) if not projected[p]]
                    # a reproducer that needs several flags absent is known as one variant per flag: the
                    # projection needs them all, as its reproducer did (one alone, given, defuses nothing)
                    _, known_absent = out.setdefault((key, projected), (tuple(given), []))
                    known_absent.extend(a for a in absent if a not in known_absent)
        return [(key, projected, given, absent) for (key, projected), (given, absent) in out.items()]

    def explained(self, row: Sequence[int], key: Key) -> bool:
        """Whether a failing row holds a known minimal reproducer of its own signature."""
        held = _row_items(row)
        return key is not None and any(m <= held for m in self.minimal.get(key, []))

    def observe(self, row: Sequence[int], key: Key) -> int:
        """Account for one evaluated row; the number of tuples it newly covered."""
        before = len(self.unmasked) + len(self.proven)
        if key is None:
            self.unmasked.update(_tuples_of(row, self.required, self.arities))
        else:  # the row's tuples holding a reproducer it holds: from the tuples holding the reproducer (most rows
            # fail explained by none, and need no walk over every arity)
            held = _row_items(row)
            for m in self.minimal.get(key, []):
                if m <= held:
                    self.proven.update(t for t in self._tuples_holding(m) if all(row[p] == v for p, v in t))
        return len(self.unmasked) + len(self.proven) - before

    def uncovered(self) -> list[Tuple]:
        return sorted(self.required - self.unmasked - self.proven)

    def next_rows(self, limit: int) -> list[tuple[int, ...]]:
        """Rows packing the uncovered tuples, none holding a forbidden combination (greedy)."""
        forbidden = self.forbidden()
        holding_forbidden = set().union(*(self._tuples_holding(m) for m in forbidden)) if forbidden else set()
        remaining = sorted(self.required - self.unmasked - self.proven - holding_forbidden)
        by_item: dict[Item, list[frozenset[Item]]] = {}  # each item, and the forbidden combinations holding it
        for m in forbidden:
            for item in m:
                by_item.setdefault(item, []).append(m)
        n = len(self.space.specs)
        rows: list[tuple[int, ...]] = []
        while remaining and len(rows) < limit:
            values: list[int | None] = [None] * n  # the row so far, by parameter (None: not set yet)
            held: set[Item] = set()  # the items set so far, "not given" ones included
            left = []
            for t in remaining:  # a plain loop: the main job walks tens of thousands of tuples per row
                fits = True
                for p, v in t:
                    now = values[p]
                    if now is not None and now != v:
                        fits = False
                        break
                if fits:
                    # ``held`` holds no forbidden combination: one in ``held`` and ``t`` holds an item of ``t``
                    blockers = [m for item in t for m in by_item.get(item, ())] if by_item else None
                    if blockers:
                        trial = held | set(t)
                        fits = not any(m <= trial for m in blockers)
                    if fits:
                        held.update(t)
                        for p, v in t:
                            values[p] = v
                        continue
                left.append(t)
            if len(left) == len(remaining):
                break  # nothing fits: cannot happen for a tuple free of forbidden combinations
            remaining = left
            rows.append(self._repaired({p: v for p, v in enumerate(values) if v is not None}, forbidden, n))
        return rows

    def _repaired(self, row: dict[int, int], forbidden: list[frozenset[Item]], n: int) -> tuple[int, ...]:
        """The row, with each flag a learnt combination needs absent filled in where the row holds the
        rest of that combination and leaves the flag unset (the flag's companion value)."""
        for m in forbidden:
            absent = [p for p, v in m if not v]
            if not absent or any(row.get(p, 0) != v for p, v in m if v):
                continue
            if any(row.get(p, 0) for p in absent):
                continue  # already defused
            for p in absent:
                if p in row or p not in self.fill:
                    continue  # a tuple asked for "not given" here: keep it
                trial = {**row, p: self.fill[p]}
                items = frozenset((q, trial.get(q, 0)) for q in range(n))
                if not any((p, self.fill[p]) in f and f <= items for f in forbidden):
                    row[p] = self.fill[p]
                    break
        return tuple(row.get(p, 0) for p in range(n))

    def result(self, rounds: list[dict[str, Any]]) -> MaskingResult:
        unmasked = len(self.unmasked)
        proven = len(self.proven - self.unmasked)
        return MaskingResult(len(self.required), unmasked, proven, len(self.required) - unmasked - proven, rounds,
                             {k: v for k, v in sorted(self.minimal_argv.items())},
                             {k: [c.argv() for c in v] for k, v in sorted(self.missing.items()) if any(v)})


def _learn_projections(state: Rounds, space: FlagSpace, rows: Sequence[tuple[int, ...]], keys: Sequence[Key],
                       evaluate: Callable[[list[Config]], list[Key]]) -> int:
    """Learn the projections (:meth:`Rounds.projections`) that fail with their row's signature and lose it
    with any one flag removed; the number learnt. One batch of evaluations."""
    candidates = state.projections(rows, keys)
    if not candidates:
        return 0

    def defused(config: Config, absent: list[Config]) -> Config:  # the projection with its absences given
        for companion in absent:
            for flag, value in companion.items:
                config = config.with_(flag, value)
        return space.complete(config.as_dict())

    trials = [(key, config,
               [space.config_of(tuple(0 if q == p else v for q, v in enumerate(projected))) for p in given], absent,
               defused(config, absent) if absent else None)
              for key, projected, given, absent in candidates for config in [space.config_of(projected)]]
    batch = list(dict.fromkeys(c for _, config, removals, _, given_all in trials
                               for c in (config, *removals, *([given_all] if given_all is not None else []))))
    outcome = dict(zip(batch, evaluate(batch), strict=True))
    learnt = 0
    for key, config, removals, absent, given_all in trials:
        if outcome[config] != key or any(outcome[r] == key for r in removals):
            continue
        # the absences its reproducer needed hold for the row's values only where, given, they defuse it too
        # (``--f0 1`` needed ``--f2`` absent to keep an earlier check quiet; ``--f0 2`` never wakes that check)
        needed = absent if given_all is not None and outcome[given_all] != key else []
        if state.learn(key, config, needed):
            learnt += 1
    return learnt


def cover_unmasked(space: FlagSpace, first: Sequence[tuple[int, ...]], *,
                   evaluate: Callable[[list[Config]], list[Key]], shrink: Callable[[Config, str], Config | None],
                   strength: int = 2, core_strength: int = 3, max_rounds: int = 4, row_limit: int = 500,
                   candidates: Callable[[Config, str], Sequence[str]] | None = None,
                   evaluate_absent: Callable[[list[Config]], list[Key]] | None = None,
                   evaluate_projection: Callable[[list[Config]], list[Key]] | None = None,
                   shrink_many: Callable[[list[tuple[Config, str]]], list[Config | None]] | None = None,
                   ) -> MaskingResult:
    """Evaluate ``first`` (a covering array's rows), then rounds of rows for the tuples still masked.

    :param evaluate: outcome keys of configurations (``None`` = passed, else a signature id).
    :param shrink: the 1-minimal reproducer of a failing configuration with that signature, or None.
    :param max_rounds: rounds after the first; :param row_limit: rows per round at most.
    :param candidates: the flags a failure names (its statement's and guard's fields), given its
        first failing configuration and signature; those of them in the space that a reproducer leaves
        unset are tried given (:func:`needed_absent`). None: no absence is ever learnt.
    :param evaluate_absent: evaluates those trials (default ``evaluate``); a caller that journals
        evaluations passes its own, so round rows and absence trials are told apart.
    :param evaluate_projection: evaluates the projections of unexplained rows onto known reproducers
        (:meth:`Rounds.projections`; default ``evaluate``), for the same reason.
    :param shrink_many: ``shrink`` of each ``(configuration, signature)`` pair, results in their order (a caller
        with several workers shrinks a round's signatures side by side); default: ``shrink`` of each in turn.
        Each shrink depends on its own pair only, so what is learnt is the same either way.
    """
    state = Rounds(space, strength, core_strength)
    rounds: list[dict[str, Any]] = []
    rows = list(first)
    for number in range(max_rounds + 1):
        if not rows:
            break
        keys = evaluate([space.config_of(r) for r in rows])
        learnt = _learn_projections(state, space, rows, keys, evaluate_projection or evaluate)
        # shrink each signature's smallest failing row that no known reproducer explains
        unexplained: dict[str, tuple[int, ...]] = {}
        for row, key in zip(rows, keys, strict=True):
            if key is not None and not key.startswith(("crashed", "timeout")) and not state.explained(row, key):
                best = unexplained.get(key)
                if best is None or sum(1 for v in row if v) < sum(1 for v in best if v):
                    unexplained[key] = row
        todo = [(key, space.config_of(row)) for key, row in sorted(unexplained.items())]
        minimals = (shrink_many or (lambda pairs: [shrink(c, k) for c, k in pairs]))([(c, k) for k, c in todo])
        for (key, config), minimal in zip(todo, minimals, strict=True):
            if minimal is None or minimal.argv() in state.minimal_argv.get(key, []):
                continue
            absent: list[Config] = []
            if candidates is not None:
                tries = [(flag, spec.values[1]) for flag in candidates(config, key)
                         if (spec := space.spec(flag)) is not None and len(spec.values) > 1]
                absent = needed_absent(minimal, key, tries, evaluate_absent or evaluate, lambda c: space.complete(c.as_dict()))
            if state.learn(key, minimal, absent):
                learnt += 1
        # and onto the reproducers this round's shrinks learnt (--dwdp-size 2 learnt: the --dwdp-size 8 rows)
        learnt += _learn_projections(state, space, rows, keys, evaluate_projection or evaluate)
        covered = sum(state.observe(row, key) for row, key in zip(rows, keys, strict=True))
        rounds.append({"round": number, "rows": len(rows), "failed": sum(k is not None for k in keys),
                       "newly_covered": covered, "reproducers_learnt": learnt, "uncovered": len(state.uncovered())})
        if number == max_rounds or not state.uncovered() or (number > 0 and covered == 0 and learnt == 0):
            break
        rows = state.next_rows(row_limit)
    return state.result(rounds)


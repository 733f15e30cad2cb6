"""Peeling: a failing row without its failure's minimal reproducer, evaluated again.

A row that fails on one check never reaches the checks after it: everything else in the row
is masked. Once the failure is shrunk to a 1-minimal reproducer, removing that reproducer's
flags from the row lets the rest of the row reach SGLang's later checks; removing *one* of them
is enough (the reproducer is 1-minimal), so with ``keep`` (the sweep passes its core flags) one
flag goes, a non-core one first, and the algorithm stays with the rest of its row (all flags
going took ``--speculative-algorithm DSPARK`` away with a DSPARK failure, and with it every
DSPARK check after it: measured with ``scripts/bench_recall.py``). With ``remove="non-core"``
(the default strategy's ``peel_remove``) every flag of the reproducer but the core ones goes at
once: a reproducer's flag often fails the same way with the row's other values (``--attn-cp-size 8``
after ``--attn-cp-size 2``), and removing one flag at a time left the row failing the same way,
level after level. Measured on 0.5.23's default command, against one fixed oracle: 161 of its 169
failing statements instead of 153, 56 of 57 in speculative code instead of 55. Tried and
dropped: peeling a row that holds a known reproducer again without evaluating it (12,640
evaluations instead of 19,466, but 132 statements: the rows skipped are where later checks
show, and the flags removed with them are what those checks need). Peeling does this for
every failing row of a sweep, level after level, until each row passes, fails in a *new* way
(a signature without a known reproducer: a finding, left for the sweep's shrinking), or nothing
is left to remove. Unlike the masking-aware rounds (:mod:`bisect_spec.search.masking`), which pack the
required t-tuples into new rows, peeling keeps each row's own higher-order combinations: the
failures it finds need three to five flags at once (``--enable-dp-attention --dp-size 8 --tp-size
8`` with NGRAM; a LoRA backend with DP attention), which no 2-way tuple holds.

A failure that needs a flag *absent* (``missing``: DFLASH without a draft model; learnt by
:func:`bisect_spec.search.masking.needed_absent`) is peeled by giving that flag instead: removing the
algorithm would defuse it too, but would take every later check of that algorithm with it.

**Width.** Most peeled rows fail again with a known signature, and rows peeled from the same
signature mostly meet the same checks next: on 0.5.23's 96-flag space, 2,368 failing rows made
10,600 peeled evaluations, half of the default command's. ``width`` keeps, per level and per
signature peeled, the rows that together hold the most distinct (flag, value) items
(:func:`diverse`); what is left out shares its items with a row kept.

Invariants: each configuration is evaluated at most once; a peeled row differs from the row it
came from (a flag fewer, or a missing flag given), and peeling ends after at most ``depth`` levels; the result is deterministic
for a deterministic ``evaluate``. Algorithms take predicates: ``evaluate`` (configurations to
outcome keys); no processes, no files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.model.flags import Config

#: Outcome key of a row: ``None`` passed, else a signature id (anything else: a crash, a time-out).
Key = str | None


@dataclass
class PeelResult:
    """What peeling evaluated, level by level, and which signatures it found that were not known."""

    evaluated: dict[Config, Key] = field(default_factory=dict)
    levels: list[dict[str, int]] = field(default_factory=list)
    new: dict[str, Config] = field(default_factory=dict)  # new signature -> first row that raised it

    def to_dict(self) -> dict[str, Any]:
        return {"rows": len(self.evaluated), "levels": self.levels, "new_signatures": sorted(self.new)}


def peel(rows: Sequence[tuple[Config, str]], minimal: Mapping[str, Config],
         evaluate: Callable[[list[Config]], list[Key]], *, depth: int = 8,
         keep: Sequence[str] | None = None, missing: Mapping[str, Config] | None = None,
         complete: Callable[[Config], Config] = lambda c: c, width: int | None = None, base: Config | None = None,
         remove: str = "one") -> PeelResult:
    """Peel failing rows (see the module's design note).

    :param rows: failing configurations with their signature ids.
    :param minimal: signature id -> its 1-minimal reproducer (the failures known before peeling).
    :param evaluate: outcome keys of configurations, in order.
    :param depth: levels at most.
    :param keep: None removes every flag of the reproducer; else one flag only (removing any one of a
        1-minimal reproducer's flags defuses it), the first not in ``keep``, else the last of ``keep``
        (so the algorithm, first in ``keep``, stays with the rest of its row as long as possible).
    :param missing: signature id -> flags (with values) its failure needs not given; a row lacking
        them gets them instead of losing a flag.
    :param complete: what a configuration needs added to be evaluated (a space's groups).
    :param base: the flags every row keeps where it sets none (the deployment shape): peeling never removes them.
    :param width: per level, at most this many peeled rows for each signature they were peeled from,
        the most diverse first (:func:`diverse`); None peels every row.
    :param remove: with ``keep``, ``"one"`` removes one flag of the reproducer; ``"non-core"`` every flag
        of it not in ``keep`` (one of ``keep`` when it has no other).
    """
    result = PeelResult()
    frontier = list(dict.fromkeys(rows))

    def step(config: Config, signature: str) -> Config:
        """The row without (part of) the reproducer of ``signature``, or with what it needs absent given."""
        reproducer = minimal[signature]
        give = [(f, v) for f, v in (missing or {}).get(signature, Config()).items if config.get(f) is None]
        if give:
            repaired = config
            for flag, value in give:
                repaired = repaired.with_(flag, value)
            return complete(repaired)
        present = [f for f in reproducer.flags() if config.get(f) is not None]
        if keep is not None and present:
            ranked = sorted(present, key=lambda f: (f in keep, -list(keep).index(f) if f in keep else 0, f))
            others = [f for f in ranked if f not in keep]
            present = others if remove == "non-core" and others else ranked[:1]
        # the deployment shape stays: a row without it answers for another launch
        return config.without(*present).with_defaults(base or Config())

    for level in range(depth):
        peeled: list[Config] = []
        parents: dict[Config, str] = {}
        for config, signature in frontier:
            if signature not in minimal:
                continue
            smaller = step(config, signature)
            if smaller != config and smaller not in result.evaluated:
                peeled.append(smaller)
                parents.setdefault(smaller, signature)
        peeled = list(dict.fromkeys(peeled))
        if width is not None:
            groups: dict[str, list[Config]] = {}
            for config in peeled:
                groups.setdefault(parents[config], []).append(config)
            chosen = {c for group in groups.values() for c in diverse(group, width)}
            peeled = [c for c in peeled if c in chosen]
        if not peeled:
            break
        keys = evaluate(peeled)
        frontier = []
        for config, key in zip(peeled, keys, strict=True):
            result.evaluated[config] = key
            if key is not None and key in minimal:
                frontier.append((config, key))
            elif key is not None and ":" not in key:
                result.new.setdefault(key, config)
        result.levels.append({"level": level, "rows": len(peeled), "passed": sum(k is None for k in keys),
                              "peel_again": len(frontier)})
    return result


def diverse(rows: Sequence[Config], width: int) -> list[Config]:
    """At most ``width`` of ``rows``, greedily the one holding the most (flag, value) items the rows
    chosen so far lack (ties: the earlier row), so the rows kept still reach the checks their other
    flags lead to. Deterministic; all of ``rows`` when there are at most ``width``."""
    if len(rows) <= width:
        return list(rows)
    left = list(rows)
    seen: set[tuple[str, tuple[str, ...]]] = set()
    chosen: list[Config] = []
    while left and len(chosen) < width:
        best = max(range(len(left)), key=lambda i: (len(set(left[i].items) - seen), -i))
        row = left.pop(best)
        seen |= set(row.items)
        chosen.append(row)
    return chosen

"""Branch rows: the 3-way interactions a switch and an algorithm open together.

Some of SGLang's speculative checks run only where a feature switch is on *and* the algorithm is
one value, and then test a third flag: on 0.5.23, ``handle_unified_memory_pool`` returns unless
``--enable-unified-memory`` is given, and under ``speculative_algorithm == "DFLASH"`` refuses
every attention backend outside a list (``_assert_spec_verify_backends``). That failure needs
three flags at once, two of them non-core, so 2-way covering need not hold them together, and
where a covering row does, its ~60 other flags fail first. Measured: ``scripts/bench_recall.py``'s
oracle found it once in 20,000 random configurations (peeled), and the default plan never.

The data flow (:func:`bisect_spec.inside.data_flow.branch_contexts`) names each such branch, its
switches, algorithms and the flags it reads (:class:`bisect_spec.search.space.Branch`). For each branch
and algorithm the sweep evaluates the **context** (the algorithm and the switches, no other flag
given) and, where the context passes, the context with each value of each flag the branch reads,
one at a time: sparse rows, so nothing but the branch itself can mask them. The context starts
from the simplest core-only row of that algorithm that passed (DFLASH needs its draft model). A context that fails
fails every row built on it the same way (its failure is a 2-way one the covering rows report),
so its rows are not evaluated. Up to about 140 rows per context; on 0.5.23 with kimi-k2.6 + eagle3,
4 branches and 85 evaluations, most contexts failing.

Tried and dropped: a branch's rows also reading everything else its switch guards (0.5.23's ``assert
not cfg.enable_lmcache`` after the DFLASH branch): 153 rows instead of 85, and on
``scripts/bench_recall.py``'s fixed oracle 160 statements instead of 161 and one UNO check in speculative
code lost (the extra rows changed what the masking rounds learnt); the lmcache check still failed first
on ``handle_cache_compatibility``.

Pure: rows from a space; the sweep evaluates them (phase ``branch``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bisect_spec.model.flags import Config
from bisect_spec.search.space import FlagSpace


def passing_bases(space: FlagSpace, passed: Iterable[Config]) -> dict[str, Config]:
    """Algorithm -> the one of the ``passed`` configurations (the plan's: its ``core_alone`` rows) that
    gives it with core flags only and the fewest of them (then the first by key), as those core flags:
    what a branch context starts from.

    Not :func:`~bisect_spec.search.space.simplicity_key`, the project's "simpler": measured on 0.5.23, its
    EAGLE base (``topk 1``, 3 draft tokens, 2 steps) reaches fewer unified-memory checks than this one
    (``topk 0``, 0 draft tokens, 3 steps), and ``scripts/bench_recall.py`` fell from 163 to 160 of 170
    statements (docs/benchmarks.md, Recall). A base is a starting point that passes, not a reproducer."""
    found: dict[str, Config] = {}
    flags = set(space.flags)
    for config in passed:
        swept = {flag: value for flag, value in config.items if flag in flags}
        algorithm = swept.get("--speculative-algorithm")
        if algorithm is None or any(flag not in space.core for flag in swept):
            continue
        name = " ".join(algorithm)
        candidate = Config.of(swept)
        if name not in found or (len(candidate), candidate.key()) < (len(found[name]), found[name].key()):
            found[name] = candidate
    return found


def contexts(space: FlagSpace, bases: Mapping[str, Config] | None = None) -> list[tuple[Config, list[Config]]]:
    """Each branch context (algorithm and switches, completed), with the rows that add one value of
    one flag the branch reads, in the data flow's order; a context two branches share is listed once,
    with the rows of both (distinct, never the context itself). Rows two contexts share are listed
    under each: whichever context passes evaluates them.

    :param bases: algorithm -> the core flags that make it pass alone (DFLASH needs its draft model:
        :func:`passing_bases`); an algorithm without one stands alone.
    """
    algorithm = space.spec("--speculative-algorithm")
    if algorithm is None:
        return []
    out: dict[Config, list[Config]] = {}
    for branch in space.branches:
        switch_values = []
        for flag in branch.switches:
            spec = space.spec(flag)
            given = [v for v in spec.values if v is not None] if spec is not None else []
            if not given:
                break
            switch_values.append((flag, given[0]))
        else:
            for name in branch.algorithms:
                if (name,) not in algorithm.values:
                    continue
                base = (bases or {}).get(name, Config())
                chosen = {**base.as_dict(), "--speculative-algorithm": (name,), **dict(switch_values)}
                context = space.complete(chosen)
                rows = out.setdefault(context, [])
                seen = {context, *rows}
                for flag in branch.reads:
                    spec = space.spec(flag)
                    for value in spec.values if spec is not None else ():
                        if value is None:
                            continue
                        row = space.complete({**chosen, flag: value})
                        if row not in seen:
                            seen.add(row)
                            rows.append(row)
    return list(out.items())

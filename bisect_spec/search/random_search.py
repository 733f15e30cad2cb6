"""Hypothesis strategies over a flag space, and the Hypothesis-driven search phase.

Import these in your own tests::

    from hypothesis import given
    from bisect_spec.search.random_search import configs

    @given(configs(space))
    def test_my_launcher_accepts(config): ...

:func:`search` is the sweep's phase after the covering array: Hypothesis generates
configurations from the space and is *targeted* at novelty (``hypothesis.target``),
so it steers towards configurations whose outcome no earlier one had. It takes a
predicate and starts no processes; already-known outcomes come from the caller's cache.

Hypothesis keeps files even with its example database off: it caches the constants it reads from
the code it runs under ``.hypothesis/`` in the working directory. :func:`search` points that at a
directory the caller names (a sweep: the bisect-spec home), so a sweep leaves nothing where it was
started, and puts back what was there before for whatever runs Hypothesis next in the process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

from bisect_spec.model.flags import Config
from bisect_spec.search.space import FlagSpace


def configs(space: FlagSpace, *, max_flags: int | None = None) -> st.SearchStrategy[Config]:
    """Configurations of ``space``; shrink towards fewer flags and simpler values (domain order)."""

    @st.composite
    def build(draw: st.DrawFn) -> Config:
        mapping: dict[str, tuple[str, ...] | None] = {}
        chosen = 0
        for spec in space.specs:
            if max_flags is not None and chosen >= max_flags:
                break
            # sampled_from, not integers(0, n-1): integers over-draws the bounds (index 0 is
            # "unset"), which hid 4-flag failures; sampled_from still shrinks towards unset.
            value = draw(st.sampled_from(spec.values))
            if value is not None:
                mapping[spec.flag] = value
                chosen += 1
        return space.complete(mapping)

    return build()


def search(space: FlagSpace, outcome_key: Callable[[Config], str], *, budget: int, seed: int,
           storage: Path | None = None) -> list[Config]:
    """Hypothesis-driven search: ``budget`` configurations, steered towards new outcomes.

    :param outcome_key: evaluates a configuration and returns its outcome class
        (e.g. ``"passed"`` or a signature id); called once per configuration.
    :param storage: where Hypothesis keeps its files meanwhile (None: where it would anyway,
        ``.hypothesis/`` in the working directory).
    :return: the configurations evaluated, in order.
    """
    if budget <= 0 or not space.specs:
        return []
    seen_keys: dict[str, int] = {}
    tried: list[Config] = []
    distinct: set[Config] = set()

    @settings(max_examples=budget, database=None, deadline=None, phases=[Phase.generate, Phase.target],
              suppress_health_check=list(HealthCheck), print_blob=False)
    @hypothesis_seed(seed)
    @given(configs(space))
    def explore(config: Config) -> None:
        if config not in distinct and len(distinct) >= budget:
            raise _BudgetSpent
        distinct.add(config)
        tried.append(config)
        key = outcome_key(config)
        count = seen_keys.get(key, 0)
        seen_keys[key] = count + 1
        target(1.0 / (1 + count), label="novelty")

    with contextlib.suppress(_BudgetSpent), _hypothesis_home(storage):
        explore()
    return tried


@contextlib.contextmanager
def _hypothesis_home(directory: Path | None) -> Iterator[None]:
    """Hypothesis' files under ``directory`` meanwhile (nothing changed for None), its own choice put back after."""
    if directory is None:
        yield
        return
    before = storage_directory(intent_to_write=False).home_directory  # resolves, creates nothing
    set_hypothesis_home_dir(directory)
    try:
        yield
    finally:
        set_hypothesis_home_dir(before)


class _BudgetSpent(BaseException):
    """Stops Hypothesis at once when the budget of distinct configurations is spent.

    A BaseException, so Hypothesis does not mistake it for a failing example to shrink.
    """

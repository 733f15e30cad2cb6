"""Properties of shrinking: still fails, same signature, 1-minimal, bounded evaluations."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bisect_spec.model.flags import Config
from bisect_spec.model.signature import Signature
from bisect_spec.reduce.shrink import shrink
from bisect_spec.search.space import FlagSpace, FlagSpec

N = 12
SPACE = FlagSpace(tuple(FlagSpec(f"--f{i}", (None, ("1",), ("2",), ("4",), ("16",))) for i in range(N)))
SIGS = [Signature("failed", "E", f"loc{i}", "s", "m") for i in range(3)]


def spec_of(flag: str) -> FlagSpec:
    spec = SPACE.spec(flag)
    assert spec is not None
    return spec


@st.composite
def problems(draw: st.DrawFn) -> tuple[Config, list[tuple[frozenset[str], int, int]]]:
    """A starting config and up to 3 bugs: (flags needed, min value index, signature)."""
    present = draw(st.lists(st.integers(0, N - 1), min_size=1, max_size=N, unique=True))
    config = Config.of({f"--f{i}": draw(st.sampled_from(["1", "2", "4", "16"])) for i in present})
    bugs = []
    for sig in range(draw(st.integers(1, 3))):
        needed = draw(st.lists(st.sampled_from(sorted(present)), min_size=1, max_size=3, unique=True))
        bugs.append((frozenset(f"--f{i}" for i in needed), draw(st.integers(1, 4)), sig))
    return config, bugs


def predicate(bugs: list[tuple[frozenset[str], int, int]]) -> object:
    def test(config: Config) -> Signature | None:
        values = config.as_dict()
        for needed, min_index, sig in bugs:
            if all(f in values and spec_of(f).index(values[f]) >= min_index for f in needed):
                return SIGS[sig]
        return None
    return test


FLAG_NAMES = st.sampled_from([f"--f{i}" for i in range(N)] + ["--not-a-flag"])


@settings(max_examples=200, deadline=None)
@given(problems(), st.sets(FLAG_NAMES, max_size=N), st.sets(FLAG_NAMES, max_size=N))
def test_result_fails_same_way_and_is_one_minimal(problem: tuple[Config, list[tuple[frozenset[str], int, int]]],
                                                  hints: set[str], evidence: set[str]) -> None:
    """Whatever the hints and evidence (right, partial, misleading, empty), the result fails the same way
    and is 1-minimal: hints order the work, they never decide what is accepted."""
    config, bugs = problem
    test = predicate(bugs)
    result = shrink(config, test, space=SPACE, hints=hints, evidence=evidence)  # type: ignore[arg-type]
    original = test(config)  # type: ignore[operator]
    if original is None:
        assert result.status == "passes"
        return
    assert result.status == "minimal"
    assert result.signature == original
    assert test(result.minimal) == original  # type: ignore[operator]
    for flag, value in result.minimal.items:  # 1-minimal: no flag removable, no value simplifiable
        assert test(result.minimal.without(flag)) != original  # type: ignore[operator]
        spec = SPACE.spec(flag)
        assert spec is not None
        for simpler in spec.values[1:spec.index(value)]:
            assert test(result.minimal.with_(flag, simpler)) != original  # type: ignore[operator]
    # the proof lists exactly those evaluations
    indices = [spec_of(f).index(v) for f, v in result.minimal.items]
    assert len(result.proof) == sum(indices)  # one removal + (index - 1) simpler values per flag
    # bound: ddmin + one-at-a-time + values, each pass at most quadratic in the flag count
    n = len(config)
    assert result.evaluations <= 2 + 3 * (n * n + 4 * n) + 10


@settings(max_examples=100, deadline=None)
@given(problems())
def test_the_right_hint_costs_no_more_than_no_hint_plus_one(
        problem: tuple[Config, list[tuple[frozenset[str], int, int]]]) -> None:
    """Hinting the flags of the bug that fires (the case statement hints are made for) is never
    worse than no hint, but for the one evaluation of the guess."""
    config, bugs = problem
    test = predicate(bugs)
    original = test(config)  # type: ignore[operator]
    if original is None:
        return
    needed = next(needed for needed, _, sig in bugs if SIGS[sig] == original)
    blind = shrink(config, test, space=SPACE)  # type: ignore[arg-type]
    hinted = shrink(config, test, space=SPACE, hints=needed)  # type: ignore[arg-type]
    assert hinted.signature == blind.signature == original
    assert hinted.evaluations <= blind.evaluations + 1

"""Masking-aware covering on synthetic predicates with known failures."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisect_spec.model.flags import Config
from bisect_spec.search.covering import covering_array
from bisect_spec.search.masking import Key, cover_unmasked, required_tuples
from bisect_spec.search.space import FlagSpace, FlagSpec


def space_of(domains: list[int]) -> FlagSpace:
    return FlagSpace(tuple(FlagSpec(f"--f{i}", (None, *((str(v),) for v in range(1, n)))) for i, n in enumerate(domains)),
                     core=())


def oracle(rules: Sequence[tuple[str, Mapping[str, str | None]]]) -> Callable[[Config], Key]:
    """The first rule whose flags all hold decides the failure (as SGLang's checks run in order); a
    rule's value None means "this flag not given"."""
    def key(config: Config) -> Key:
        given = {flag: " ".join(value) for flag, value in config.items}
        for name, needs in rules:
            if all(given.get(f) == v for f, v in needs.items()):
                return name
        return None
    return key


def random_rules(space: FlagSpace, domains: list[int], data: st.DataObject,
                 count: st.SearchStrategy[int]) -> list[tuple[str, dict[str, str | None]]]:
    """``count`` rules for :func:`oracle`, each one or two flags of ``space`` at a value other than the first."""
    flags = [s.flag for s in space.specs]
    rules: list[tuple[str, dict[str, str | None]]] = []
    for number in range(data.draw(count)):
        chosen = data.draw(st.lists(st.sampled_from(flags), min_size=1, max_size=2, unique=True))
        rules.append((f"r{number}", {f: str(data.draw(st.integers(1, domains[flags.index(f)] - 1))) for f in chosen}))
    return rules


def shrinker(key: Callable[[Config], Key]) -> Callable[[Config, str], Config | None]:
    """A perfect shrinker: removes flags one at a time while the same signature stays (1-minimal)."""
    def shrink(config: Config, signature: str) -> Config | None:
        items = dict(config.as_dict())
        for flag in sorted(items):
            trial = {k: v for k, v in items.items() if k != flag}
            if key(Config.of(trial)) == signature:
                items = trial
        return Config.of(items)
    return shrink


def test_a_masked_pair_is_found_in_a_later_round() -> None:
    domains = [3] * 6
    space = space_of(domains)
    # f0=1 and f1=1 fail on their own almost everywhere; the pair (f4=2, f5=2) fails only when unmasked
    rules = [("mask0", {"--f0": "1"}), ("mask1", {"--f1": "1"}), ("mask2", {"--f2": "2"}), ("deep", {"--f4": "2", "--f5": "2"})]
    key = oracle(rules)
    first = covering_array(domains, 2, seed=0)
    assert "deep" not in {key(space.config_of(row)) for row in first}  # a plain covering array never sees it
    seen: list[Key] = []

    def evaluate(configs: list[Config]) -> list[Key]:
        keys = [key(c) for c in configs]
        seen.extend(keys)
        return keys

    result = cover_unmasked(space, first, evaluate=evaluate, shrink=shrinker(key), strength=2, core_strength=2)
    assert "deep" in seen
    assert result.masked == 0  # every pair seen unmasked or proven to fail
    assert result.required == len(required_tuples(space, 2, 2))
    assert result.forbidden["deep"] == [["--f4", "2", "--f5", "2"]]
    assert result.unmasked + result.proven == result.required


@settings(max_examples=40, deadline=None)
@given(domains=st.lists(st.integers(2, 4), min_size=3, max_size=6), data=st.data())
def test_rows_after_the_first_never_hold_a_known_failure(domains: list[int], data: st.DataObject) -> None:
    space = space_of(domains)
    key = oracle(random_rules(space, domains, data, st.integers(1, 4)))
    rounds: list[tuple[list[Config], list[Config]]] = []  # rows, and the reproducers known when they were made
    learnt: list[Config] = []

    def evaluate(configs: list[Config]) -> list[Key]:
        rounds.append((configs, list(learnt)))
        return [key(c) for c in configs]

    def shrink(config: Config, signature: str) -> Config | None:
        minimal = shrinker(key)(config, signature)
        assert minimal is not None
        learnt.append(minimal)
        return minimal

    result = cover_unmasked(space, covering_array(domains, 2, seed=0), evaluate=evaluate, shrink=shrink,
                            strength=2, core_strength=2, max_rounds=6)
    for rows, known in rounds[1:]:
        for config in rows:
            held = set(config.items)
            assert not any(set(m.items) <= held for m in known if m.items)
    assert result.masked == 0  # perfect shrinker, failures of at most 2 flags: everything is covered


@settings(max_examples=30, deadline=None)
@given(domains=st.lists(st.integers(2, 4), min_size=3, max_size=6), data=st.data())
def test_shrinking_a_rounds_signatures_side_by_side_learns_what_one_after_another_does(
        domains: list[int], data: st.DataObject) -> None:
    """A sweep with several workers shrinks a round's signatures on threads (``shrink_many``); they finish in any
    order, and the rounds, rows and reproducers are those of shrinking them one after another."""
    space = space_of(domains)
    key = oracle(random_rules(space, domains, data, st.integers(2, 5)))
    first = covering_array(domains, 2, seed=0)

    def run(shrink_many: Callable[[list[tuple[Config, str]]], list[Config | None]] | None) -> tuple[object, list[list[Config]]]:
        batches: list[list[Config]] = []

        def evaluate(configs: list[Config]) -> list[Key]:
            batches.append(list(configs))
            return [key(c) for c in configs]

        result = cover_unmasked(space, first, evaluate=evaluate, shrink=shrinker(key), strength=2, core_strength=2,
                                max_rounds=6, shrink_many=shrink_many)
        return result.to_dict(), batches

    def side_by_side(pairs: list[tuple[Config, str]]) -> list[Config | None]:
        import threading

        results: list[Config | None] = [None] * len(pairs)
        gates = [threading.Event() for _ in pairs]

        def one(index: int) -> None:  # the last pair finishes first, then each before it
            if index + 1 < len(pairs):
                gates[index + 1].wait()
            results[index] = shrinker(key)(*pairs[index])
            gates[index].set()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(pairs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    assert run(side_by_side) == run(None)


def test_a_failure_that_needs_a_flag_absent_masks_nothing_behind_it() -> None:
    """DFLASH without a draft fails; DFLASH with a draft reaches a later check (f3=2). Learnt as "f0=1
    fails", the first failure proved every tuple with f0=1 and the later check was never reached."""
    domains = [3] * 6
    space = space_of(domains)
    rules: list[tuple[str, dict[str, str | None]]] = [
        ("needs-draft", {"--f0": "1", "--f1": None}), ("deep", {"--f0": "1", "--f3": "2"})]
    key = oracle(rules)
    # an array whose rows with f0=1 all leave f1 out (as a draft-less DFLASH row does)
    first = [tuple(0 if p == 1 and row[0] == 1 else v for p, v in enumerate(row))
             for row in covering_array(domains, 2, seed=0)]
    assert "deep" not in {key(space.config_of(row)) for row in first}  # masked in the array: f1 absent there

    def run(candidates: Callable[[Config, str], list[str]] | None) -> tuple[list[Key], object]:
        seen: list[Key] = []

        def evaluate(configs: list[Config]) -> list[Key]:
            keys = [key(c) for c in configs]
            seen.extend(keys)
            return keys

        result = cover_unmasked(space, first, evaluate=evaluate, shrink=shrinker(key), strength=2,
                                core_strength=2, candidates=candidates)
        return seen, result

    seen, _ = run(None)
    assert "deep" not in seen  # removal alone: "f0=1 fails" proves (f0=1, f3=2) and forbids f0=1
    seen, result = run(lambda config, signature: ["--f1", "--f3"] if signature == "needs-draft" else [])
    assert "deep" in seen
    assert result.needs_absent == {"needs-draft": [["--f1", "1"]]}  # type: ignore[attr-defined]


def assert_learnt_absences_true(domains: list[int], rules: list[tuple[str, dict[str, str | None]]]) -> None:
    """The flags learnt as needed absent make their failure go away when given, each of them needed."""
    space = space_of(domains)
    flags = [s.flag for s in space.specs]
    key = oracle(rules)
    result = cover_unmasked(space, covering_array(domains, 2, seed=0), evaluate=lambda cs: [key(c) for c in cs],
                            shrink=shrinker(key), strength=2, core_strength=2, max_rounds=6,
                            candidates=lambda config, signature: flags)
    for signature, lists in result.needs_absent.items():
        for reproducer, argv in zip(result.forbidden[signature], lists, strict=True):
            minimal, companions = Config.from_argv(reproducer), Config.from_argv(argv)
            if not companions.items:
                continue
            assert key(minimal) == signature
            assert key(Config.of({**minimal.as_dict(), **companions.as_dict()})) != signature  # given, they defuse it
            for flag in companions.flags():  # and each one is needed
                assert key(Config.of({**minimal.as_dict(), **companions.without(flag).as_dict()})) == signature


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_learnt_absences_are_true(data: st.DataObject) -> None:
    domains = data.draw(st.lists(st.integers(2, 4), min_size=3, max_size=6))
    flags = [f"--f{i}" for i in range(len(domains))]
    rules: list[tuple[str, dict[str, str | None]]] = []
    for number in range(data.draw(st.integers(1, 4))):
        chosen = data.draw(st.lists(st.sampled_from(flags), min_size=1, max_size=3, unique=True))
        needs: dict[str, str | None] = {}
        for f in chosen:
            absent = data.draw(st.booleans()) and len(needs) > 0
            needs[f] = None if absent else str(data.draw(st.integers(1, domains[flags.index(f)] - 1)))
        rules.append((f"r{number}", needs))
    assert_learnt_absences_true(domains, rules)


@pytest.mark.parametrize(("domains", "rules"), [
    # found by the property in a clean-clone CI run: r2's reproducer --f0 1 --f4 1 needs --f1 and --f2 absent (r1
    # wakes with both), learnt as one variant per flag; a projection onto a row's --f4 2 took only one of them
    ([2, 2, 2, 2, 3], [("r0", {"--f0": "1", "--f4": None}), ("r1", {"--f0": "1", "--f1": "1", "--f2": "1"}),
                       ("r2", {"--f0": "1"})]),
    # found by a search of 3,000 random rule sets: r3's reproducer --f0 1 --f1 1 needs --f2 absent (r2 wakes with
    # --f0 1 --f2 1); projected onto a row's --f0 2 it needs nothing, and must not be said to
    ([4, 4, 3], [("r0", {"--f1": "1", "--f2": None, "--f0": None}), ("r1", {"--f0": "1", "--f2": "2", "--f1": "2"}),
                 ("r2", {"--f0": "1", "--f2": "1"}), ("r3", {"--f1": "1"})]),
])
def test_a_projection_claims_the_absences_its_own_values_need(domains: list[int],
                                                               rules: list[tuple[str, dict[str, str | None]]]) -> None:
    assert_learnt_absences_true(domains, rules)


def test_a_reproducer_shrunk_to_a_simpler_value_is_learnt_with_the_rows_own_value_too() -> None:
    """As ``dwdp_size must equal tp_size``: every --f0 above 1 fails, and shrinking (values simplified)
    always answers --f0 2, which a row holding --f0 3 does not contain. The row's projection onto the
    reproducer's flags is learnt instead, so no later row holds --f0 3 (before: a third of the rounds' rows)."""
    domains = [4, 3, 3, 3, 3]
    space = space_of(domains)

    def key(config: Config) -> Key:
        given = {flag: int(" ".join(value)) for flag, value in config.items}
        if given.get("--f0", 1) >= 2:
            return "dwdp"
        return "deep" if given.get("--f3") == 2 and given.get("--f4") == 2 else None

    def shrink(config: Config, signature: str) -> Config | None:
        minimal = shrinker(key)(config, signature)
        assert minimal is not None
        for flag, value in minimal.items:  # value simplification: the smallest value that still fails
            for simpler in range(1, int(value[0])):
                if key(minimal.with_(flag, str(simpler))) == signature:
                    minimal = minimal.with_(flag, str(simpler))
                    break
        return minimal

    rows_seen: list[list[Config]] = []

    def evaluate(configs: list[Config]) -> list[Key]:
        rows_seen.append(configs)
        return [key(c) for c in configs]

    projections: list[Config] = []

    def evaluate_projection(configs: list[Config]) -> list[Key]:
        projections.extend(configs)
        return [key(c) for c in configs]

    first = covering_array(domains, 2, seed=0)
    result = cover_unmasked(space, first, evaluate=evaluate, shrink=shrink, strength=2, core_strength=2,
                            evaluate_projection=evaluate_projection)
    assert sorted(result.forbidden["dwdp"]) == [["--f0", "2"], ["--f0", "3"]]
    assert Config.of({"--f0": "3"}) in projections
    assert all(c.get("--f0") is None or c.get("--f0") == ("1",) for batch in rows_seen[1:] for c in batch)
    assert result.forbidden["deep"] == [["--f3", "2", "--f4", "2"]]
    assert result.masked == 0


def test_a_flag_a_reproducer_needs_absent_joins_its_projection_with_the_rows_value() -> None:
    """As ``--enable-return-aux-hidden-states``: it fails without an algorithm and with any algorithm but
    one, so the reproducer learnt (the flag alone, the algorithm absent) does not explain a row holding
    another algorithm; that row's projection keeps the algorithm it holds, and the pair is learnt."""
    domains = [3, 4, 3, 3]
    space = space_of(domains)

    def key(config: Config) -> Key:
        given = {flag: " ".join(value) for flag, value in config.items}
        if "--f0" in given and given.get("--f1") != "1":
            return "aux"
        return None

    learnt: list[Config] = []

    def shrink(config: Config, signature: str) -> Config | None:
        minimal = shrinker(key)(config, signature)
        assert minimal is not None
        learnt.append(minimal)
        return minimal

    result = cover_unmasked(space, covering_array(domains, 2, seed=0), evaluate=lambda cs: [key(c) for c in cs],
                            shrink=shrink, strength=2, core_strength=2,
                            candidates=lambda config, signature: ["--f1"])
    forbidden = result.forbidden["aux"]
    assert len(learnt) == 1  # one shrink: every other reproducer came from a projection
    assert [argv for argv in forbidden if "--f1" in argv], forbidden  # a pair with the row's own --f1
    assert all(argv[:2] != ["--f0", "1"] or "--f1" not in argv or argv[-1] != "1" for argv in forbidden)

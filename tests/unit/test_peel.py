"""Peeling on a synthetic predicate: what it evaluates, when a row stops, what it reports as new."""

from __future__ import annotations

from bisect_spec.model.flags import Config
from bisect_spec.search.peel import Key, peel


def cfg(*flags: str) -> Config:
    return Config.from_argv([token for flag in flags for token in (flag, "1")])


def verdict(config: Config) -> Key:
    """--a fails first (A); then --b with --c (B, needs both); then --c with --d (C); --x crashes."""
    if config.get("--x"):
        return "crashed:"
    if config.get("--a"):
        return "A"
    if config.get("--b") and config.get("--c"):
        return "B"
    if config.get("--c") and config.get("--d"):
        return "C"
    return None


def test_peeling_goes_down_to_the_failure_every_row_masked() -> None:
    asked: list[Config] = []

    def evaluate(configs: list[Config]) -> list[Key]:
        asked.extend(configs)
        return [verdict(c) for c in configs]

    minimal = {"A": cfg("--a"), "B": cfg("--b", "--c")}
    rows = [(cfg("--a", "--b", "--c", "--d"), "A"), (cfg("--a", "--b", "--c"), "A"), (cfg("--a", "--x"), "A"),
            (cfg("--q"), "Z")]
    result = peel(rows, minimal, evaluate)
    assert result.evaluated == {cfg("--b", "--c", "--d"): "B", cfg("--b", "--c"): "B", cfg("--x"): "crashed:",
                                cfg("--d"): None, Config(): None}
    assert result.new == {}  # C needs --c, which B's reproducer peels off: masked for good
    assert len(asked) == len(set(asked))  # nothing evaluated twice
    assert [level["rows"] for level in result.levels] == [3, 2]


def test_a_new_signature_ends_its_row_and_is_reported() -> None:
    minimal = {"A": cfg("--a")}
    result = peel([(cfg("--a", "--c", "--d"), "A")], minimal, lambda cs: [verdict(c) for c in cs])
    assert result.new == {"C": cfg("--c", "--d")}
    assert result.to_dict() == {"rows": 1, "levels": [{"level": 0, "rows": 1, "passed": 0, "peel_again": 0}],
                                "new_signatures": ["C"]}


def test_depth_bounds_the_levels() -> None:
    # each level removes one flag: k1 fails first as K1, then k2 as K2, ...
    flags = [f"--k{i}" for i in range(6)]

    def chain(configs: list[Config]) -> list[Key]:
        return [next((f"K{i}" for i, f in enumerate(flags) if c.get(f)), None) for c in configs]

    minimal = {f"K{i}": cfg(f) for i, f in enumerate(flags)}
    result = peel([(cfg(*flags), "K0")], minimal, chain, depth=3)
    assert len(result.levels) == 3
    assert list(result.evaluated.values()) == ["K1", "K2", "K3"]


def test_keep_removes_one_flag_and_keeps_the_algorithm_with_its_row() -> None:
    # E: --alg with --e fails first (reproducer --alg --e); the row's deeper failure F needs --alg and --f
    def verdict_alg(config: Config) -> Key:
        if config.get("--alg") and config.get("--e"):
            return "E"
        if config.get("--alg") and config.get("--f"):
            return "F"
        return None

    rows = [(cfg("--alg", "--e", "--f"), "E")]
    minimal = {"E": cfg("--alg", "--e")}
    everything = peel(rows, minimal, lambda cs: [verdict_alg(c) for c in cs])
    assert everything.evaluated == {cfg("--f"): None}  # the algorithm went with the reproducer: F stays masked
    one = peel(rows, minimal, lambda cs: [verdict_alg(c) for c in cs], keep=["--alg"])
    assert one.evaluated == {cfg("--alg", "--f"): "F"} and one.new == {"F": cfg("--alg", "--f")}


def test_a_failure_that_needs_a_flag_absent_is_peeled_by_giving_it() -> None:
    """DFLASH without a draft fails (N); with the draft, the row reaches the window check (W). Removing
    the algorithm would defuse N too, and W with it."""
    def verdict(config: Config) -> Key:
        if config.get("--alg") and not config.get("--draft"):
            return "N"
        if config.get("--alg") and config.get("--window"):
            return "W"
        return None

    def evaluate(configs: list[Config]) -> list[Key]:
        return [verdict(c) for c in configs]

    row = cfg("--alg", "--window")
    minimal = {"N": cfg("--alg")}
    removed = peel([(row, "N")], minimal, evaluate, keep=["--alg"])
    assert removed.evaluated == {cfg("--window"): None}  # the algorithm went: W never reached
    given = peel([(row, "N")], minimal, evaluate, keep=["--alg"], missing={"N": cfg("--draft")})
    assert given.evaluated == {cfg("--alg", "--window", "--draft"): "W"}
    assert given.new == {"W": cfg("--alg", "--window", "--draft")}


def test_width_keeps_the_most_diverse_rows_per_signature_and_still_finds_what_they_hold() -> None:
    from bisect_spec.search.peel import diverse

    # ten rows fail on --a; only one of them also holds --c --d (C behind A); rows of B are peeled apart
    same = [(cfg("--a", f"--n{i}"), "A") for i in range(9)]
    rows = [*same, (cfg("--a", "--c", "--d"), "A"), (cfg("--b", "--c"), "B"), (cfg("--b", "--c", "--e"), "B")]
    minimal = {"A": cfg("--a"), "B": cfg("--b", "--c")}
    asked: list[Config] = []

    def evaluate(configs: list[Config]) -> list[Key]:
        asked.extend(configs)
        return [verdict(c) for c in configs]

    result = peel(rows, minimal, evaluate, width=2, keep=["--a", "--b"])
    assert result.new == {"C": cfg("--c", "--d")}  # the row holding two more items is among the two kept
    assert len(asked) == 4  # two of A's ten rows, and both of B's
    unlimited = peel(rows, minimal, lambda cs: [verdict(c) for c in cs], keep=["--a", "--b"])
    assert unlimited.new == result.new and len(unlimited.evaluated) == 12
    assert diverse([cfg("--a"), cfg("--a", "--b"), cfg("--a")], 1) == [cfg("--a", "--b")]
    assert diverse([cfg("--a"), cfg("--b")], 5) == [cfg("--a"), cfg("--b")]


def test_non_core_removal_takes_every_flag_of_the_reproducer_but_the_core_ones() -> None:
    """A reproducer --alg + --p + --q where --p or --q alone fails too: "one" removes --p only, the row
    fails again the same way and takes a second level; "non-core" removes --p and --q at once, the
    algorithm stays."""
    def verdict3(config: Config) -> Key:
        if config.get("--alg") and (config.get("--p") or config.get("--q")):
            return "P"
        return "D" if config.get("--alg") and config.get("--deep") else None

    minimal = {"P": cfg("--alg", "--p", "--q")}
    row = (cfg("--alg", "--p", "--q", "--deep"), "P")
    one = peel([row], minimal, lambda cs: [verdict3(c) for c in cs], keep=["--alg"])
    both = peel([row], minimal, lambda cs: [verdict3(c) for c in cs], keep=["--alg"], remove="non-core")
    assert one.evaluated == {cfg("--alg", "--q", "--deep"): "P", cfg("--alg", "--deep"): "D"}
    assert both.evaluated == {cfg("--alg", "--deep"): "D"}
    assert both.new == one.new == {"D": cfg("--alg", "--deep")}
    only_core = peel([(cfg("--alg", "--deep"), "D")], {"D": cfg("--alg", "--deep")},
                     lambda cs: [verdict3(c) for c in cs], keep=["--alg", "--deep"], remove="non-core")
    assert list(only_core.evaluated) == [cfg("--alg")]  # no non-core flag: one core flag goes, the last listed


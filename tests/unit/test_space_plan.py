"""Flag spaces from a release's flag table, strategies, and the covering plan (pure: no SGLang)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config
from bisect_spec.search.covering import missing_tuples
from bisect_spec.search.plan import Strategy, covering_plan, load_strategy, strategy_names
from bisect_spec.search.space import (
    ABSENT,
    ALGORITHMS,
    FLOAT_VALUES,
    INT_VALUES,
    INTERACTING,
    PRESENT,
    FlagSpace,
    build_space,
    simplicity_key,
)

Table = list[dict[str, Any]]


def entry(option: str, *, aliases: list[str] | None = None, kind: str = "value", type: str | None = None,
          choices: list[str] | None = None, default: Any = None, nargs: int | str | None = None) -> dict[str, Any]:
    """One row shaped like a release's flag table (what ``Evaluator.flags`` reports)."""
    return {"option": option, "aliases": aliases or [option], "dest": option[2:].replace("-", "_"), "kind": kind,
            "type": type, "choices": choices, "default": default, "nargs": nargs, "help": f"help of {option}"}


TABLE: Table = [
    entry("--host", type="str", default="127.0.0.1"),
    entry("--tensor-parallel-size", aliases=["--tensor-parallel-size", "--tp-size"], type="int", default=1),
    entry("--page-size", type="int"),
    entry("--attention-backend", type="str", choices=["triton", "fa3", "flashinfer"]),
    entry("--enable-dp-attention", kind="bool", nargs=0, default=False),
    entry("--speculative-num-draft-tokens", type="int"),
    entry("--speculative-eagle-topk", type="int"),
    entry("--speculative-algorithm", type="str"),  # no choices: the known algorithms are swept
    entry("--speculative-draft-model-path", aliases=["--speculative-draft-model-path", "--speculative-draft-model"],
          type="str"),
    entry("--speculative-num-steps", type="int"),
    entry("--speculative-accept-threshold-single", type="float", default=1.0),
    entry("--speculative-attention-mode", type="str", choices=["prefill", "decode"], default="prefill"),
    entry("--speculative-token-map", type="int"),  # never swept, whatever its type
    entry("--speculative-draft-list", type="str", nargs="+"),  # multi-value: no meaningful domain
    entry("--speculative-free-text", type="str"),  # free text: no meaningful domain
]
CORE_ORDER = ["--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
              "--speculative-eagle-topk", "--speculative-num-draft-tokens"]


# -- build_space ---------------------------------------------------------------------


def test_globs_select_flags_core_first_then_sorted() -> None:
    space = build_space(TABLE, include=["--speculative-*"])
    assert space.flags == [*CORE_ORDER, "--speculative-accept-threshold-single", "--speculative-attention-mode"]
    assert space.core == tuple(CORE_ORDER)


def test_domains_by_kind_and_absent_first() -> None:
    space = build_space(TABLE, include=["--speculative-*", "--page-size", "--attention-backend", "--enable-dp-attention"])

    def values(flag: str) -> tuple[Any, ...]:
        spec = space.spec(flag)
        assert spec is not None, flag
        return spec.values

    assert values("--speculative-algorithm") == (ABSENT, *[(a,) for a in ALGORITHMS])
    assert values("--speculative-draft-model-path") == (ABSENT, ("@draft",))
    assert values("--speculative-num-steps") == (ABSENT, *[(v,) for v in INT_VALUES])
    assert values("--speculative-accept-threshold-single") == (ABSENT, *[(v,) for v in FLOAT_VALUES])
    assert values("--attention-backend") == (ABSENT, ("triton",), ("fa3",), ("flashinfer",))
    assert values("--enable-dp-attention") == (ABSENT, PRESENT)
    for spec in space.specs:
        assert spec.values[0] is ABSENT, spec.flag
        assert len(set(spec.values)) == len(spec.values), spec.flag
    assert space.config_of([0] * len(space.specs)) == Config()


def test_aliases_map_to_the_canonical_flag_and_its_values() -> None:
    space = build_space(TABLE, include=["--tp-size", "--speculative-draft-model", "--tensor-parallel-size"],
                        values={"--tp-size": ["", "8", "1"]})
    assert space.flags == ["--speculative-draft-model-path", "--tensor-parallel-size"]
    spec = space.spec("--tensor-parallel-size")
    assert spec is not None and spec.values == (ABSENT, ("8",), ("1",))
    assert space.config_of([1, 1]) == Config.of({"--speculative-draft-model-path": "@draft", "--tensor-parallel-size": "8"})


def test_value_overrides_unset_and_switches() -> None:
    space = build_space(TABLE, include=["--page-size", "--enable-dp-attention"],
                        values={"--page-size": ["16", "", "1"], "--enable-dp-attention": ["", "@on"]})
    assert [s.values for s in space.specs] == [((ABSENT, ("16",), ("1",))), (ABSENT, PRESENT)]


def test_never_swept_excluded_and_missing_flags() -> None:
    space = build_space(TABLE, include=["--speculative-*", "--no-such-flag"], exclude=["--speculative-accept-*"])
    assert "--speculative-token-map" not in space.flags  # path-like flags are never swept
    assert "--speculative-accept-threshold-single" not in space.flags
    assert "--no-such-flag" not in space.flags  # a flag the release lacks is simply absent
    assert "--speculative-draft-list" not in space.flags and "--speculative-free-text" not in space.flags
    with pytest.raises(UsageError) as info:
        build_space(TABLE, include=["--page-size"], require=["--speculative-algorithm", "--speculative-foo"])
    assert str(info.value) == "this release has no flag --speculative-foo, which the strategy requires"


def test_interacting_expands_to_the_known_flags() -> None:
    space = build_space(TABLE, include=["@interacting"])
    assert "--tensor-parallel-size" in space.flags  # --tp-size in INTERACTING, by its alias
    assert set(space.flags) == {"--tensor-parallel-size", "--page-size", "--attention-backend", "--enable-dp-attention"}
    assert "--tp-size" in INTERACTING and "--host" not in space.flags


def test_a_custom_switch_action_is_swept_as_a_switch() -> None:
    table = [entry("--disable-cuda-graph", kind="value", nargs=0, default=False)]
    space = build_space(table, include=["--disable-cuda-graph"])
    assert [s.values for s in space.specs] == [(ABSENT, PRESENT)]


def test_duplicate_flags_are_rejected() -> None:
    spec = build_space(TABLE, include=["--page-size"]).specs[0]
    with pytest.raises(ValueError, match="duplicate flags in space"):
        FlagSpace((spec, spec))


# -- simplicity ----------------------------------------------------------------------


def test_simplicity_orders_fewer_flags_first_then_earlier_values() -> None:
    space = build_space(TABLE, include=["--speculative-*"])
    empty = Config()
    one_simple = Config.of({"--speculative-num-steps": "1"})
    one_later = Config.of({"--speculative-num-steps": "-1"})
    two = Config.of({"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "1"})
    three = Config.of({"--speculative-algorithm": "EAGLE3", "--speculative-num-steps": "1", "--speculative-eagle-topk": "1"})
    shuffled = [three, one_later, two, empty, one_simple]
    assert sorted(shuffled, key=lambda c: simplicity_key(c, space)) == [empty, one_simple, one_later, two, three]
    # a total order: ties broken deterministically, also without a space
    a = Config.of({"--speculative-num-steps": "2"})
    b = Config.of({"--speculative-eagle-topk": "2"})
    assert simplicity_key(a, space) != simplicity_key(b, space)
    assert sorted([three, empty, two], key=simplicity_key) == [empty, two, three]


# -- strategies ----------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def usage_error(name: str) -> str:
    with pytest.raises(UsageError) as info:
        load_strategy(name)
    return str(info.value)


def test_shipped_strategies_load() -> None:
    assert strategy_names() == ["default", "eagle-core", "interactions", "nightly", "pr-gate", "quick", "spec-env"]
    for name in strategy_names():
        strategy = load_strategy(name)
        assert strategy.name == name and strategy.include
    quick = load_strategy("quick", seed=7, random_budget=3)
    assert (quick.strength, quick.core_strength, quick.seed, quick.random_budget) == (3, 3, 7, 3)
    assert load_strategy("quick").seed == 0


def test_unknown_strategy_suggests_the_closest() -> None:
    choices = "choose one of default, eagle-core, interactions, nightly, pr-gate, quick, spec-env, or pass a .toml file"
    assert usage_error("quik") == f"unknown strategy 'quik': did you mean quick? {choices}"
    assert usage_error("defualt") == f"unknown strategy 'defualt': did you mean default? {choices}"
    assert usage_error("zzz") == f"unknown strategy 'zzz': {choices}"


def test_strategy_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    assert usage_error(str(missing)) == f"strategy file {missing} does not exist"
    broken = write(tmp_path, 'include = ["--page-size"]\nstrength = \n')
    message = usage_error(str(broken))
    assert message.startswith(f"strategy file {broken}: ")
    assert "line 2" in message
    typo = write(tmp_path, 'include = ["--page-size"]\nstrenght = 2\n')
    assert usage_error(str(typo)) == (
        f"strategy file {typo}: unknown key 'strenght' (known: branches, core, core_alone, core_strength, description, "
        "exclude, "
        "fit, forbid, groups, include, peel, peel_depth, peel_remove, peel_width, "
        "random_budget, require, round_rows, rounds, seed, strength, values)")
    group = write(tmp_path, 'include = ["--page-size"]\n[groups]\n"--enable-lora" = 16\n')
    assert usage_error(str(group)) == (f"strategy file {group}: 'groups' must be a table: [groups] then "
                                       '"--enable-lora" = "--max-lora-rank 16 --lora-target-modules all"')
    empty = write(tmp_path, "include = []\n")
    assert usage_error(str(empty)) == f"strategy file {empty}: 'include' must list at least one flag"
    strong = write(tmp_path, 'include = ["--page-size"]\nstrength = 5\n')
    assert usage_error(str(strong)) == f"strategy file {strong}: strength must be 1-4 and core_strength 1-5"
    bad_int = write(tmp_path, 'include = ["--page-size"]\nseed = "x"\n')
    assert usage_error(str(bad_int)).startswith(f"strategy file {bad_int}: invalid literal for int()")


def test_a_strategy_file_by_path(tmp_path: Path) -> None:
    path = write(tmp_path, 'include = ["--page-size"]\nrandom_budget = 5\n[values]\n"--page-size" = ["", 1, "16"]\n',
                 name="pages.toml")
    strategy = load_strategy(str(path))
    assert (strategy.name, strategy.include, strategy.random_budget) == ("pages", ("--page-size",), 5)
    assert strategy.values == {"--page-size": (None, "1", "16")}


def test_include_must_be_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, 'include = "--speculative-*"\n')
    assert usage_error(str(path)).startswith(f"strategy file {path}: ")


def test_values_must_be_lists(tmp_path: Path) -> None:
    path = write(tmp_path, 'include = ["--page-size"]\n[values]\n"--page-size" = "16"\n')
    assert usage_error(str(path)).startswith(f"strategy file {path}: ")


def test_values_must_be_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, 'include = ["--page-size"]\nvalues = ["1"]\n')
    assert usage_error(str(path)).startswith(f"strategy file {path}: ")


# -- covering plan -------------------------------------------------------------------


def plan_space() -> tuple[FlagSpace, Strategy]:
    strategy = Strategy(name="t", include=("--speculative-*", "--page-size", "--attention-backend"),
                        exclude=("--speculative-accept-*",), strength=2, core_strength=3, seed=3,
                        values={"--speculative-num-steps": ("", "1", "0", "-1"), "--speculative-eagle-topk": ("", "1", "8"),
                                "--speculative-num-draft-tokens": ("", "2", "16"), "--page-size": ("", "1", "64")})
    return strategy.space(TABLE), strategy


def rows_of(space: FlagSpace, plan: list[Config]) -> list[tuple[int, ...]]:
    rows = []
    for config in plan:
        row = tuple(spec.index(config.get(spec.flag)) for spec in space.specs)
        assert all(i < len(spec.values) for i, spec in zip(row, space.specs, strict=True)), config
        rows.append(row)
    return rows


def test_covering_plan_is_deterministic_starts_with_the_baseline_and_covers() -> None:
    space, strategy = plan_space()
    plan = covering_plan(space, strategy)
    assert plan[0] == Config()
    assert len(set(plan)) == len(plan)
    assert covering_plan(space, strategy) == plan
    assert covering_plan(*plan_space()) == plan  # rebuilt from scratch: same list, same order
    other_seed = Strategy(**{**strategy.__dict__, "seed": 4})
    assert covering_plan(space, other_seed)[0] == Config() and covering_plan(space, other_seed) != plan
    core = [i for i, flag in enumerate(space.flags) if flag in space.core]
    assert len(core) == 5
    rows = rows_of(space, plan)
    assert missing_tuples(rows, space.domains(), 2, subsets=[(core, 3)]) == 0
    # only the core flags get 3-way coverage: the plan is far smaller than a full 3-way array would need
    assert len(plan) < space.grid_size()


def test_strategy_survives_the_run_metadata_round_trip() -> None:
    """``--resume`` rebuilds the strategy from run.json's ``to_dict``: the plan must not change."""
    space, strategy = plan_space()
    data = strategy.to_dict()
    rebuilt = Strategy(**{**data, "include": tuple(data["include"]), "exclude": tuple(data["exclude"]),
                          "core": tuple(data["core"]), "values": {k: tuple(v) for k, v in data["values"].items()}})
    assert covering_plan(rebuilt.space(TABLE), rebuilt) == covering_plan(space, strategy)


def test_spec_env_sweeps_the_environment_variables_of_the_table() -> None:
    table = [*TABLE, {"option": "SGLANG_ENABLE_SPEC_V2", "aliases": ["SGLANG_ENABLE_SPEC_V2"], "kind": "env",
                      "type": "bool", "default": "True"},
             {"option": "SGLANG_SIMULATE_ACC_METHOD", "aliases": ["SGLANG_SIMULATE_ACC_METHOD"], "kind": "env",
              "type": "str", "default": '"multinomial"'}]
    space = build_space(table, include=["--page-size", "@spec-env"])
    assert space.flags == ["--page-size", "SGLANG_ENABLE_SPEC_V2"]  # a free-text variable has no domain
    spec = space.spec("SGLANG_ENABLE_SPEC_V2")
    assert spec is not None and spec.values == (ABSENT, ("1",), ("0",))
    config = space.config_of([0, 2])
    assert config.env() == {"SGLANG_ENABLE_SPEC_V2": "0"}
    assert config.argv() == ["SGLANG_ENABLE_SPEC_V2=0"]
    assert build_space(TABLE, include=["@spec-env"]).flags == []


def test_core_alone_covers_every_core_tuple_again_in_rows_without_any_other_flag() -> None:
    space, strategy = plan_space()
    alone = Strategy(**{**strategy.__dict__, "core_alone": True})
    plan = covering_plan(space, alone)
    assert plan[: len(covering_plan(space, strategy))] == covering_plan(space, strategy)  # added after, nothing lost
    core = [i for i, flag in enumerate(space.flags) if flag in space.core]
    bare = [row for row in rows_of(space, plan) if all(v == 0 for i, v in enumerate(row) if i not in core)]
    core_domains = [space.domains()[i] for i in core]
    assert missing_tuples([tuple(row[i] for i in core) for row in bare], core_domains, 3) == 0


def test_a_path_a_speculative_check_tests_is_swept_as_given_or_not_and_no_other_free_text() -> None:
    def read(option: str, **kw: Any) -> dict[str, Any]:
        return {**entry(option, type="str", **kw), "speculative_read": True, "branch_values": []}

    table = [read("--uno-lora-path"), read("--model-path"), read("--lora-paths", nargs="*"),
             entry("--speculative-ngram-external-corpus-path", type="str"),  # not read by a check: no domain
             read("--speculative-free-text")]
    space = build_space(table, include=["@dataflow", "--speculative-*"])
    assert [(s.flag, s.values, s.kind) for s in space.specs] == [("--uno-lora-path", (ABSENT, ("@path",)), "path")]


def test_a_placeholder_path_becomes_a_shell_variable_the_launch_script_asks_for() -> None:
    from bisect_spec.report.bug_report import Names, launch_command
    from bisect_spec.report.reproducers import launch_script

    config = Config.of({"--speculative-algorithm": "UNO", "--uno-lora-path": "@path"})
    command = launch_command(config, Names("org/model", None), {}, [])
    assert command == ('python3 -m sglang.launch_server --model-path org/model --speculative-algorithm UNO '
                       '--uno-lora-path "$UNO_LORA_PATH"')
    script = launch_script(command, {"release": "0.5.23", "model": "m", "hardware": "h"}, config)
    assert ': "${UNO_LORA_PATH:?set UNO_LORA_PATH to your file for --uno-lora-path' in script
    assert script.index("UNO_LORA_PATH:?") < script.index("sglang.launch_server")


@pytest.mark.parametrize(("line", "message"), [
    ("peel_width = -1", "peel_width must be 0 (every row) or a number of rows, not -1"),
    ('peel_remove = "all"', "peel_remove must be one of one, non-core, not 'all'"),
])
def test_a_bad_peel_setting_is_refused_in_one_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "w.toml"
    path.write_text(f'include = ["--page-size"]\npeel = true\n{line}\n')
    with pytest.raises(UsageError) as info:
        load_strategy(str(path))
    assert str(info.value) == f"strategy file {path}: {message}"

"""Branch rows (``bisect_spec.search.branches``): a switch and an algorithm together, then each value of each read.

Pure: hand-built spaces; 0.5.23's real branch is evaluated in ``tests/integration/test_data_flow_space.py``.
"""

from __future__ import annotations

from bisect_spec.model.flags import Config
from bisect_spec.search.branches import contexts, passing_bases
from bisect_spec.search.space import PRESENT, Branch, FlagSpace, FlagSpec

ALGORITHM = FlagSpec("--speculative-algorithm", (None, ("EAGLE3",), ("DFLASH",)))
DRAFT = FlagSpec("--speculative-draft-model-path", (None, ("@draft",)))
UNIFIED = FlagSpec("--enable-unified-memory", (None, PRESENT), "bool")
BACKEND = FlagSpec("--attention-backend", (None, ("triton",), ("flashmla",)))
DCP = FlagSpec("--dcp-size", (None, ("2",)))


def space(*branches: Branch) -> FlagSpace:
    return FlagSpace((ALGORITHM, DRAFT, UNIFIED, BACKEND, DCP), core=(ALGORITHM.flag, DRAFT.flag),
                     fixed=Config.of({"--model-path": "@model"}), branches=branches)


def test_each_context_alone_then_with_each_value_of_each_read_one_at_a_time() -> None:
    dflash = Branch("handle_unified_memory_pool:647", ("DFLASH", "MEDUSA"), (UNIFIED.flag,),
                    (BACKEND.flag, DCP.flag))
    found = contexts(space(dflash), {"DFLASH": Config.of({ALGORITHM.flag: "DFLASH", DRAFT.flag: "@draft"})})
    base: dict[str, str | tuple[str, ...] | None] = {"--model-path": "@model", ALGORITHM.flag: "DFLASH",
                                                     DRAFT.flag: "@draft", UNIFIED.flag: PRESENT}
    assert found == [(Config.of(base), [Config.of({**base, BACKEND.flag: "triton"}),
                                        Config.of({**base, BACKEND.flag: "flashmla"}),
                                        Config.of({**base, DCP.flag: "2"})])]  # MEDUSA: not in the space


def test_a_row_two_branches_share_is_listed_once_and_a_switch_outside_the_space_gives_nothing() -> None:
    first = Branch("f:1", ("EAGLE3",), (UNIFIED.flag,), (BACKEND.flag,))
    again = Branch("f:9", ("EAGLE3",), (UNIFIED.flag,), (BACKEND.flag, DCP.flag))
    found = contexts(space(first, again))
    assert [len(rows) for _, rows in found] == [3]
    assert contexts(space(Branch("g:1", ("EAGLE3",), ("--enable-lora",), (BACKEND.flag,)))) == []


def test_a_context_starts_from_the_simplest_passing_row_of_its_algorithm_with_core_flags_only() -> None:
    fixed = {"--model-path": "@model"}
    passed = [Config.of({**fixed, ALGORITHM.flag: "DFLASH", DRAFT.flag: "@draft", BACKEND.flag: "triton"}),
              Config.of({**fixed, ALGORITHM.flag: "DFLASH", DRAFT.flag: "@draft"}),
              Config.of({**fixed, ALGORITHM.flag: "EAGLE3"}),
              Config.of(fixed)]
    assert passing_bases(space(), passed) == {
        "DFLASH": Config.of({ALGORITHM.flag: "DFLASH", DRAFT.flag: "@draft"}),
        "EAGLE3": Config.of({ALGORITHM.flag: "EAGLE3"})}


def test_the_space_keeps_a_branch_whose_switch_is_off_by_default_and_reads_every_option_of_a_shared_field() -> None:
    from bisect_spec.search.space import build_space

    def entry(option: str, dest: str, kind: str = "value", default: object = None,
              choices: list[str] | None = None) -> dict[str, object]:
        return {"option": option, "aliases": [option], "dest": dest, "kind": kind, "default": default,
                "choices": choices, "nargs": 0 if kind == "bool" else None, "type": None}

    contexts_seen = [
        {"function": "f", "line": 1, "switches": ["enable_x"], "algorithms": ["DFLASH"], "reads": ["backend"]},
        {"function": "g", "line": 2, "switches": ["keep_y"], "algorithms": ["DFLASH"], "reads": ["backend"]},
        {"function": "h", "line": 3, "switches": ["enable_z"], "algorithms": ["DFLASH"], "reads": ["backend"]},
    ]
    table = [{**entry("--speculative-algorithm", "speculative_algorithm", choices=["EAGLE3", "DFLASH"]),
              "branch_contexts": contexts_seen},
             entry("--enable-x", "enable_x", "bool", False),
             entry("--no-keep-y", "keep_y", "bool", True),  # store_false: the branch is open unless given
             entry("--enable-z", "enable_z", "bool", False),  # not swept below
             entry("--backend", "backend", choices=["a", "b"]), entry("--backend-alias", "backend", choices=["c"])]
    space = build_space(table, include=["--speculative-algorithm", "--enable-x", "--no-keep-y", "--backend",
                                        "--backend-alias"], core=["--speculative-algorithm"])
    assert space.branches == (Branch("f:1", ("DFLASH",), ("--enable-x",), ("--backend", "--backend-alias")),)

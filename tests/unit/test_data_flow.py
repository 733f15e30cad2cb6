"""The space from data flow: what a release's speculative checks test, read from its source.

Pure: synthetic source trees laid out as SGLang's (``srt/server_args.py``,
``srt/arg_groups/*.py``, ``srt/speculative/spec_info.py``); the real releases are read in
``tests/integration/test_data_flow_space.py``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from bisect_spec.inside.data_flow import branch_contexts, known_algorithms, speculative_reads
from bisect_spec.model.flags import Config
from bisect_spec.search.masking import _items
from bisect_spec.search.space import ABSENT, PRESENT, build_space

DESTS = ["speculative_algorithm", "speculative_eagle_topk", "page_size", "attention_backend", "tp_size",
         "enable_unified_memory", "disaggregation_mode", "enable_lora", "host", "dcp_size", "grammar_backend"]


def tree(tmp_path: Path, files: dict[str, str]) -> str:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return str(tmp_path)


def test_fields_tested_under_a_speculative_condition_with_the_constants_their_branches_compare(tmp_path: Path) -> None:
    root = tree(tmp_path, {"srt/server_args.py": """
        class ServerArgs:
            def _handle_speculative_decoding(self):
                if self.speculative_algorithm == "EAGLE3":
                    if self.page_size > 1 and self.attention_backend in ("fa3", "flashinfer"):
                        raise ValueError("page size")
                    assert getattr(self, "tp_size") <= 8
                    assert not get_bool_env_var("SGLANG_ENABLE_PP_SPEC")
                else:
                    assert "x" not in self.grammar_backend
                self.host = "0.0.0.0"

            def _handle_grammar(self):
                if self.grammar_backend == "xgrammar" or envs.SGLANG_UNRELATED.get():
                    raise ValueError("unrelated: no speculative field in sight")
        """})
    reads = speculative_reads(root, DESTS)
    assert reads == {"speculative_algorithm": ["EAGLE3"], "page_size": [1, 2], "attention_backend": ["fa3", "flashinfer"],
                     "tp_size": [8, 9], "grammar_backend": [], "SGLANG_ENABLE_PP_SPEC": []}


def test_a_speculative_module_early_exits_and_speculative_handlers(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "srt/arg_groups/speculative_hook.py": """
            def _resolve_alias(speculative_algorithm, dcp_size):
                if speculative_algorithm == "NEXTN" or 2 <= dcp_size:
                    return "EAGLE"
            """,
        "srt/arg_groups/kv_cache_hook.py": """
            def handle_unified_memory_pool(server_args):
                cfg = server_args
                if not cfg.enable_unified_memory:
                    return
                if cfg.disaggregation_mode != "null":
                    assert cfg.speculative_eagle_topk in (None, 1)

            def check_lora_speculative_compatibility(server_args):
                cfg = server_args
                if cfg.speculative_algorithm in ["NGRAM", None]:
                    return
                ragged_mode = envs.SGLANG_RAGGED_VERIFY_MODE.get()
                unsupported = [("experimental_sgl_trtllm" in (cfg.grammar_backend,), "why"), (ragged_mode, "why")]

            def handle_unrelated(server_args):
                if not server_args.enable_lora:
                    return
                assert server_args.tp_size != 3
            """})
    reads = speculative_reads(root, DESTS)
    assert reads["speculative_algorithm"] == ["NGRAM", "NEXTN"] and reads["dcp_size"] == [1, 2]
    assert reads["enable_unified_memory"] == [] and reads["disaggregation_mode"] == ["null"]
    assert reads["speculative_eagle_topk"] == [1]
    # a speculative handler (it returns unless speculative decoding is on): everything it reads
    assert reads["grammar_backend"] == [] and reads["SGLANG_RAGGED_VERIFY_MODE"] == []
    assert "enable_lora" not in reads and "tp_size" not in reads


def test_every_algorithm_the_release_accepts_members_and_aliases_but_none(tmp_path: Path) -> None:
    root = tree(tmp_path, {"srt/speculative/spec_info.py": """
        from enum import Enum, auto
        _RESERVED_ALIASES = frozenset({"NEXTN"})

        class SpeculativeAlgorithm(Enum):
            DFLASH = auto()
            EAGLE = auto()
            NONE = auto()

            @staticmethod
            def from_string(name):
                name_map = {"EAGLE": SpeculativeAlgorithm.EAGLE, "MTP": SpeculativeAlgorithm.EAGLE,
                            None: SpeculativeAlgorithm.NONE}
                return name_map[name]
        """})
    assert known_algorithms(root) == ["NEXTN", "DFLASH", "EAGLE", "MTP"]
    assert known_algorithms(str(tmp_path / "missing")) == []


def entry(option: str, *, kind: str = "value", type: str | None = None, choices: list[str] | None = None,
          branch: list[Any] | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"option": option, "aliases": [option], "dest": option[2:].replace("-", "_"), "kind": kind,
                           "type": type, "choices": choices, "default": None, "nargs": 0 if kind == "bool" else None,
                           "help": ""}
    if branch is not None:
        row["speculative_read"] = True
        row["branch_values"] = branch
    return row


TABLE = [
    entry("--speculative-algorithm", type="str", branch=["DFLASH", "EAGLE", "EAGLE3", "NEXTN", "UNO"]),
    entry("--page-size", type="int", branch=[1, 2, 32]),
    entry("--disaggregation-mode", type="str", branch=["null", "decode"]),
    entry("--attention-backend", type="str", choices=["fa3", "triton"], branch=["fa3", "intel_amx"]),
    entry("--mem-fraction-static", type="float", branch=[0.0, 1.0]),
    entry("--model-path", type="str", branch=[]),
    entry("--enable-lora", kind="bool", branch=[]),
    entry("--max-lora-rank", type="int"),
    entry("--lora-target-modules", type="str", choices=["q_proj", "all"]),
    entry("--grammar-backend", type="str", choices=["xgrammar", "none"]),
]


def test_dataflow_selects_the_flags_the_checks_test_with_the_values_that_reach_their_branches() -> None:
    space = build_space(TABLE, include=["@dataflow"], core=[])
    assert space.flags == ["--attention-backend", "--disaggregation-mode", "--enable-lora", "--mem-fraction-static",
                           "--page-size", "--speculative-algorithm"]  # a path without branch values has no domain
    values = {spec.flag: spec.values for spec in space.specs}
    # the usual algorithms first, then every other the release accepts
    assert values["--speculative-algorithm"] == (ABSENT, ("EAGLE3",), ("EAGLE",), ("NEXTN",), ("DFLASH",), ("UNO",))
    assert values["--page-size"][-1] == ("32",) and values["--page-size"].count(("2",)) == 1
    assert values["--disaggregation-mode"] == (ABSENT, ("null",), ("decode",))
    assert values["--attention-backend"] == (ABSENT, ("fa3",), ("triton",))  # choices bound what the parser takes
    assert values["--mem-fraction-static"][-1] == ("1.0",) and ("0.0",) not in values["--mem-fraction-static"]  # 0's twin
    # a strategy's own list is kept as written: the user asked for those values
    listed = build_space(TABLE, include=["--page-size", "--speculative-algorithm"], core=[],
                         values={"--page-size": ["", "16"], "--speculative-algorithm": ["", "EAGLE3"]})
    assert [spec.values for spec in listed.specs] == [(ABSENT, ("16",)), (ABSENT, ("EAGLE3",))]


def test_a_group_fills_in_the_flags_its_flag_needs_wherever_a_row_sets_it() -> None:
    space = build_space(TABLE, include=["--enable-lora", "--grammar-backend"], core=[])
    lora = space.flags.index("--enable-lora")
    row = [0] * len(space.flags)
    assert space.config_of(row) == Config()
    row[lora] = space.specs[lora].values.index(PRESENT)
    full = Config.from_argv(["--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all"])
    assert space.config_of(row) == full
    assert space.complete({"--enable-lora": PRESENT, "--max-lora-rank": ("8",)}).as_dict()["--max-lora-rank"] == ("8",)
    # a reproducer holding the filled-in companions still maps onto the space's items (masking learns it)
    assert _items(space, full) == frozenset({(lora, 1)})
    # a strategy may replace the groups, and a release lacking a companion flag keeps none
    assert build_space(TABLE, include=["--enable-lora"], core=[], groups={}).groups == {}
    assert build_space(TABLE[:7], include=["--enable-lora"], core=[]).groups == {}


def test_a_branch_a_switch_and_an_algorithm_open_together_with_what_it_reads_through_helpers(tmp_path: Path) -> None:
    """The shape of 0.5.23's unified-memory check: an early exit on the switch, a branch on the algorithm,
    an assert in a helper that reads the backends through another helper (in another module)."""
    root = tree(tmp_path, {
        "srt/arg_groups/kv_cache_hook.py": """
            def _assert_backends(server_args, *, algorithm):
                if server_args.dcp_size > 1:
                    pass
                assert set(backends_of(server_args)) <= {"triton"}

            def handle_unified_memory_pool(server_args):
                cfg = server_args
                if not cfg.enable_unified_memory:
                    return
                if cfg.speculative_algorithm == "DFLASH":
                    _assert_backends(server_args, algorithm="DFLASH")
                if cfg.speculative_algorithm in ("EAGLE", "EAGLE3") and cfg.enable_lora:
                    assert cfg.page_size == 1
                if cfg.speculative_algorithm != "NGRAM":
                    assert cfg.host

            def handle_other(cfg):
                if cfg.speculative_algorithm == "DFLASH":
                    assert cfg.tp_size == 1
            """,
        "srt/arg_groups/model_override_base.py": """
            def backends_of(cfg):
                return cfg.attention_backend, cfg.attention_backend
            """,
        "srt/arg_groups/watermark_hook.py": """
            def check_watermark(args):
                if not args.enable_lora:
                    return
                if args.speculative_algorithm not in ("NGRAM",):
                    return
                assert args.grammar_backend is None
            """})
    found = [(c["function"], c["switches"], c["algorithms"], c["reads"])
             for c in branch_contexts(root, [*DESTS, "dcp_size"])]
    assert found == [
        ("handle_unified_memory_pool", ["enable_unified_memory"], ["DFLASH"], ["attention_backend", "dcp_size"]),
        ("handle_unified_memory_pool", ["enable_unified_memory", "enable_lora"], ["EAGLE", "EAGLE3"], ["page_size"]),
        ("check_watermark", ["enable_lora"], ["NGRAM"], ["grammar_backend"]),
    ]  # != "NGRAM" names no algorithm to hold; handle_other has no switch; host: not an algorithm branch's own

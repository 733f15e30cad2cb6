"""The shrinker's hints: the flags a failure's statement, guard and message name, through the parser's dests."""

from __future__ import annotations

from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.reduce.hints import code_fields, failure_flags, fields_of, flags_for_fields, with_needed

TABLE: list[dict[str, Any]] = [
    {"option": "--speculative-algorithm", "dest": "speculative_algorithm", "kind": "value"},
    {"option": "--speculative-draft-model-path", "dest": "speculative_draft_model_path", "kind": "value"},
    {"option": "--speculative-eagle-topk", "dest": "speculative_eagle_topk", "kind": "value"},
    {"option": "--speculative-num-steps", "dest": "speculative_num_steps", "kind": "value"},
    {"option": "--page-size", "dest": "page_size", "kind": "value"},
    {"option": "--fp8-gemm-backend", "dest": "fp8_gemm_runner_backend", "kind": "value"},
    {"option": "--tp-size", "dest": "tp_size", "kind": "value"},
    {"option": "SGLANG_ENABLE_SPEC_V2", "kind": "env"},
]


def test_fields_of_statement_and_guard_map_to_flags_through_dests() -> None:
    frame = {"statement": "assert cfg.speculative_eagle_topk is None, 'topk must be unset'",
             "guard": {"line": 10, "text": "if self.speculative_num_steps == 1 and self.fp8_gemm_runner_backend:"}}
    fields = fields_of(frame)
    assert {"speculative_eagle_topk", "speculative_num_steps", "fp8_gemm_runner_backend"} <= fields
    assert flags_for_fields(fields, TABLE) == {"--speculative-eagle-topk", "--speculative-num-steps",
                                               "--fp8-gemm-backend"}


def test_a_compound_header_an_elif_and_an_env_read_parse() -> None:
    assert {"page_size", "speculative_eagle_topk"} <= code_fields("elif self.page_size > 1 and self.speculative_eagle_topk > 1:")
    assert "SGLANG_ENABLE_SPEC_V2" in code_fields("if envs.SGLANG_ENABLE_SPEC_V2.get():")
    assert "SGLANG_ENABLE_SPEC_V2" in code_fields('if get_bool_env_var("SGLANG_ENABLE_SPEC_V2"):')
    assert flags_for_fields({"SGLANG_ENABLE_SPEC_V2"}, TABLE) == {"SGLANG_ENABLE_SPEC_V2"}


def test_text_that_does_not_parse_falls_back_to_attributes() -> None:
    assert code_fields("raise ValueError(self.page_size ...") == {"page_size"}


def test_message_words_and_flags_count() -> None:
    fields = fields_of({}, "--tp-size 8 needs page_size=1")
    assert flags_for_fields(fields, TABLE) == {"--tp-size", "--page-size"}


def test_fields_no_flag_sets_map_to_nothing() -> None:
    assert flags_for_fields({"self", "cfg", "model_config", "topk"}, TABLE) == set()


def test_speculative_flags_bring_the_algorithm_and_draft() -> None:
    assert with_needed({"--speculative-num-steps"}) == {"--speculative-num-steps", "--speculative-algorithm",
                                                        "--speculative-draft-model-path"}
    assert with_needed({"--page-size"}) == {"--page-size"}


def test_failure_flags_adds_learnt_reproducers_of_the_signature() -> None:
    record = {"status": "failed", "frame": {"statement": "assert self.page_size == 1"},
              "exception": {"type": "AssertionError", "message": ""}}
    learnt = [Config.of({"--tp-size": "8", "--page-size": "16"})]
    assert failure_flags(record, TABLE) == {"--page-size"}
    assert failure_flags(record, TABLE, learnt) == {"--page-size", "--tp-size"}

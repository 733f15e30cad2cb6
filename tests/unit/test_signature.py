"""Signatures ignore line numbers, Python versions and receiver names; keep what identifies a failure."""

from __future__ import annotations

from typing import Any

from bisect_spec.model.signature import Signature, normalise_message, normalise_statement, signature_of, variant_of


def record(**frame: Any) -> dict[str, Any]:
    base = {"file": "srt/server_args.py", "function": "_handle_speculative_decoding", "line": 2423,
            "statement": "assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None"}
    base.update(frame)
    return {"status": "failed", "exception": {"type": "AssertionError", "message": ""}, "frame": base}


def test_line_numbers_do_not_change_the_signature() -> None:
    assert signature_of(record(line=2423)) == signature_of(record(line=3808))


def test_location_is_part_of_the_signature_but_not_of_the_cross_release_key() -> None:
    old = signature_of(record())
    new = signature_of(record(file="srt/arg_groups/speculative_hook.py", function="_handle_eagle_family",
                              statement="assert cfg.speculative_eagle_topk is None and cfg.speculative_num_draft_tokens is None"))
    assert old is not None and new is not None
    assert old.id != new.id
    assert old.cross_release_key == new.cross_release_key


def test_compound_statements_use_the_raising_expression_across_releases() -> None:
    a = signature_of({"status": "failed", "exception": {"type": "TypeError", "message": "'>' not supported"},
                      "frame": {"file": "a.py", "function": "f", "expression": "self.speculative_eagle_topk > 1",
                                "statement": "if self.speculative_eagle_topk > 1 and self.page_size > 1:"}})
    b = signature_of({"status": "failed", "exception": {"type": "TypeError", "message": "'>' not supported"},
                      "frame": {"file": "b.py", "function": "g", "expression": "cfg.speculative_eagle_topk > 1",
                                "statement": "if cfg.speculative_eagle_topk > 1 and view.page_size > 1:"}})
    assert a is not None and b is not None and a.cross_release_key == b.cross_release_key


def test_a_backend_list_that_became_a_constant_keeps_the_key() -> None:
    """0.5.3 and 0.5.12 ``server_args.py`` vs 0.5.23 ``speculative_hook.py``: the seed TypeError moved."""
    def sig(statement: str) -> Signature | None:
        return signature_of({"status": "failed", "exception": {"type": "TypeError", "message": "'>' not supported"},
                             "frame": {"file": "a.py", "function": "f", "expression": "self.speculative_eagle_topk > 1",
                                       "statement": statement}})
    old = sig("if self.speculative_eagle_topk > 1 and self.page_size > 1 and "
              "(self.attention_backend not in ['flashinfer', 'fa3']):")
    new = sig("if cfg.speculative_eagle_topk > 1 and view.page_size > 1 and "
              "(view.attention_backend not in _PAGE_TREE_SPEC_BACKENDS):")
    older = sig("if self.speculative_eagle_topk > 1 and self.page_size > 1 and self.attention_backend != 'flashinfer':")
    assert old is not None and new is not None and older is not None
    assert older.cross_release_key == old.cross_release_key == new.cross_release_key  # 0.5.3, 0.5.12, 0.5.23


def test_two_headers_raising_in_the_same_expression_keep_different_keys() -> None:
    """0.5.23 ``_handle_eagle_family`` has ``if topk > 1:`` (trtllm_mha) and ``if topk > 1 and page_size > 1 ...``."""
    def sig(statement: str) -> Signature | None:
        return signature_of({"status": "failed", "exception": {"type": "TypeError", "message": "'>' not supported"},
                             "frame": {"file": "h.py", "function": "_handle_eagle_family",
                                       "expression": "cfg.speculative_eagle_topk > 1", "statement": statement}})
    first = sig("if cfg.speculative_eagle_topk > 1:")
    second = sig("if cfg.speculative_eagle_topk > 1 and view.page_size > 1:")
    assert first is not None and second is not None and first.cross_release_key != second.cross_release_key


def failed(statement: str, message: str, exc_type: str = "ValueError") -> dict[str, Any]:
    return {"status": "failed", "exception": {"type": exc_type, "message": message},
            "frame": {"file": "srt/arg_groups/speculative_hook.py", "function": "handle_speculative_decoding",
                      "statement": statement}}


WINDOW = "raise ValueError(f'--speculative-draft-window-size must be positive, got {window_size}.')"


def test_the_statements_template_makes_one_signature_and_keeps_the_values_as_variants() -> None:
    zero = failed(WINDOW, "--speculative-draft-window-size must be positive, got 0.")
    minus = failed(WINDOW, "--speculative-draft-window-size must be positive, got -1.")
    assert signature_of(zero) == signature_of(minus)
    sig = signature_of(zero)
    assert sig is not None and sig.message == "--speculative-draft-window-size must be positive, got {window_size}."
    assert (variant_of(zero), variant_of(minus)) == ("window_size=0", "window_size=-1")


def test_percent_and_format_templates() -> None:
    percent = ("raise ValueError('Quantization method specified in the model config (%s) does not match the "
               "quantization method specified in the `quantization` argument (%s).' % (quant_method, self.quantization))")
    messages = [f"Quantization method specified in the model config (compressed-tensors) does not match the "
                f"quantization method specified in the `quantization` argument ({q})." for q in ("fp8", "awq", "w8a8_int8")]
    sigs = {signature_of(failed(percent, m)) for m in messages}
    assert len(sigs) == 1
    assert variant_of(failed(percent, messages[0])) == "quant_method=compressed-tensors, quantization=fp8"
    fmt = "raise ValueError('backend {} needs {need}'.format(self.backend, need=view.what))"
    assert normalise_message("backend wave needs sm100", fmt) == "backend {_.backend} needs {_.what}"


def test_numbers_are_normalised_in_every_position() -> None:
    assert normalise_message("must be positive, got 0.") == normalise_message("must be positive, got -1.")
    assert normalise_message("got 1.5, 2e-3; and 7") == "got <n>, <n>; and <n>"
    assert normalise_message("needs SGLang 0.5.23") == "needs SGLang 0.5.23"  # a version is a word here


def test_a_message_the_template_does_not_match_is_normalised_as_before() -> None:
    assert normalise_message("got 3.", WINDOW) == "got <n>."
    assert variant_of(failed(WINDOW, "got 3.")) == "got 3."
    assert variant_of(failed("assert x", "")) == ""


def test_message_values_are_normalised_but_words_kept() -> None:
    assert normalise_message("num_draft_tokens=16 must be <= 8 for /root/models/x") == \
        normalise_message("num_draft_tokens=4 must be <= 2 for /data/y")
    assert normalise_message("page size must be 1") != normalise_message("topk must be 1")


def test_receiver_names_are_normalised() -> None:
    assert normalise_statement("assert self.x is None") == normalise_statement("assert  cfg.x is None")


def test_passed_has_no_signature_and_crashes_group_by_kind() -> None:
    assert signature_of({"status": "passed"}) is None
    seg = signature_of({"status": "crashed", "crash": "segfault (SIGSEGV)"})
    ex = signature_of({"status": "crashed", "crash": "exit(7)"})
    timeout = signature_of({"status": "timeout", "crash": "no answer within 8 s"})
    assert seg is not None and ex is not None and timeout is not None
    assert len({seg.id, ex.id, timeout.id}) == 3
    assert timeout.message == "timeout"


def test_signature_round_trips_through_json_dict() -> None:
    sig = signature_of(record())
    assert sig is not None
    assert Signature.from_dict(sig.to_dict()) == sig
    assert len(sig.id) == 10


def test_a_stored_outcome_is_grouped_by_this_versions_signature() -> None:
    """Cached and journaled records keep their evidence; the signature is derived again from it."""
    from bisect_spec.model.outcome import Outcome
    data = {**failed(WINDOW, "--speculative-draft-window-size must be positive, got 0."), "config": [],
            "release": "0.5.23", "python": "3.11.7", "hardware": "none",
            "signature": {"id": "stale", "kind": "failed", "exc_type": "ValueError", "location": "x::y",
                          "statement": "s", "message": "got <n>."}}
    assert Outcome.from_dict(data).signature == signature_of(data)


def test_release_numbers_in_a_message_never_change_the_cross_release_key() -> None:
    from bisect_spec.model.signature import normalise_versions

    def raised(message: str) -> Signature:
        signature = signature_of({"status": "failed", "exception": {"type": "ValueError", "message": message},
                                  "frame": {"file": "srt/server_args.py", "function": "check", "line": 1,
                                            "statement": "raise ValueError(msg)"}})
        assert signature is not None
        return signature

    nine, eleven = raised("not supported before SGLang 0.5.9"), raised("not supported before SGLang 0.5.11.post1")
    assert nine.cross_release_key == eleven.cross_release_key and nine.id != eleven.id
    assert raised("needs 2 GPUs").cross_release_key != raised("needs a GPU").cross_release_key
    assert normalise_versions("v0.5.1.post3, 0.4.6rc1 and 2.9.1+cpu; 1.5 and 3 stay") == (
        "<version>, <version> and <version>; 1.5 and 3 stay")


def test_a_refused_flag_is_one_verdict_on_every_release_that_lacks_it() -> None:
    from bisect_spec.workflows.timeline import refusal_key

    assert refusal_key("SGLang 0.5.3 has no flag --speculative-moe-runner-backend: it exists in 0.5.9 … 0.5.23") == \
        refusal_key("SGLang 0.5.1.post3 has no flag --speculative-moe-runner-backend: did you mean --moe-runner-backend? "
                    "it exists in 0.5.9 … 0.5.23") == "usage:SGLang <version> has no flag --speculative-moe-runner-backend"
    assert refusal_key("SGLang 0.5.3 has no flag --x: it exists in 0.5.9") != refusal_key("SGLang 0.5.3 has no flag --y")


def test_operand_types_in_pythons_own_operator_message_are_values_and_the_operator_is_the_code() -> None:
    """0.5.23's compute_num_reserved_tokens: one statement, None on either side of ``*`` (one failure),
    and a None reaching ``max``'s ``>`` (another)."""
    statement = "return max(spec.speculative_eagle_topk * spec.speculative_num_steps, max_speculative_num_draft_tokens())"

    def type_error(message: str) -> dict[str, Any]:
        return {"status": "failed", "exception": {"type": "TypeError", "message": message},
                "frame": {"file": "srt/managers/utils.py", "function": "compute_num_reserved_tokens", "line": 497,
                          "statement": statement}}

    products = [type_error(f"unsupported operand type(s) for *: '{a}' and '{b}'")
                for a, b in (("NoneType", "int"), ("int", "NoneType"), ("NoneType", "NoneType"))]
    compared = type_error("'>' not supported between instances of 'NoneType' and 'int'")
    assert len({signature_of(r) for r in products}) == 1
    assert signature_of(compared) != signature_of(products[0])
    sig = signature_of(compared)
    assert sig is not None and sig.message == "'>' not supported between instances of <type> and <type>"
    assert variant_of(products[1]) == "unsupported operand type(s) for *: 'int' and 'NoneType'"
    assert normalise_message("'x' object has no attribute 'y'") == "'x' object has no attribute 'y'"

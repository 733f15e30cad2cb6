"""Signatures ignore line numbers, Python versions and receiver names; keep what identifies a failure."""

from __future__ import annotations

from typing import Any

from bisect_spec.signature import Signature, normalise_message, normalise_statement, signature_of


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
                                "statement": "if cfg.speculative_eagle_topk > 1 and view.page_size > 1 and x:"}})
    assert a is not None and b is not None and a.cross_release_key == b.cross_release_key


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

"""The release smoke's cases, judgement and record (``bisect_spec.workflows.smoke``); its runs on real releases
are in ``tests/integration/test_release_smoke.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.runtime import environments
from bisect_spec.workflows import smoke

#: flag tables as releases record them: old argparse choices, and a newer "any registered name"
OLD_TABLE = [{"option": "--speculative-algorithm", "aliases": ["--speculative-algorithm"], "choices": ["EAGLE", "EAGLE3"]}]
NEW_TABLE = [{"option": "--speculative-algorithm", "aliases": ["--speculative-algorithm"], "choices": None,
              "branch_values": ["EAGLE", "EAGLE3", "NGRAM", "STANDALONE", "DFLASH"]},
             {"option": "--enable-multi-layer-eagle", "aliases": ["--enable-multi-layer-eagle"], "choices": None}]


def _outcome(record: dict[str, Any]) -> Outcome:
    return Outcome.from_record(Config.of({"--tp-size": "1"}), record, release="x", python="3.11", hardware="sim")


def _case(name: str) -> smoke.Case:
    return next(case for case in smoke.CASES if case.name == name)


def test_cases_apply_by_feature_not_by_version() -> None:
    assert smoke.applicable(_case("NGRAM"), OLD_TABLE) == "--speculative-algorithm has no NGRAM"
    assert smoke.applicable(_case("NGRAM"), NEW_TABLE) is None
    assert smoke.applicable(_case("multi-layer EAGLE"), OLD_TABLE) == "no --enable-multi-layer-eagle"
    assert smoke.applicable(_case("multi-layer EAGLE"), NEW_TABLE) is None
    assert smoke.applicable(_case("no speculative decoding"), []) is None


def test_every_algorithm_the_release_accepts_gets_a_baseline_case_with_its_draft() -> None:
    cases = {case.name: case for case in smoke.baseline_cases(NEW_TABLE)}
    assert sorted(cases) == ["baseline DFLASH", "baseline EAGLE", "baseline EAGLE3", "baseline NGRAM",
                             "baseline STANDALONE"]
    assert "@draft:eagle3" in cases["baseline EAGLE3"].flags
    assert "--speculative-draft-model-path" not in cases["baseline NGRAM"].flags
    assert {case.expect for case in cases.values()} == {"no tool fault"}


def test_the_known_failure_must_be_sglangs_assert_in_its_speculative_checks() -> None:
    known = _case("known failure: draft tokens without steps")
    speculative_assert = _outcome({"status": "failed", "exception": {"type": "AssertionError", "message": ""},
                                   "frame": {"file": "srt/arg_groups/speculative_hook.py", "line": 612,
                                             "function": "_handle_eagle_family", "statement": "assert x"},
                                   "stage": "resolve"})
    assert smoke.judge(known, speculative_assert).ok
    elsewhere = _outcome({"status": "failed", "exception": {"type": "AssertionError", "message": ""},
                          "frame": {"file": "srt/managers/utils.py", "line": 1, "function": "f", "statement": "assert y"}})
    assert not smoke.judge(known, elsewhere).ok
    assert not smoke.judge(known, _outcome({"status": "passed"})).ok


def test_a_tool_fault_fails_every_kind_of_case() -> None:
    fault = _outcome({"status": "crashed", "crash": "tool fault in x", "tool_fault": "runtime-context publication"})
    for case in (_case("no speculative decoding"), *smoke.baseline_cases(NEW_TABLE)[:1]):
        judged = smoke.judge(case, fault)
        assert not judged.ok
    refused = _outcome({"status": "failed", "exception": {"type": "ValueError", "message": "needs a draft"},
                        "frame": {"file": "srt/arg_groups/speculative_hook.py", "line": 9, "function": "g",
                                  "statement": "raise ValueError()"}})
    assert smoke.judge(smoke.baseline_cases(NEW_TABLE)[0], refused).ok  # SGLang's own refusal is a verdict


def test_a_failed_smoke_is_recorded_and_warns_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))
    (tmp_path / "envs" / "sglang-9.9.9").mkdir(parents=True)
    monkeypatch.setattr(environments, "release_dir", lambda release: tmp_path / "envs" / f"sglang-{release}")
    assert smoke.status("9.9.9") == "not checked" and smoke.warning("9.9.9") is None

    def crashing(flags: list[str]) -> Outcome:
        return _outcome({"status": "crashed", "crash": "tool fault", "tool_fault": "runtime-context publication"})

    result = smoke.run("9.9.9", crashing, NEW_TABLE)
    assert not result.verified and smoke.status("9.9.9") == "unverified"
    assert smoke.recorded("9.9.9") == result
    warning = smoke.warning("9.9.9")
    assert warning is not None and "\n" not in warning
    assert "unverified" in warning and "bisect-spec env verify 9.9.9" in warning

    result = smoke.run("9.9.9", lambda flags: _outcome(
        {"status": "failed", "exception": {"type": "AssertionError"},
         "frame": {"file": "srt/server_args.py", "line": 1, "function": "__post_init__", "statement": "assert a"}}
        if "--speculative-num-draft-tokens" in flags and "--speculative-num-steps" not in flags
        else {"status": "passed"}), NEW_TABLE)
    assert result.verified, [c for c in result.cases if not c.ok]
    assert smoke.status("9.9.9") == "verified" and smoke.warning("9.9.9") is None


def test_a_release_that_does_not_start_is_unverified_with_the_reason(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environments, "release_dir", lambda release: tmp_path)

    def no_worker(flags: list[str]) -> Outcome:
        raise RuntimeError("worker died\nImportError: libcuda.so.1")

    result = smoke.run("9.9.9", no_worker, NEW_TABLE)
    assert not result.verified and result.error == "RuntimeError: ImportError: libcuda.so.1"

"""The two seed episodes, on real SGLang releases (0.5.9, 0.5.11, 0.5.12, 0.5.23)."""

from __future__ import annotations

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.runtime.session import DRAFT
from tests.conftest import shared_session

pytestmark = pytest.mark.sglang

ASSERT_STATEMENT = "assert _.speculative_eagle_topk is None and _.speculative_num_draft_tokens is None"
TYPE_ERROR = "'>' not supported between instances of 'NoneType' and 'int'"


def eagle3(**flags: str) -> Config:
    base: dict[str, str | None] = {"--tp-size": "8", "--speculative-algorithm": "EAGLE3",
                                   "--speculative-draft-model-path": DRAFT}
    base.update({f"--{k.replace('_', '-')}": v for k, v in flags.items()})
    return Config.of(base)


def test_episode1_topk_without_steps_on_0_5_9_kimi_k25() -> None:
    session = shared_session("0.5.9", model="kimi-k2.5")
    outcome = session.evaluate(eagle3(speculative_eagle_topk="1", speculative_num_draft_tokens="16"))
    assert outcome.status is Status.FAILED
    assert outcome.exception["type"] == "AssertionError"
    assert outcome.frame["file"] == "srt/server_args.py"
    assert outcome.frame["function"] == "_handle_speculative_decoding"
    assert outcome.frame["statement"] == (
        "assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None")
    # the whole multi-line statement, not the one line a traceback shows
    assert outcome.frame["source"].splitlines()[0].strip() == "assert ("
    assert outcome.frame["statement_lines"] == [2423, 2426]  # "assert (" to its closing ")"
    assert outcome.frame["guard"]["text"].endswith("self.speculative_num_steps is None:")


@pytest.mark.parametrize("release", ["0.5.11", "0.5.12"])
def test_episode2_both_failures_in_server_args(release: str) -> None:
    session = shared_session(release)
    first = session.evaluate(eagle3(speculative_num_draft_tokens="3"))
    assert first.exception["type"] == "AssertionError"
    assert first.signature is not None and first.signature.statement == ASSERT_STATEMENT
    assert first.signature.location == "srt/server_args.py::_handle_speculative_decoding"
    second = session.evaluate(eagle3(speculative_num_draft_tokens="3", speculative_num_steps="1"))
    assert second.exception == {"type": "TypeError", "module": "builtins", "message": TYPE_ERROR}
    assert second.frame["expression"] == "self.speculative_eagle_topk > 1"
    assert second.frame["function"] == "_handle_speculative_decoding"


def test_episode2_failures_moved_to_speculative_hook_in_0_5_23() -> None:
    session = shared_session("0.5.23")
    first = session.evaluate(eagle3(speculative_num_draft_tokens="3"))
    second = session.evaluate(eagle3(speculative_num_draft_tokens="3", speculative_num_steps="1"))
    for outcome in (first, second):
        assert outcome.frame["file"] == "srt/arg_groups/speculative_hook.py"
        assert outcome.frame["function"] == "_handle_eagle_family"
    assert first.exception["type"] == "AssertionError"
    assert second.exception["message"] == TYPE_ERROR


def test_cross_release_key_recognises_the_moved_failure() -> None:
    assertion = {}
    type_error = {}
    for release in ("0.5.9", "0.5.12", "0.5.23"):
        session = shared_session(release, model="kimi-k2.5")
        a = session.evaluate(eagle3(speculative_num_draft_tokens="3")).signature
        t = session.evaluate(eagle3(speculative_num_draft_tokens="3", speculative_num_steps="1")).signature
        assert a is not None and t is not None
        assertion[release], type_error[release] = a, t
    # the signature knows the failure moved (location is part of it) ...
    assert assertion["0.5.9"].id == assertion["0.5.12"].id != assertion["0.5.23"].id
    # ... the cross-release key says it is the same failure
    assert len({s.cross_release_key for s in assertion.values()}) == 1
    assert len({s.cross_release_key for s in type_error.values()}) == 1
    assert assertion["0.5.23"].cross_release_key != type_error["0.5.23"].cross_release_key


def test_explicit_steps_topk_and_draft_tokens_pass_with_resolved_values() -> None:
    session = shared_session("0.5.23")
    outcome = session.evaluate(eagle3(speculative_num_steps="3", speculative_eagle_topk="1",
                                      speculative_num_draft_tokens="4"))
    assert outcome.status is Status.PASSED, outcome.headline
    resolved = outcome.resolved
    assert (resolved["speculative_algorithm"], resolved["speculative_num_steps"], resolved["speculative_eagle_topk"],
            resolved["speculative_num_draft_tokens"]) == ("EAGLE3", 3, 1, 4)
    assert resolved["tp_size"] == 8
    assert outcome.signature is None

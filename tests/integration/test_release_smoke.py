"""The release smoke on every release CI installs, for real, and the release that had no smoke (0.5.18).

Before the smoke, 0.5.18 failed every configuration inside bisect-spec's own launch-path
emulation ("config namespace 'spec' not published", stage tokenizer_manager) and showed it as
SGLang's failure. These tests run SGLang's real argument handling of each installed release.
"""

from __future__ import annotations

import pytest

from bisect_spec import api
from bisect_spec.runtime import environments
from bisect_spec.workflows import smoke
from tests.conftest import CI_RELEASES, require_release
from tests.schemas import assert_valid

pytestmark = pytest.mark.sglang

#: oldest first, so a failing family shows in order
RELEASES: list[str] = [str(r) for r in CI_RELEASES]
RELEASES.sort(key=environments.version_key)


@pytest.mark.parametrize("release", RELEASES)
def test_the_release_smoke_passes_and_no_baseline_configuration_is_a_tool_fault(release: str) -> None:
    require_release(release)
    result = api.verify_release(release)
    assert not result.error, result.error
    assert result.verified, [(c.name, c.headline) for c in result.failures]
    names = {case.name for case in result.cases}
    assert {"no speculative decoding", "EAGLE, explicit chain", "known failure: draft tokens without steps"} <= names
    baselines = [case for case in result.cases if case.expect == "no tool fault"]
    assert baselines, "every release accepts at least EAGLE: its baseline cases must run"
    assert all(case.status != "crashed" or "tool fault" not in case.headline for case in result.cases)
    assert smoke.status(release) == "verified" and smoke.warning(release) is None
    assert_valid({"schema": smoke.SCHEMA, "releases": [result.to_dict()]}, "smoke")


def test_0_5_18_passes_the_issue_probe_and_multi_layer_eagle_reaches_sglangs_checks() -> None:
    require_release("0.5.18")
    spec = api.TargetSpec(release="0.5.18", model="llama-3.1-8b", draft="eagle", hardware="h100")
    with api.ProbeSession(spec, warm=False) as session:
        plain = session.probe(["--tp-size", "1"])
        assert plain.outcome.passed, plain.outcome.headline
        # no draft worker: the target's attention-backend choice, after the weights, then (0.5.14+) the pool
        assert "attention_backend" in plain.outcome.record["stages_passed"], plain.outcome.record  # then the pool
        assert plain.outcome.record["attention_backends"], plain.outcome.record
        multi = session.probe(["--tp-size", "1", "--speculative-algorithm", "EAGLE", "--enable-multi-layer-eagle"])
        assert multi.outcome.tool_fault is None, multi.outcome.headline
        # SGLang's own launch-path steps ran: the runtime context was published for the tokenizer manager
        assert "tokenizer_manager" in multi.outcome.record["stages_passed"] or multi.outcome.status.value == "failed"

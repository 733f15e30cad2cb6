"""The ``runner_checks`` stage on real SGLang releases: ``ModelRunner.__init__``'s own checks after its
``initialize()`` (``check_quantized_moe_compatibility``, the pipeline-parallel assert), which the launch path used to
cut off at the runner's device step.

Oracle we did not write: sgl-project/sglang#19503 ("support pipeline parallelism for kimi-k2.5", 2026-02-27), a
launch of Kimi-K2.5 with pipeline parallelism that ends in ``ModelRunner.__init__`` with ``self.support_pp`` /
``AssertionError`` (``model_runner.py`` line 426 on the reporter's build; 0.5.9's ``KimiK25ForConditionalGeneration``
has no ``pp_proxy_tensors`` in its ``forward``). 0.5.23's class takes them: the same flags get past the check there.
"""

from __future__ import annotations

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from tests.conftest import shared_session

pytestmark = pytest.mark.sglang

PP = {"--tp-size": "4", "--pp-size": "2"}


def test_kimi_k25_with_pipeline_parallelism_is_refused_by_the_runner_on_0_5_9() -> None:
    session = shared_session("0.5.9", model="kimi-k2.5", draft=None, hardware="h200")
    outcome = session.evaluate(Config.of(PP))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.record["stage"] == "runner_checks"
    assert outcome.record["exception"]["type"] == "AssertionError"
    assert outcome.record["exception"]["message"] == "Pipeline Parallel is not compatible with this model."
    assert outcome.record["frame"]["file"] == "srt/model_executor/model_runner.py"


def test_the_same_flags_get_past_the_runners_checks_on_0_5_23() -> None:
    session = shared_session("0.5.23", model="kimi-k2.5", draft=None, hardware="h200")
    outcome = session.evaluate(Config.of(PP))
    assert outcome.status is not Status.FAILED, outcome.headline
    assert outcome.record.get("stage") != "runner_checks"


@pytest.mark.parametrize("release", ["0.5.12", "0.5.18"])
def test_the_runners_checks_run_on_a_full_pass(release: str) -> None:
    session = shared_session(release, model="llama-3.1-8b", draft=None, hardware="h200")
    outcome = session.evaluate(Config.of({"--tp-size": "1"}))
    assert outcome.status is Status.PASSED, outcome.headline
    assert "runner_checks" in outcome.record["stages_passed"]

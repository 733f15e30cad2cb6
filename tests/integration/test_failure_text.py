"""What a failure shows people, on real SGLang 0.5.23: SGLang's traceback and SGLang's statement.

The EAGLE3 configuration with ``--speculative-num-draft-tokens 3`` alone fails in
``speculative_hook.py`` with an assert over ``cfg.speculative_eagle_topk``. Its traceback is the
one an SGLang issue would carry (no bisect-spec frames, paths relative to the sglang package)
and every report shows the statement as the source writes it, never the signature's ``_.`` form.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.report import formats as report_formats
from bisect_spec.report import report_model as report
from bisect_spec.report.summary import summarise
from bisect_spec.workflows import nightly
from tests.conftest import shared_session
from tests.schemas import assert_valid

pytestmark = pytest.mark.sglang

CONFIG = Config.from_argv(["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "@draft",
                           "--speculative-num-draft-tokens", "3"])
SOURCE = "assert cfg.speculative_eagle_topk is None and cfg.speculative_num_draft_tokens is None"


@pytest.fixture(scope="module")
def failed() -> Outcome:
    outcome = shared_session("0.5.23").evaluate(CONFIG)
    assert outcome.status.value == "failed" and outcome.frame["file"] == "srt/arg_groups/speculative_hook.py"
    return outcome


def test_the_traceback_is_sglangs_own_with_package_relative_paths(failed: Outcome) -> None:
    text = str(failed.record["traceback_tail"])
    lines = text.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith('  File "srt/server_args.py", line ') and lines[1].endswith(", in resolve_once")
    assert f'  File "srt/arg_groups/speculative_hook.py", line {failed.frame["line"]}, in _handle_eagle_family' in lines
    assert lines[-1] == "AssertionError"
    assert "bisect_spec" not in text and "evaluator.py" not in text
    assert "/" + "root" not in text and "site-packages" not in text and "/sglang/" not in text
    assert "During handling" not in text and "ModuleNotFoundError" not in text


def test_every_report_shows_the_statement_in_the_sources_words(failed: Outcome) -> None:
    assert failed.frame["statement"] == SOURCE
    assert failed.signature is not None and failed.signature.statement.startswith("assert _.speculative_eagle_topk")
    summary = summarise([failed], None, {"release": "0.5.23", "model": "kimi-k2.6"}, "one", 0)
    (model_signature,) = report.report_model(report.SweepInput("r1", {}, summary))["cells"][0]["signatures"]
    assert model_signature["statement"] == SOURCE
    junit = report.to_junit(report.SweepInput("r1", {}, summary))
    assert f"statement: {SOURCE}" in junit and "_.speculative" not in junit
    html = report_formats.to_html(report.SweepInput("r1", {}, summary))
    assert "_.speculative" not in html
    assert nightly._signature_entry(summary["signatures"][0])["statement"] == SOURCE


def test_the_outcome_follows_the_schema(failed: Outcome) -> None:
    document: dict[str, Any] = json.loads(json.dumps(failed.to_dict()))
    assert_valid({"schema": "bisect-spec/probe/1", "target": shared_session("0.5.23").target.describe(),
                  "worker": shared_session("0.5.23").info, "notes": [], "outcome": document}, "probe")

"""Bisection across real installed SGLang releases (deepseek-v3 + eagle3, simulated rtx-pro-6000 x8).

``--releases`` limits the search to releases this suite installs, so nothing is built here.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bisect_spec import api
from bisect_spec.cli import main
from tests.conftest import require_release

pytestmark = pytest.mark.sglang

INSTALLED = ["0.5.9", "0.5.11", "0.5.12", "0.5.23"]
SPEC = api.TargetSpec(model="deepseek-v3", draft="eagle3", hardware="rtx-pro-6000")
HOOK = "srt/arg_groups/speculative_hook.py::_handle_eagle_family"
SERVER_ARGS = "srt/server_args.py::_handle_speculative_decoding"


@pytest.fixture(scope="module", autouse=True)
def _releases() -> None:
    for release in INSTALLED:
        require_release(release)


def test_the_assertion_is_one_failure_on_every_release_whose_location_moved() -> None:
    report = api.bisect(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"], SPEC,
                        releases=INSTALLED)
    data = report.to_dict()
    assert data["first_bad"] is None and data["last_good"] is None  # no verdict change
    assert {e["cross_release_key"] for e in data["evaluated"]} == {"98339db6cb"}
    assert [(s["first"], s["last"], s["location"]) for s in data["segments"]] == [
        ("0.5.9", "0.5.12", SERVER_ARGS), ("0.5.23", "0.5.23", HOOK)]
    (move,) = data["boundaries"]
    assert (move["kind"], move["last_good"], move["first_bad"]) == ("moved", "0.5.12", "0.5.23")
    assert "assert" in move["code_before"]["source"] and "assert" in move["code_after"]["source"]
    assert move["code_before"]["function"] == "_handle_speculative_decoding"
    assert move["code_after"]["function"] == "_handle_eagle_family"
    lines = move["diff"].splitlines()
    assert any(line.startswith("-") and "self.speculative_eagle_topk is None" in line for line in lines)
    assert any(line.startswith("+") and "cfg.speculative_eagle_topk is None" in line for line in lines)
    assert data["environments_built"] == []


def test_cli_json_names_the_boundary_and_every_release_it_evaluated() -> None:
    result = CliRunner().invoke(main, ["bisect", "--model", "deepseek-v3", "--hardware", "rtx-pro-6000", "--releases",
                                       ",".join(INSTALLED), "--no-moves", "--json", "--",
                                       "--speculative-num-steps", "1", "--speculative-num-draft-tokens", "3"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema"] == "bisect-spec/bisect/1"
    assert data["notes"][0] == "added --speculative-algorithm EAGLE3 for the 'eagle3' draft"
    # the two ends fail the same way: with --no-moves nothing in between needs evaluating
    assert [e["release"] for e in data["evaluated"]] == ["0.5.9", "0.5.23"]
    assert {e["cross_release_key"] for e in data["evaluated"]} == {"d4b68cd739"}
    assert data["boundaries"] == [] and data["first_bad"] is None


@pytest.mark.parametrize(("args", "expected"), [
    (["--good", "0.5.23", "--bad", "0.5.9"], "Error: --good 0.5.23 must be older than --bad 0.5.9"),
    (["--good", "0.5.90"], "Error: --good 0.5.90 is not a known SGLang release (closest: 0.5.9"),
    ([], "Error: no SGLang flags given: pass them after --, e.g. -- --speculative-algorithm EAGLE3"),
])
def test_bisect_usage_errors(args: list[str], expected: str) -> None:
    flags = [] if not args else ["--", "--speculative-algorithm", "EAGLE3"]
    result = CliRunner().invoke(main, ["bisect", "--releases", ",".join(INSTALLED), *args, *flags])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(expected), result.output

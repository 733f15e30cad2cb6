"""Bisection across real installed SGLang releases (deepseek-v3 or llama-3.1-8b + eagle3, simulated rtx-pro-6000 x8).

``--releases`` limits the search to releases this suite installs, so nothing is built here.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bisect_spec import api
from bisect_spec.cli.commands import main
from tests.conftest import require_release
from tests.schemas import assert_valid

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

#: the releases the README's test command installs (CI builds nothing else)
INSTALLED = ["0.4.6", "0.5.1.post3", "0.5.3", "0.5.9", "0.5.11", "0.5.12", "0.5.23"]
SPEC = api.TargetSpec(model="deepseek-v3", draft="eagle3", hardware="rtx-pro-6000")
HOOK = "srt/arg_groups/speculative_hook.py::_handle_eagle_family"
SERVER_ARGS = "srt/server_args.py::_handle_speculative_decoding"
INLINE = "srt/server_args.py::__post_init__"


@pytest.fixture(scope="module", autouse=True)
def _releases() -> None:
    for release in INSTALLED:
        require_release(release)


def test_the_assertion_is_one_failure_on_every_release_whose_location_moved_twice() -> None:
    report = api.bisect(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"], SPEC,
                        releases=INSTALLED)
    data = report.to_dict()
    assert_valid(data, "bisect")
    assert data["first_bad"] is None and data["last_good"] is None  # no verdict change
    assert {e["cross_release_key"] for e in data["evaluated"]} == {"98339db6cb"}
    assert [(s["first"], s["last"], s["location"]) for s in data["segments"]] == [
        ("0.4.6", "0.5.1.post3", INLINE), ("0.5.3", "0.5.12", SERVER_ARGS), ("0.5.23", "0.5.23", HOOK)]
    moves = data["boundaries"]
    assert [(m["kind"], m["last_good"], m["first_bad"]) for m in moves] == [
        ("moved", "0.5.1.post3", "0.5.3"), ("moved", "0.5.12", "0.5.23")]
    move = moves[1]
    assert "assert" in move["code_before"]["source"] and "assert" in move["code_after"]["source"]
    assert move["code_before"]["function"] == "_handle_speculative_decoding"
    assert move["code_after"]["function"] == "_handle_eagle_family"
    lines = move["diff"].splitlines()
    assert any(line.startswith("-") and "self.speculative_eagle_topk is None" in line for line in lines)
    assert any(line.startswith("+") and "cfg.speculative_eagle_topk is None" in line for line in lines)
    assert data["environments_built"] == []


def test_the_type_error_appears_at_a_release_found_by_bisection_with_the_code_that_explains_it() -> None:
    # llama: a target whose class has the EAGLE3 capture hook in every release (DeepSeek-V3's has it from
    # 0.5.4.post2: before, EAGLE3 on it fails once the model is built, in stage target_model)
    result = CliRunner().invoke(main, ["bisect", "--model", "llama-3.1-8b", "--hardware", "rtx-pro-6000", "--releases",
                                       ",".join(INSTALLED), "--no-moves", "--json", "--",
                                       "--speculative-num-steps", "1", "--speculative-num-draft-tokens", "3"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema"] == "bisect-spec/bisect/1"
    assert_valid(data, "bisect")
    assert data["notes"][0] == "added --speculative-algorithm EAGLE3 for the 'eagle3' draft"
    # 0.5.1.post3 resolves the seed's flags, then crashes in SGLang's own init_memory_pool (the draft's cache size
    # multiplies by the unset topk): the first bad release; 0.5.3's resolution refuses them with the seed's TypeError
    assert (data["last_good"], data["first_bad"]) == ("0.4.6", "0.5.1.post3")
    # both ends, then binary search — never all seven
    assert len(data["evaluated"]) <= 2 + 3 and len(data["evaluated"]) < len(INSTALLED)
    verdicts = {e["release"]: e["verdict"] for e in data["evaluated"]}
    assert verdicts["0.4.6"] == "passed" and verdicts["0.5.23"] == "failed"
    crash, seed = data["boundaries"]
    assert crash["after"]["location"] == "srt/model_executor/model_runner.py::init_memory_pool"
    assert crash["after"]["exc_type"] == "TypeError" if "exc_type" in crash["after"] else True
    assert seed["after"]["cross_release_key"] == "e2e2a63301"
    assert seed["after"]["location"] == SERVER_ARGS
    assert seed["diff"].startswith("--- 0.5.1.post3/")


@pytest.mark.parametrize(("args", "expected"), [
    (["--old", "0.5.23", "--new", "0.5.9"], "Error: --old 0.5.23 is newer than --new 0.5.9: --old is the older end"),
    (["--good", "0.5.90"], "Error: --good 0.5.90 is not a known SGLang release (closest: 0.5.9"),
    ([], "Error: no SGLang flags given: pass them after --, e.g. -- --speculative-algorithm EAGLE3"),
])
def test_bisect_usage_errors(args: list[str], expected: str) -> None:
    flags = [] if not args else ["--", "--speculative-algorithm", "EAGLE3"]
    result = CliRunner().invoke(main, ["bisect", "--releases", ",".join(INSTALLED), *args, *flags])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(expected), result.output


TYPE_ERROR = ["--", "--speculative-num-steps", "1", "--speculative-num-draft-tokens", "3"]


def test_good_newer_than_bad_finds_the_first_good_release_and_scan_evaluates_every_release() -> None:
    """git bisect's terms in reverse order (the search for a fix): the old end is the --bad one."""
    result = CliRunner().invoke(main, ["bisect", "--model", "llama-3.1-8b", "--hardware", "rtx-pro-6000", "--no-moves",
                                       "--releases", "0.5.1.post3,0.5.3,0.5.9", "--good", "0.5.9", "--bad", "0.5.1.post3",
                                       "--scan", *TYPE_ERROR])
    assert result.exit_code == 0, result.output
    assert "releases 0.5.1.post3 … 0.5.9: evaluated 3 of 3 releases (--scan: every installed one)" in result.stdout
    change = next(line for line in result.stdout.splitlines() if line.startswith("first "))
    assert change.startswith("first good release: 0.5.3 (last bad: 0.5.1.post3): TypeError: unsupported operand type(s) "
                             "for *: 'int' and 'NoneType' (srt/model_executor/model_runner.py:"), change
    progress = [line for line in result.stderr.splitlines() if "left" in line]
    assert progress[:3] == ["… 0.5.1.post3: failed; scanning installed releases, 2 left",
                            "… 0.5.3: failed; scanning installed releases, 1 left",
                            "… 0.5.9: failed; scanning installed releases, 0 left"]
    assert "warning:" not in result.stdout


def test_agreeing_ends_say_how_few_releases_were_evaluated() -> None:
    result = CliRunner().invoke(main, ["bisect", "--model", "deepseek-v3", "--hardware", "rtx-pro-6000", "--no-moves",
                                       "--releases", "0.5.3,0.5.9,0.5.12", "--json", *TYPE_ERROR])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["evaluated_count"], data["releases_count"], data["first_new"]) == (2, 3, None)
    assert data["warnings"] == ["the ends agree, so only 2 of 3 releases were evaluated: a verdict that differs only "
                                "in middle releases would be missed; --scan evaluates every installed release"]

"""Reports of a real sweep run and of a nightly fixture, per format: exact content, counts that add up.

``tests/resources/runs/20261130-183524-kimi-k2.6-0.5.23-5ae9`` is a real ``quick`` sweep on SGLang 0.5.23
(results.jsonl without the resolved values and frames, to keep it small). ``nightly-3x2.json`` is written
by hand against the nightly schema after real quick sweeps of deepseek-v3 on 0.5.9/0.5.12/0.5.23 x
h100/rtx-pro-6000 (the signature ids, keys and counts are theirs); the regression (ValueError in
_resolve_page_size), the fixed RuntimeError, the moved location and the skipped cell are invented to
exercise every kind of change.
"""

from __future__ import annotations

import copy
import json
import random
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from bisect_spec import api
from bisect_spec.report import formats as report_formats
from bisect_spec.report import report_model as report
from bisect_spec.report import text
from bisect_spec.report.html_page import MAX_PAIRS, MAX_VALUES, omega_squared, pair_grids
from bisect_spec.report.night import ID_LEGEND
from bisect_spec.report.report_model import NightlyInput, SweepInput
from bisect_spec.versions import version_key
from tests.conftest import RESOURCES
from tests.schemas import assert_valid

RUN_ID = "20261130-183524-kimi-k2.6-0.5.23-5ae9"
RUN_DIR = RESOURCES / "runs" / RUN_ID
NIGHTLY = RESOURCES / "nightly-3x2.json"
BASELINE = "20261129-0215-cd34"


def nightly_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(NIGHTLY.read_text())
    return data


def sweep_input() -> SweepInput:
    data = api.report_input(RUN_DIR)
    assert isinstance(data, SweepInput)
    return data


def model_of(data: report.ReportInput) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(report.to_json(data))
    return document


# -- JSON ---------------------------------------------------------------------------------------------------


def test_nightly_json_totals_add_up() -> None:
    model = model_of(NightlyInput(nightly_data()))
    assert (model["schema"], model["kind"], model["id"], model["baseline"]) == (
        "bisect-spec/report/1", "nightly", "20261130-0215-ab12", BASELINE)
    totals = model["totals"]
    assert totals == {"cells": 6, "cells_done": 5, "cells_skipped": 1, "cells_error": 0, "evaluated": 1400,
                      "counts": {"failed": 313, "passed": 1087}, "signatures": 6, "failures": 4,
                      "regressions": 1, "fixed": 1, "still_failing": 11, "known": 0, "changed": 1}
    assert sum(c["evaluated"] for c in model["cells"]) == totals["evaluated"] == sum(totals["counts"].values())
    for cell in model["cells"]:
        failed = cell["counts"].get("failed", 0)
        assert failed == sum(s["count"] for s in cell["signatures"]), cell["id"]


def test_nightly_json_marks_the_regression_and_the_known_failures() -> None:
    model = model_of(NightlyInput(nightly_data()))
    marks = {(c["id"], s["id"]): (s["change"], s["known"]) for c in model["cells"] for s in c["signatures"]}
    assert marks.pop(("0.5.23/deepseek-v3/eagle3/h100x8", "e41f0c2d7a")) == ("new", False)
    assert marks.pop(("0.5.23/deepseek-v3/eagle3/h100x8", "c894a92892")) == ("location-moved", True)
    assert set(marks.values()) == {(None, True)}
    assert len(marks) == 10


def test_nightly_matrix_in_version_order_per_facet() -> None:
    matrix = model_of(NightlyInput(nightly_data()))["matrix"]
    assert [t["facet"] for t in matrix] == ["deepseek-v3 + eagle3 · h100x8", "deepseek-v3 + eagle3 · rtx-pro-6000x8"]
    assert all(t["releases"] == ["0.5.9", "0.5.12", "0.5.23"] for t in matrix)  # not "0.5.12" < "0.5.23" < "0.5.9"
    h100 = {row["cross_release_key"]: row for row in matrix[0]["rows"]}
    assert list(h100) == ["d4b68cd739", "98339db6cb", "5b7a19e3c0"]
    assert h100["98339db6cb"]["title"] == "AssertionError in _handle_eagle_family"  # the newest release names the row
    page_size = h100["5b7a19e3c0"]["cells"]
    assert page_size["0.5.9"] is None and page_size["0.5.12"] is None
    assert page_size["0.5.23"] == {"count": 9, "share": round(9 / 280, 4), "signatures": ["e41f0c2d7a"], "change": "new",
                                   "verdict": "new", "location": "srt/arg_groups/speculative_hook.py::_resolve_page_size",
                                   "moved_from": None}
    moved = h100["98339db6cb"]["cells"]  # one failure: the assertion moved from server_args.py into the hook
    assert moved["0.5.9"]["moved_from"] is None and moved["0.5.12"]["moved_from"] is None
    assert moved["0.5.23"]["moved_from"] == "srt/server_args.py::_handle_speculative_decoding"
    assert moved["0.5.23"]["location"] == "srt/arg_groups/speculative_hook.py::_handle_eagle_family"
    rtx = {row["cross_release_key"]: row for row in matrix[1]["rows"]}
    memory = rtx["0c5d2e9f41"]["cells"]
    assert memory["0.5.9"] is None
    assert (memory["0.5.12"]["count"], memory["0.5.12"]["change"]) == (4, None)
    assert (memory["0.5.23"]["count"], memory["0.5.23"]["change"], memory["0.5.23"]["verdict"]) == (0, "vanished", "fixed")


def test_sweep_json_is_one_cell_with_shrunk_reproducers() -> None:
    model = model_of(sweep_input())
    assert (model["kind"], model["id"], model["baseline"], model["changes"]) == ("sweep", RUN_ID, None, [])
    assert model["totals"]["counts"] == {"failed": 60, "passed": 220}
    (cell,) = model["cells"]
    assert cell["id"] == "0.5.23/kimi-k2.6/eagle3/rtx-pro-6000x8"
    assert [(s["id"], s["count"], s["minimal"], s["known"]) for s in cell["signatures"]] == [
        ("7b382a5c8e", 32, ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1"], False),
        ("c894a92892", 28, ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1"], False)]
    assert len(model["findings"]) == 14


def test_json_is_byte_stable() -> None:
    assert report.to_json(sweep_input()) == report.to_json(sweep_input())
    assert report.to_json(NightlyInput(nightly_data())) == api.report(NIGHTLY, "json")


def test_missing_optional_keys_still_report_in_every_format() -> None:
    bare = {"schema": "bisect-spec/nightly/1", "cells": [{"release": "0.5.23", "signatures": [{"id": "abc", "count": 2}]}]}
    for fmt in report_formats.FORMATS:
        assert report_formats.render(NightlyInput(bare), fmt)
    model = model_of(NightlyInput(bare))
    (cell,) = model["cells"]
    assert cell["status"] == "done" and cell["signatures"][0]["title"] == "failure"
    assert model["totals"]["regressions"] == 0 and model["matrix"][0]["rows"][0]["cross_release_key"] == "abc"


# -- Markdown -----------------------------------------------------------------------------------------------


def test_nightly_markdown_leads_with_changes_then_the_matrix() -> None:
    text = report.to_markdown(NightlyInput(nightly_data()))
    lines = text.splitlines()
    assert lines[0] == "# bisect-spec nightly 20261130-0215-ab12 · strategy quick"
    assert lines[2] == ("6 cells (5 done, 1 skipped) · 1400 configurations: 313 failed, 1087 passed · 4 distinct failures "
                        f"(6 per-release signatures) · against {BASELINE}: 1 regression, 1 fixed, 1 changed")
    assert text.index("## The night's verdict per failure") < text.index("## Release × failure") < text.index("## Cells")
    # the failure by its cross-release key (the id every nightly output gives it), not 0.5.23's signature e41f0c2d7a
    assert ("| `5b7a19e3c0` | **new (regression)** | 0.5.23/deepseek-v3/eagle3/h100x8 | ValueError in _resolve_page_size | "
            "`srt/arg_groups/speculative_hook.py::_resolve_page_size` | "
            "`--speculative-algorithm EAGLE3 --page-size 16` |") in lines
    assert "e41f0c2d7a" not in text and lines.count(f"{ID_LEGEND}.") == 1
    assert "| failure | 0.5.9 | 0.5.12 | 0.5.23 |" in lines
    assert "| ValueError in _resolve_page_size `5b7a19e3c0` | · | · | 9 **new** |" in lines
    assert "| RuntimeError in _handle_gpu_memory_settings `0c5d2e9f41` | · | 4 | fixed |" in lines
    assert "| *cell* | skipped | 216/280 pass | 220/280 pass |" in lines


def test_sweep_markdown_signature_table() -> None:
    lines = report.to_markdown(sweep_input()).splitlines()
    assert "| id | type | location | count | smallest reproducer | minimal reproducer (shrunk) |" in lines
    assert ("| `7b382a5c8e` | TypeError | `srt/arg_groups/speculative_hook.py::_handle_eagle_family` | 32 | "
            "`--speculative-algorithm NEXTN --speculative-num-steps -1` | "
            "`--speculative-algorithm NEXTN --speculative-num-steps 1` |") in lines
    assert lines[2] == "280 configurations: 60 failed, 220 passed · 2 distinct failures"


# -- JUnit --------------------------------------------------------------------------------------------------


def junit_tree(data: report.ReportInput) -> ET.Element:
    root = ET.fromstring(report.to_junit(data))  # well-formed, or this raises
    assert root.tag == "testsuites"
    for element in (*root.iter("testsuite"), root):  # counts add up at every level
        cases = list(element.iter("testcase"))
        assert int(element.get("tests", -1)) == len(cases)
        for tag, attribute in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            assert int(element.get(attribute, -1)) == sum(1 for c in cases if c.find(tag) is not None)
    assert int(root.get("tests", -1)) == sum(int(s.get("tests", 0)) for s in root.iter("testsuite"))
    return root


def test_nightly_junit_fails_only_on_the_regression() -> None:
    root = junit_tree(NightlyInput(nightly_data()))
    assert [root.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["14", "1", "0", "12"]
    assert len(root.findall("testsuite")) == 6
    (failure,) = root.iter("failure")
    assert failure.get("message") == (f"regression since {BASELINE}: ValueError in _resolve_page_size at "
                                      "srt/arg_groups/speculative_hook.py::_resolve_page_size")
    assert failure.get("type") == "ValueError"
    assert "smallest reproducer: --speculative-algorithm EAGLE3 --page-size 16" in (failure.text or "")
    still = [s for s in root.iter("skipped") if s.get("type") == "still-failing"]
    assert len(still) == 11 and all(s.get("message", "").startswith(f"still failing, known since {BASELINE}: ")
                                    for s in still)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    fixed = cases["fixed: RuntimeError in _handle_gpu_memory_settings [0c5d2e9f41]"]  # its cross-release key
    assert list(fixed) == []  # a passing testcase
    assert cases["cell skipped"].find("skipped") is not None
    assert {c.get("classname") for c in root.iter("testcase")} >= {"sglang-0_5_23.deepseek-v3/eagle3/h100x8"}


def test_a_first_nightlys_junit_reports_every_signature_as_found_as_its_exit_status_does() -> None:
    # one story: the first night has no baseline, so nothing regressed (exit 0, and the Markdown says every failure
    # is reported as found, none as new); JUnit fails on none of them, and an errored cell is still an error
    data = nightly_data()
    data.update(baseline=None, changes=[], regressions=0)
    data["cells"][1].update(status="error", reason="worker for SGLang 0.5.12 crashed: segfault (SIGSEGV)", signatures=[],
                            counts={}, evaluated=0)
    root = junit_tree(NightlyInput(data))
    assert [root.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["12", "0", "1", "11"]
    found = [s for s in root.iter("skipped") if s.get("type") == "known"]
    assert len(found) == 10 and all(s.get("message", "").startswith("known: found on the first night") for s in found)
    assert "every failure below is reported as found (known), none as new" in report.to_markdown(NightlyInput(data))
    (error,) = root.iter("error")
    assert error.get("message") == "worker for SGLang 0.5.12 crashed: segfault (SIGSEGV)"


def test_sweep_junit_one_failure_per_signature_with_reproducers() -> None:
    root = junit_tree(sweep_input())
    assert [root.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["2", "2", "0", "0"]
    failures = {f.get("type"): f for f in root.iter("failure")}
    body = failures["TypeError"].text or ""
    assert body.splitlines()[:3] == ["seen in 32 of 280 configurations",
                                     "smallest reproducer: --speculative-algorithm NEXTN --speculative-num-steps -1",
                                     "minimal reproducer (shrunk): --speculative-algorithm NEXTN --speculative-num-steps 1"]
    assert failures["AssertionError"].get("message") == ("AssertionError in _handle_eagle_family at "
                                                         "srt/arg_groups/speculative_hook.py::_handle_eagle_family")


def test_junit_cell_without_failures_is_one_passing_testcase() -> None:
    data = sweep_input()
    clean = SweepInput(data.run_id, data.meta, {**data.summary, "signatures": [], "counts": {"passed": 280}}, [])
    root = junit_tree(clean)
    assert [root.get(k) for k in ("tests", "failures", "skipped")] == ["1", "0", "0"]
    assert next(root.iter("testcase")).get("name") == "no failure signature (280 configurations)"
    page = report_formats.to_html(clean)
    assert "No failure signatures: every configuration resolved." in page
    assert "No results.jsonl in this run: no flag-pair maps." in page


# -- HTML (structure; tests/integration/test_report_browser.py renders it in a browser) -----------------------


class Elements(HTMLParser):
    """Start tags with their attributes, and text, of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def with_class(self, tag: str, cls: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


def parsed(page: str) -> Elements:
    parser = Elements()
    parser.feed(page)
    return parser


def assert_self_contained(page: str) -> None:
    # one inline script at most (the signature filters), nothing loaded from anywhere
    assert page.lower().count("<script") <= 1 and "<script src" not in page.lower()
    assert page.replace('xmlns="http://www.w3.org/2000/svg"', "").count("://") == 0  # no network, no file links


def test_nightly_html_heat_maps() -> None:
    page = report_formats.to_html(NightlyInput(nightly_data()))
    assert_self_contained(page)
    elements = parsed(page)
    assert len(elements.with_class("svg", "heatmap")) == 2 and len(elements.with_class("svg", "legend")) == 1
    assert len(elements.with_class("g", "regression")) == 1
    assert len(elements.with_class("g", "fixed")) == 1
    assert len(elements.with_class("g", "skipped")) == 3  # the skipped 0.5.9 rtx cell, one per row
    cells = elements.with_class("g", "cell")
    assert len(cells) == 3 * 3 + 3 * 3  # rows × releases, both facets
    assert all(svg.get("role") == "img" and svg.get("aria-label") for t, svg in elements.tags if t == "svg")
    text = "".join(elements.text)
    assert ("ValueError in _resolve_page_size [5b7a19e3c0] on SGLang 0.5.23: 9 of 280 configurations (3.2%) — NEW since the "
            "baseline (regression) at srt/arg_groups/speculative_hook.py::_resolve_page_size") in text
    assert "e41f0c2d7a" not in text  # 0.5.23's own signature id: the page names the failure by its key
    # both seed failures moved from server_args.py into the hook at 0.5.23, in both facets
    assert text.count("(moved here from srt/server_args.py::_handle_speculative_decoding)") == 4


def _without_draft_algorithm(data: SweepInput) -> SweepInput:
    import dataclasses

    target = {k: v for k, v in data.summary["target"].items() if k != "draft_algorithm"}
    return dataclasses.replace(data, summary={**data.summary, "target": target})


def test_sweep_html_pair_maps_cover_every_pair() -> None:
    data = _without_draft_algorithm(sweep_input())  # no draft algorithm: the maps are of every row
    page = report_formats.to_html(data)
    assert_self_contained(page)
    elements = parsed(page)
    flags = data.meta["space"]["flags"]
    assert len(flags) == 5
    assert len(elements.with_class("svg", "pairmap")) == 5 * 4 // 2
    assert len(elements.with_class("svg", "outcomes")) == 1
    text = "".join(elements.text)
    eagle_without_topk = [r for r in data.results
                          if "EAGLE" in r["config"] and "--speculative-eagle-topk" not in r["config"]]
    kinds = Counter(r["signature"]["id"] for r in eagle_without_topk if r["status"] != "passed")
    assert (len(eagle_without_topk), kinds) == (7, {"7b382a5c8e": 6, "c894a92892": 1})
    assert ("--speculative-algorithm EAGLE, --speculative-eagle-topk unset: 7 of 7 fail (100%); "
            "mostly TypeError in _handle_eagle_family [7b382a5c8e] (6)") in text


def test_with_a_drafts_algorithm_the_pair_maps_show_what_a_choice_does_to_that_configuration() -> None:
    data = sweep_input()
    assert data.summary["target"]["draft_algorithm"] == "EAGLE3"
    own = [r for r in data.results if "EAGLE3" in r["config"]]
    elements = parsed(report_formats.to_html(data))
    text = "".join(elements.text)
    assert f"Flag pairs, with your draft's algorithm (EAGLE3): what each choice does to your configuration ({len(own)} " \
        "configurations)" in text
    assert len(elements.with_class("svg", "pairmap")) == 4 * 3 // 2  # the algorithm no longer varies: 4 flags
    assert "--speculative-algorithm EAGLE," not in text  # the other algorithms' rows are not in the maps


def test_pair_grids_count_every_result_once_per_pair() -> None:
    data = sweep_input()
    grids = pair_grids(data)
    assert len(grids) == 10
    for grid in grids:
        assert sum(s["total"] for s in grid["cells"].values()) == 280
        assert sum(s["failed"] for s in grid["cells"].values()) == 60
        assert sum(sum(s["signatures"].values()) for s in grid["cells"].values()) == 60
    algorithm = next(g for g in grids if g["flags"] == ("--speculative-algorithm", "--speculative-eagle-topk"))
    assert algorithm["values"][0] == ["unset", "EAGLE3", "EAGLE", "NEXTN", "STANDALONE", "NGRAM"]


def synthetic_sweep(seed: int = 0) -> SweepInput:
    """600 random configurations of 8 flags (28 pairs): "ab" fails iff --f0 1 and --f1 2, else "c" iff --f5 3;
    --f7 has 30 values."""
    rng = random.Random(seed)
    domains: dict[str, list[list[str] | None]] = {f"--f{i}": [None, ["1"], ["2"], ["3"]] for i in range(7)}
    domains["--f7"] = [None, *[[str(v)] for v in range(29)]]
    results = []
    for _ in range(600):
        config = {flag: rng.choice(values) for flag, values in domains.items()}
        argv = [token for flag, value in config.items() if value is not None for token in (flag, *value)]
        if config["--f0"] == ["1"] and config["--f1"] == ["2"]:
            results.append({"config": argv, "status": "failed", "signature": {"id": "ab"}})
        elif config["--f5"] == ["3"]:
            results.append({"config": argv, "status": "failed", "signature": {"id": "c"}})
        else:
            results.append({"config": argv, "status": "passed"})
    signatures = [{"id": "c", "count": 1, "smallest": ["--f5", "3"]},
                  {"id": "ab", "count": 1, "smallest": ["--f0", "1", "--f1", "2", "--f3", "2"],
                   "shrink": {"minimal_argv": ["--f0", "1", "--f1", "2"]}}]
    return SweepInput("synthetic", {"space": {"flags": domains}}, {"signatures": signatures}, results)


def test_pair_grids_follow_the_signatures_when_not_every_pair_fits() -> None:
    grids = pair_grids(synthetic_sweep())
    assert len(grids) == MAX_PAIRS < grids[0]["of"] == 28
    assert (grids[0]["why"], grids[1]["why"]) == ("c", "ab")
    assert "--f5" in grids[0]["flags"]
    assert grids[1]["flags"] == ("--f0", "--f1")
    assert grids[1]["cells"][("1", "2")]["failed"] == grids[1]["cells"][("1", "2")]["total"] > 0
    assert all(g["why"] is None for g in grids[2:])
    folded = next(g for g in grids if "--f7" in g["flags"])
    f7_values = folded["values"][list(folded["flags"]).index("--f7")]
    assert len(f7_values) == MAX_VALUES and f7_values[-1] == "other"
    for grid in grids:
        assert sum(c["total"] for c in grid["cells"].values()) == 600


def test_omega_squared_corrects_for_many_groups() -> None:
    assert omega_squared([(50, 0), (50, 50)], 100, 50) > 0.95  # the grouping decides everything
    # 20 groups of 5 failing 2 or 3 times: what chance gives; uncorrected it would explain 4 % (η² = 1/25)
    assert omega_squared([(5, 2 + i % 2) for i in range(20)], 100, 50) < 0


def test_version_key_orders_numerically() -> None:
    releases = ["0.5.23", "0.5.9", "0.5.10.post1", "0.5.12", "0.5.10", "main"]
    assert sorted(releases, key=version_key) == ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.12", "0.5.23", "main"]


def test_report_api_reads_every_kind_of_target(tmp_path: Path) -> None:
    nightly_dir = tmp_path / "20261130-0215-ab12"
    nightly_dir.mkdir()
    (nightly_dir / "nightly.json").write_text(NIGHTLY.read_text())
    assert api.report(nightly_dir, "md") == api.report(nightly_dir / "nightly.json", "md") == api.report(NIGHTLY, "md")
    by_id = api.report(RUN_ID, "json", runs_dir=RESOURCES / "runs")
    assert by_id == api.report(RUN_DIR, "json") == api.report(RUN_DIR / "summary.json", "json")


@pytest.mark.parametrize("fmt", sorted(report_formats.FORMATS))
def test_every_format_of_a_copy_is_independent_of_input_mutation(fmt: str) -> None:
    data = nightly_data()
    before = copy.deepcopy(data)
    report_formats.render(NightlyInput(data), fmt)
    assert data == before  # rendering does not edit the caller's data


def test_a_nightly_the_nightly_command_wrote() -> None:
    """``nightly-tiny-real.json``: ``bisect-spec nightly`` on tests/resources/matrices/three-releases.toml
    (real 0.5.9/0.5.12/0.5.23 sweeps) against a baseline edited as tests/integration/test_nightly.py does:
    the type error removed from one cell, a RuntimeError added to another, the 0.5.23 h100 cell dropped
    (so that cell is compared with 0.5.12: its failures moved)."""
    data = NightlyInput(json.loads((RESOURCES / "nightly-tiny-real.json").read_text()))
    model = model_of(data)
    assert model["title"] == "nightly 20261130-185520-test-nightly-09dd · matrix test-nightly · strategy tiny-strategy"
    assert (model["totals"]["evaluated"], model["totals"]["regressions"], model["totals"]["fixed"],
            model["totals"]["changed"]) == (102, 1, 1, 2)
    root = junit_tree(data)
    assert [root.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["13", "1", "0", "11"]
    (failure,) = root.iter("failure")
    assert failure.get("message", "").startswith("regression since baseline-x: TypeError in _handle_speculative_decoding")
    lines = report.to_markdown(data).splitlines()
    moved = [line for line in lines if "| still failing, moved |" in line]
    assert len(moved) == 2
    assert all("| 0.5.23/deepseek-v3/eagle3/h100x8 vs 0.5.12/deepseek-v3/eagle3/h100x8 |" in line for line in moved)
    assert "| TypeError in _handle_eagle_family `d4b68cd739` | 2 | 2 **new** | 2 (moved) |" in lines
    page = report_formats.to_html(data)
    assert_self_contained(page)
    assert len(parsed(page).with_class("g", "regression")) == 1


def test_pending_cells_are_skipped_in_junit() -> None:
    data = nightly_data()
    data["cells"][0].update(status="pending", signatures=[], counts={}, evaluated=0)
    root = junit_tree(NightlyInput(data))
    case = next(c for c in root.iter("testcase") if c.get("name") == "cell pending")
    assert case.find("skipped") is not None and case.find("error") is None


def test_the_html_page_puts_speculative_failures_first_like_the_terminal() -> None:
    data = sweep_input()
    quant = {"id": "q0q0q0q0q0", "cross_release_key": "qk", "kind": "failed", "exc_type": "ValueError",
             "location": "srt/configs/model_config.py::_verify_quantization", "message": "Quantization method x ...",
             "count": 10_000, "smallest": ["--quantization", "fp8"], "speculative": ""}
    summary = {**data.summary, "signatures": [quant, *data.summary["signatures"]]}
    mixed = SweepInput(data.run_id, data.meta, summary, data.results)
    model = model_of(mixed)
    flags = [s["speculative"] for s in model["cells"][0]["signatures"]]
    assert flags == sorted(flags, reverse=True) and flags[-1] is False  # the most frequent, unrelated one comes last
    page = report_formats.to_html(mixed)
    first_speculative = model["cells"][0]["signatures"][0]["id"]
    assert page.index("Speculative decoding: ") < page.index(first_speculative) < page.index(
        "Other constraints met on the way: 1 failure") < page.index("q0q0q0q0q0")


def test_a_fix_that_changes_what_was_asked_says_so() -> None:
    from bisect_spec.report.text import next_step_text

    changing = {"edits": ["set --speculative-algorithm DFLASH"], "keeps_intent": False,
                "reason": "ranked lower: it changes --speculative-algorithm (you gave EAGLE3)"}
    text = next_step_text("validation", changing, "bisect-spec probe -- X", "bisect-spec shrink -- X")
    assert "nothing one or two edits away passes and keeps what you asked for" in text
    assert "it changes --speculative-algorithm (you gave EAGLE3)" in text
    assert "the nearest configuration that passes" not in text
    keeping = {**changing, "edits": ["add --speculative-draft-attention-backend trtllm_mha"], "keeps_intent": True}
    assert "the nearest configuration that passes (verified): add --speculative-draft" in next_step_text(
        "validation", keeping, "p", "s")


def test_the_cuda_graphs_line_shows_sglangs_sizes_and_the_shared_buffer_where_sized() -> None:
    sized = text.cuda_graphs_line({"capture_bs": [1, 2], "num_tokens_per_bs": 4, "shared_logits_rows": 8})
    assert sized == ("CUDA graphs SGLang would capture: 2 batch sizes (1, 2), 4 tokens per request, a shared logits "
                     "buffer of 8 rows; the capture itself not run")
    assert "shared logits" not in text.cuda_graphs_line({"capture_bs": [1], "num_tokens_per_bs": 1})  # up to 0.5.14
    assert "none captured" in text.cuda_graphs_line({"disabled": True, "shared_logits_rows": 8})


def test_a_sweeps_report_counts_configurations_per_stage_in_launch_order_in_every_format() -> None:
    stages = {"passed": {"draft_model": 5, "cuda_graph_sizes": 1}, "stopped": {"memory_pool": 2},
              "failed": {"check_server_args": 3, "attention_backend": 1, "a_later_tools_stage": 1}}
    plain = sweep_input()
    data = SweepInput(plain.run_id, plain.meta, {**plain.summary, "stages": stages}, plain.results)
    expected = [("check_server_args", False, 0, 0, 3), ("memory_pool", True, 0, 2, 0), ("cuda_graph_sizes", True, 1, 0, 0),
                ("attention_backend", True, 0, 0, 1), ("draft_model", True, 5, 0, 0), ("a_later_tools_stage", False, 0, 0, 1)]
    assert report.stage_rows(stages) == expected
    model = model_of(data)
    assert_valid(model, "report")
    assert model["cells"][0]["stages"] == stages
    lines = report.to_markdown(data).splitlines()
    assert lines.index("| `memory_pool` | yes | 0 | 2 | 0 |") < lines.index("| `draft_model` | yes | 5 | 0 | 0 |") \
        < lines.index("## Failure signatures")
    page = parsed(report_formats.to_html(data))
    assert "How far configurations got" in page.text
    assert page.text[page.text.index("memory_pool"):page.text.index("memory_pool") + 5] == ["memory_pool", "yes", "0", "2", "0"]
    # a run from before the per-stage counts: no table, and no empty one
    assert "How far configurations got" not in report_formats.to_html(plain)
    assert "## How far" not in report.to_markdown(plain)

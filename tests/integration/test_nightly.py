"""The nightly matrix on real SGLang 0.5.9, 0.5.12 and 0.5.23 × two hardware profiles.

One nightly is shared by the module (tiny strategy: the core EAGLE flags pairwise). The
comparison tests then edit a copy of it into a baseline with a known difference and run
the matrix again (answered from the cross-run cache, so every outcome is still one that
real SGLang produced) to check what the CLI reports and its exit code.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bisect_spec import api
from bisect_spec.cli.commands import main
from bisect_spec.report.night import ID_LEGEND
from bisect_spec.runtime import store
from tests.conftest import require_release
from tests.once import once_per_run
from tests.schemas import assert_valid

pytestmark = pytest.mark.sglang

MATRIX = Path(__file__).parents[1] / "resources" / "matrices" / "three-releases.toml"
ASSERT_KEY = "98339db6cb"  # the EAGLE num-steps assertion, in every release (cross-release key)
TYPE_ERROR_KEY = "e2e2a63301"  # '>' between <type> and <type> (operand types normalised)
HOOK = "srt/arg_groups/speculative_hook.py::_handle_eagle_family"
SERVER_ARGS = "srt/server_args.py::_handle_speculative_decoding"


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    for release in ("0.5.9", "0.5.12", "0.5.23"):
        require_release(release)
    return once_per_run(tmp_path_factory, "nightlies",
                        lambda out: api.nightly(MATRIX, out=out, baseline="none", install=False))


def keys(cell: dict[str, Any]) -> dict[str, str]:
    return {s["cross_release_key"]: s["location"] for s in cell["signatures"]}


def test_every_cell_is_a_real_sweep_with_both_seed_failures(first: dict[str, Any]) -> None:
    cells = {c["id"]: c for c in first["cells"]}
    assert sorted(cells) == sorted(f"{r}/deepseek-v3/eagle3/{h}" for r in ("0.5.9", "0.5.12", "0.5.23")
                                   for h in ("h100x8", "rtx-pro-6000x8"))
    for cell in cells.values():
        assert cell["status"] == "done" and cell["evaluated"] > 10
        assert (Path(first["path"]) / cell["run"] / "summary.json").is_file()
        found = keys(cell)
        assert ASSERT_KEY in found and TYPE_ERROR_KEY in found, cell["id"]
        where = HOOK if cell["release"] == "0.5.23" else SERVER_ARGS
        assert found[ASSERT_KEY] == where and found[TYPE_ERROR_KEY] == where
    assert first["baseline"] is None and first["changes"] == [] and first["regressions"] == 0
    assert (Path(first["path"]) / "nightly.md").read_text().startswith(f"# Nightly {first['id']}")
    assert_valid(first, "nightly")
    assert_valid(json.loads(api.report(first["path"], "json")), "report")


def edited_baseline(first: dict[str, Any], out: Path, edit: Any) -> str:
    baseline = out / ("baseline-" + first["id"])
    shutil.copytree(first["path"], baseline)
    data = json.loads((baseline / "nightly.json").read_text())
    edit(data)
    data["id"] = baseline.name
    (baseline / "nightly.json").write_text(json.dumps(data))
    return str(baseline.name)


def test_same_results_as_the_baseline_is_no_change_and_exit_0(first: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "n"
    out.mkdir()
    baseline = edited_baseline(first, out, lambda data: None)
    result = CliRunner().invoke(main, ["nightly", "--matrix", str(MATRIX), "--runs-dir", str(out), "--no-install"])
    assert result.exit_code == 0, result.output
    assert f"baseline {baseline}" in result.output and f"no change against {baseline}" in result.output


def test_a_new_signature_is_a_regression_and_exits_3(first: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "n"
    out.mkdir()

    def forget_the_type_error(data: dict[str, Any]) -> None:
        cell = next(c for c in data["cells"] if c["id"] == "0.5.12/deepseek-v3/eagle3/h100x8")
        cell["signatures"] = [s for s in cell["signatures"] if s["cross_release_key"] != TYPE_ERROR_KEY]

    edited_baseline(first, out, forget_the_type_error)
    result = CliRunner().invoke(main, ["nightly", "--matrix", str(MATRIX), "--runs-dir", str(out), "--no-install", "--json"])
    assert result.exit_code == 3, result.output
    data = json.loads(result.output)
    assert_valid(data, "nightly")
    assert data["regressions"] == 1
    (change,) = data["changes"]
    assert (change["cell"], change["change"], change["cross_release_key"]) == (
        "0.5.12/deepseek-v3/eagle3/h100x8", "new", TYPE_ERROR_KEY)
    assert change["after"]["location"] == SERVER_ARGS


def test_a_release_new_since_the_baseline_is_compared_with_the_release_before(first: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    out = tmp_path / "n"
    out.mkdir()

    def before_0_5_23(data: dict[str, Any]) -> None:
        data["cells"] = [c for c in data["cells"] if c["release"] != "0.5.23"]

    edited_baseline(first, out, before_0_5_23)
    result = CliRunner().invoke(main, ["nightly", "--matrix", str(MATRIX), "--runs-dir", str(out), "--no-install"])
    data = json.loads((sorted(p for p in out.iterdir() if not p.name.startswith("baseline"))[-1] / "nightly.json")
                      .read_text())
    # both seed failures only moved; at the deployment shape (--tp-size 8) EAGLE3 without a draft path gets past
    # 0.5.12's resolution on 0.5.23 and fails where SGLang builds the target's own class as the draft
    # (sglang#36528): a regression on both boxes; and on the 96 GB box, where 0.5.12's sizing left DeepSeek-V3's
    # pool room, 0.5.23's sizing charges the EAGLE3 draft's weights too (sglang#23862) and refuses in its own words
    new = {(c["cell"], c["title"].split(":")[0]) for c in data["changes"] if c["change"] == "new"}
    assert new == {*((f"0.5.23/deepseek-v3/eagle3/{hardware}", "AttributeError in init_lm_head")
                     for hardware in ("h100x8", "rtx-pro-6000x8")),
                   ("0.5.23/deepseek-v3/eagle3/rtx-pro-6000x8", "ValueError in _profile_available_bytes")}, result.output
    assert result.exit_code == 3, result.output
    moved = {(c["cell"], c["against"], c["cross_release_key"]) for c in data["changes"] if c["change"] == "location-moved"}
    for hardware in ("h100x8", "rtx-pro-6000x8"):
        for key in (ASSERT_KEY, TYPE_ERROR_KEY):
            assert (f"0.5.23/deepseek-v3/eagle3/{hardware}", f"0.5.12/deepseek-v3/eagle3/{hardware}", key) in moved
    assert "moved" in result.output and f"{SERVER_ARGS} → {HOOK}" in result.output


def test_an_interrupted_nightly_resumes_its_unfinished_cells(first: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "n"
    shutil.copytree(Path(first["path"]).parent, out)
    path = out / first["id"]
    data = json.loads((path / "nightly.json").read_text())
    cell = data["cells"][3]
    run_dir = path / cell["run"]
    (run_dir / "summary.json").unlink()  # the cell's sweep was killed before it finished
    journal = (store.stored_bytes(run_dir / "journal.jsonl") or b"").decode().splitlines()  # sealed: gzipped
    (run_dir / "journal.jsonl.gz").unlink()  # a killed run was never sealed: its journal is the plain file
    (run_dir / "journal.jsonl").write_text("\n".join(journal[: len(journal) // 2]) + "\n")
    expected = cell["signatures"]
    cell.update(status="pending", signatures=[], run=None)
    data["finished"] = None
    (path / "nightly.json").write_text(json.dumps(data))
    resumed = api.nightly(MATRIX, out=out, resume=first["id"], baseline="none", install=False)
    again = resumed["cells"][3]
    assert again["status"] == "done" and again["signatures"] == expected
    assert again["run"] == cell["run"] or again["run"].startswith(f"runs/{run_dir.parent.name}/")
    assert len(store.read_journal(run_dir)) == len(journal)


HEX_ID = re.compile(r"\b[0-9a-f]{10}\b")


def ids_in(text: str, every_id: set[str]) -> set[str]:
    """The failure ids (cross-release keys or per-release signature ids) an output names."""
    return set(HEX_ID.findall(text)) & every_id


def check_one_story(path: Path, exit_code: int, terminal: str, earlier: dict[str, Any] | None) -> dict[str, Any]:
    """Exit status, JUnit, nightly.md, the Markdown/HTML/JSON reports and the terminal tell one story of the night:
    the same failures, each by its cross-release key, and the same ones new."""
    data: dict[str, Any] = json.loads((path / "nightly.json").read_text())
    assert_valid(data, "nightly")
    sigs = [s for c in data["cells"] for s in c["signatures"]]
    tonight = {s["cross_release_key"] for s in sigs}
    gone = {c["cross_release_key"] for c in data["changes"] if c["change"] in ("vanished", "not-checked")}
    keys = tonight | gone
    per_release = {s["id"] for s in sigs} | {c["signature"] for c in data["changes"]}
    assert per_release - keys, "the per-release ids differ from the keys: else this test could not tell them apart"
    # each id is a cross-release key of the night's signatures, or of the signatures of the night it was compared with
    before = {s["cross_release_key"] for c in (earlier or {}).get("cells", []) for s in c["signatures"]}
    assert keys <= tonight | before
    new = {(c["cell"], c["cross_release_key"]) for c in data["changes"] if c["change"] == "new"}
    assert exit_code == (3 if new else 0), terminal
    assert data["regressions"] == len(new)
    assert {(f["cell"], f["cross_release_key"]) for f in data["failures"] if f["verdict"] == "new"} == new
    every_id = keys | per_release

    root = ET.fromstring(api.report(path, "junit"))
    counts = {k: int(root.get(k, -1)) for k in ("failures", "errors", "skipped")}
    judged = {(f["cell"], f["cross_release_key"]): f["verdict"] for f in data["failures"]}
    skipped_cells = sum(1 for c in data["cells"] if c["status"] != "done")
    assert counts["failures"] + counts["errors"] == len(new)
    assert counts["skipped"] == skipped_cells + sum(1 for v in judged.values() if v in ("still failing", "known"))
    names = [case.get("name", "") for case in root.iter("testcase")]
    assert ids_in("\n".join(names), every_id) == keys
    failing = {(suite.get("name"), HEX_ID.findall(case.get("name", ""))[0]) for suite in root.iter("testsuite")
               for case in suite.iter("testcase") if case.find("failure") is not None or case.find("error") is not None}
    assert failing == new
    messages = [e.get("message", "") for e in root.iter() if e.tag in ("failure", "error", "skipped")]
    assert not ids_in("\n".join(messages), per_release - keys)

    markdown = (path / "nightly.md").read_text()
    report_md = api.report(path, "md")
    html = api.report(path, "html")
    report_json = json.loads(api.report(path, "json"))
    for name, text in (("terminal", terminal), ("nightly.md", markdown), ("report md", report_md), ("html", html)):
        assert ids_in(text, every_id) == keys, name
        assert any(legend in text for legend in (ID_LEGEND, html_escape(ID_LEGEND), html_escape(ID_LEGEND, quote=False))), name
    for name, text in (("terminal", terminal), ("nightly.md", markdown), ("report md", report_md)):
        said_new = {HEX_ID.findall(line)[0] for line in text.splitlines() if "new (regression)" in line
                    and HEX_ID.search(line)}
        assert said_new == {key for _, key in new}, name
    assert html.count('class="cell regression"') == len(new)
    assert {(f["cell"], f["cross_release_key"], f["verdict"]) for f in report_json["failures"]} == {
        (cell, key, verdict) for (cell, key), verdict in judged.items()}
    assert report_json["totals"]["regressions"] == len(new)
    return data


def test_one_story_on_the_first_night_and_the_next(first: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "n"
    command = ["nightly", "--matrix", str(MATRIX), "--runs-dir", str(out), "--no-install"]
    night_1 = CliRunner().invoke(main, [*command, "--baseline", "none"])
    (path_1,) = out.iterdir()
    data_1 = check_one_story(path_1, night_1.exit_code, night_1.stdout, None)
    assert data_1["baseline"] is None and {f["verdict"] for f in data_1["failures"]} == {"known"}
    pairs = sum(len({s["cross_release_key"] for s in c["signatures"]}) for c in data_1["cells"])
    assert f"0 new (regressions) · 0 still failing · 0 fixed · {pairs} known" in night_1.stdout

    # the next night finds the type error where the first did not have it and misses a failure the first had
    cell_id = "0.5.12/deepseek-v3/eagle3/h100x8"
    cell = next(c for c in data_1["cells"] if c["id"] == cell_id)
    lost = next(s for s in cell["signatures"] if s["cross_release_key"] == TYPE_ERROR_KEY)
    cell["signatures"].remove(lost)
    other = next(c for c in data_1["cells"] if c["id"] == "0.5.23/deepseek-v3/eagle3/rtx-pro-6000x8")
    other["signatures"].append(lost | {"id": "0123456789", "cross_release_key": "abcdef0123", "title": "Gone tonight"})
    (path_1 / "nightly.json").write_text(json.dumps(data_1))
    night_2 = CliRunner().invoke(main, command)
    (path_2,) = set(out.iterdir()) - {path_1}
    data_2 = check_one_story(path_2, night_2.exit_code, night_2.stdout, data_1)
    assert night_2.exit_code == 3 and data_2["baseline"] == path_1.name
    verdicts = {(f["cell"], f["cross_release_key"]): f["verdict"] for f in data_2["failures"]}
    assert verdicts.pop((cell_id, TYPE_ERROR_KEY)) == "new"
    assert verdicts.pop(("0.5.23/deepseek-v3/eagle3/rtx-pro-6000x8", "abcdef0123")) == "fixed"
    assert set(verdicts.values()) == {"still failing"} and len(verdicts) == pairs - 1

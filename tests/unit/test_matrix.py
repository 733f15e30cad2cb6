"""Matrix files: cells from the product, and every error as FILE:LINE: what."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisect_spec.errors import UsageError
from bisect_spec.workflows.matrix import load_matrix
from bisect_spec.workflows.nightly import compare

GOOD = """name = "n"
strategy = "quick"
releases = ["0.5.9", "0.5.23"]
models = ["deepseek-v3"]
drafts = ["eagle3", "none"]
hardware = ["h100x8", "rtx-pro-6000"]

[[exclude]]
release = "0.5.9"
draft = "none"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


def test_cells_are_the_product_minus_exclusions(tmp_path: Path) -> None:
    matrix = load_matrix(write(tmp_path, GOOD))
    assert [c.id for c in matrix.cells] == [
        "0.5.9/deepseek-v3/eagle3/h100x8", "0.5.9/deepseek-v3/eagle3/rtx-pro-6000x8",
        "0.5.23/deepseek-v3/eagle3/h100x8", "0.5.23/deepseek-v3/eagle3/rtx-pro-6000x8",
        "0.5.23/deepseek-v3/none/h100x8", "0.5.23/deepseek-v3/none/rtx-pro-6000x8"]


def test_the_example_matrix_parses() -> None:
    matrix = load_matrix(Path(__file__).parents[2] / "examples" / "nightly-matrix.toml")
    assert len(matrix.cells) == 6 and matrix.strategy == "quick"


@pytest.mark.parametrize(("text", "expected"), [
    (GOOD.replace('models = ["deepseek-v3"]', 'models = ["deepseek-v3", "kimi-k9"]'),
     "m.toml:4: unknown model 'kimi-k9' in models (closest: kimi-k2, kimi-k2.6); valid: deepseek-v3, deepseek-v3.2, "
     "gpt-oss-120b, gpt-oss-20b, kimi-k2, kimi-k2.5, kimi-k2.6, llama-3.1-8b, llama-3.3-70b, qwen3-235b-a22b, "
     "qwen3-32b, qwen3-8b"),
    (GOOD.replace('hardware = ["h100x8", "rtx-pro-6000"]', 'hardware = ["h100x8",\n  "h300x4"]'),
     "m.toml:7: unknown hardware profile 'h300' in hardware (closest: h200, h100); valid: a100, b200, h100, h200, "
     "rtx-pro-6000, none"),
    (GOOD.replace('drafts = ["eagle3", "none"]', 'drafts = ["eagel3"]'),
     "m.toml:5: unknown draft 'eagel3' in drafts (closest: eagle3, eagle); valid: eagle, eagle3, nextn, ngram, "
     "specforge-eagle3-deepseek-v3, specforge-eagle3-kimi-k2, specforge-eagle3-llama-3.3-70b, "
     "specforge-eagle3-qwen3-235b-a22b, specforge-eagle3-qwen3-32b, standalone, none"),
    (GOOD.replace('strategy = "quick"', 'strategy = quick'),
     "m.toml:2: not valid TOML: Invalid value"),
    (GOOD.replace('name = "n"', 'name = "n"\nseeds = 3'),
     "m.toml:2: unknown key 'seeds' (did you mean seed?); keys: budget, drafts, exclude, hardware, jobs, models, name, "
     "releases, repo, seed, shrink, strategy"),
    (GOOD.replace('strategy = "quick"', 'strategy = "quick"\nseed = "zero"'), "m.toml:3: 'seed' must be int, not str 'zero'"),
    (GOOD.replace('releases = ["0.5.9", "0.5.23"]', 'releases = []'),
     "m.toml:3: 'releases' is empty: the matrix would have no cells"),
    (GOOD.replace('releases = ["0.5.9", "0.5.23"]', 'releases = ["0.5.9", "banana"]'),
     "m.toml:3: 'banana' is not an SGLang release: use a version such as 0.5.23, or 'current'"),
    (GOOD.replace('releases = ["0.5.9", "0.5.23"]', 'releases = ["0.5.9..9.9.9"]'),
     "m.toml:3: '9.9.9' in '0.5.9..9.9.9' is not a known SGLang release; known: "),
    (GOOD.replace('releases = ["0.5.9", "0.5.23"]\n', ''),
     "m.toml:1: 'releases' is missing: list at least one, e.g. releases = [...]"),
    (GOOD.replace('draft = "none"', 'draft = "none"\ncolour = "red"'),
     "m.toml:11: unknown key 'colour' in [[exclude]]; keys: draft, hardware, model, release"),
    (GOOD.replace('release = "0.5.9"\n', '').replace('draft = "none"', 'model = "deepseek-v3"'),
     "m.toml:8: every cell is excluded: the matrix is empty"),
])
def test_matrix_errors_name_file_line_and_what(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_matrix(write(tmp_path, text))
    message = str(caught.value).replace(str(tmp_path) + "/", "")
    assert message.startswith(expected), message


def test_missing_matrix_file_names_the_example(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"matrix file .*nope.toml does not exist; see examples/nightly-matrix.toml"):
        load_matrix(tmp_path / "nope.toml")


def sig(key: str, location: str = "a.py::f", message: str = "") -> dict[str, object]:
    return {"id": key + "-" + location, "cross_release_key": key, "location": location, "message": message, "title": key}


def cell(release: str, *sigs: dict[str, object], status: str = "done") -> dict[str, object]:
    return {"id": f"{release}/m/d/h", "release": release, "model": "m", "draft": "d", "hardware": "h", "status": status,
            "signatures": list(sigs)}


def test_compare_same_cells_new_vanished_moved_reworded() -> None:
    before = {"cells": [cell("1.0", sig("A"), sig("B"), sig("C"), sig("D", message="x 12"))]}
    after = {"cells": [cell("1.0", sig("A"), sig("C", "b.py::g"), sig("D", message="y"), sig("E"))]}
    kinds = {(c["change"], c["cross_release_key"]) for c in compare(before, after)}
    assert kinds == {("new", "E"), ("vanished", "B"), ("location-moved", "C"), ("message-changed", "D")}


def test_compare_numbers_in_messages_are_not_a_change() -> None:
    before = {"cells": [cell("1.0", sig("D", message="got 12 tokens"))]}
    after = {"cells": [cell("1.0", sig("D", message="got 16 tokens"))]}
    assert compare(before, after) == []


def test_a_new_release_is_compared_with_the_previous_release() -> None:
    before = {"cells": [cell("0.5.9", sig("A"))]}
    after = {"cells": [cell("0.5.9", sig("A")), cell("0.5.10", sig("A", "b.py::g"), sig("N"))]}
    changes = compare(before, after)
    assert [(c["cell"], c["against"], c["change"], c["cross_release_key"]) for c in changes] == [
        ("0.5.10/m/d/h", "0.5.9/m/d/h", "new", "N"), ("0.5.10/m/d/h", "0.5.9/m/d/h", "location-moved", "A")]


def test_no_baseline_no_changes_and_skipped_cells_are_not_compared() -> None:
    assert compare(None, {"cells": [cell("1.0", sig("A"))]}) == []
    before = {"cells": [cell("1.0", sig("A"))]}
    assert compare(before, {"cells": [cell("1.0", status="skipped")]}) == []


def test_a_failure_of_a_stage_the_newer_release_does_not_run_is_not_checked_there_and_what_it_hid_is_masked() -> None:
    # 0.5.13 sizes the memory pool (stage memory_pool), 0.5.14 does not yet: DeepSeek-V3 on 8xH100 fails there on
    # 0.5.13; on 0.5.14 the same configurations reach the draft's embedding sharing and fail there
    memory = {**sig("M", "pool.py::init_memory_pool"), "stage": "memory_pool"}
    embed = {**sig("E", "eagle_worker.py::init_lm_head"), "stage": "draft_model"}
    parse = {**sig("P", "server_args.py::check"), "stage": "check_server_args"}
    older = cell("0.5.13", memory)
    stages_run = ["parse", "check_server_args", "model_runner", "draft_model"]
    newer = {**cell("0.5.14", embed, parse), "stages_run": stages_run}
    changes = compare({"cells": [older]}, {"cells": [older, newer]})
    kinds = {(c["change"], c["cross_release_key"]) for c in changes}
    # the parse failure comes before the pool: not hidden by it, a regression as before
    assert kinds == {("not-checked", "M"), ("masked", "E"), ("new", "P")}
    # a newer cell that runs the stage (or a record from before stages were recorded) compares as it always did
    for covering in ({**newer, "stages_run": [*stages_run, "memory_pool"]}, cell("0.5.14", embed, parse)):
        kinds = {(c["change"], c["cross_release_key"]) for c in compare({"cells": [older]}, {"cells": [older, covering]})}
        assert kinds == {("vanished", "M"), ("new", "E"), ("new", "P")}

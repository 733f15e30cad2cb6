"""The night's verdict per failure (report/night.py): the one decision the exit status and every output read."""

from __future__ import annotations

from typing import Any

from bisect_spec.report.night import by_failure, failed_the_night, night_line, night_verdicts
from bisect_spec.workflows.nightly import compare, compared_with
from tests.unit.test_matrix import cell, sig


def night(before: dict[str, Any] | None, *cells: dict[str, Any]) -> dict[str, Any]:
    """What run_nightly records: the changes, and what each cell was compared with."""
    data: dict[str, Any] = {"baseline": "b" if before is not None else None, "cells": list(cells)}
    data["changes"] = compare(before, data)
    pairs = compared_with(before, data)
    for record in data["cells"]:
        record["against"] = pairs[record["id"]]["id"] if record["id"] in pairs else None
    return data


def verdicts(data: dict[str, Any]) -> dict[tuple[str, str], tuple[str, str | None]]:
    return {(v["cell"], v["cross_release_key"]): (v["verdict"], v["why"]) for v in night_verdicts(data)}


def test_the_first_night_knows_every_failure_and_fails_on_none() -> None:
    data = night(None, cell("1.0", sig("A"), sig("B")))
    assert verdicts(data) == {("1.0/m/d/h", "A"): ("known", "first-night"), ("1.0/m/d/h", "B"): ("known", "first-night")}
    assert not failed_the_night(night_verdicts(data))
    assert night_line(night_verdicts(data)) == "0 new (regressions) · 0 still failing · 0 fixed · 2 known"


def test_new_still_failing_fixed_and_two_signatures_of_one_failure_are_one() -> None:
    before = {"cells": [cell("1.0", sig("A"), sig("B"))]}
    # A twice: two per-release signatures (two locations) of one cross-release key, one failure
    data = night(before, cell("1.0", sig("A"), sig("A", "b.py::g"), sig("N")))
    assert verdicts(data) == {("1.0/m/d/h", "A"): ("still failing", None), ("1.0/m/d/h", "N"): ("new", None),
                              ("1.0/m/d/h", "B"): ("fixed", None)}
    assert failed_the_night(night_verdicts(data))
    assert [(r["id"], r["verdict"]) for r in by_failure(night_verdicts(data))] == [
        ("N", "new"), ("B", "fixed"), ("A", "still failing")]


def test_a_cell_with_nothing_to_compare_with_is_known_not_still_failing() -> None:
    before = {"cells": [cell("1.0", sig("A"))]}
    other = {**cell("1.0", sig("A")), "id": "1.0/m2/d/h", "model": "m2"}  # a model added to the matrix since
    data = night(before, cell("1.0", sig("A")), other)
    assert verdicts(data) == {("1.0/m/d/h", "A"): ("still failing", None), ("1.0/m2/d/h", "A"): ("known", None)}
    assert not failed_the_night(night_verdicts(data))


def test_masked_and_not_checked_are_known() -> None:
    memory = {**sig("M", "pool.py::init_memory_pool"), "stage": "memory_pool"}
    embed = {**sig("E", "eagle_worker.py::init_lm_head"), "stage": "draft_model"}
    older = cell("0.5.13", memory)
    newer = {**cell("0.5.14", embed), "stages_run": ["parse", "draft_model"]}
    data = night({"cells": [older]}, older, newer)
    assert verdicts(data) == {("0.5.13/m/d/h", "M"): ("still failing", None), ("0.5.14/m/d/h", "E"): ("known", "masked"),
                              ("0.5.14/m/d/h", "M"): ("known", "not-checked")}
    assert not failed_the_night(night_verdicts(data))

"""bench_recall's scoring on synthetic outcomes: failing statements, "speculative", recall, goals, peeling."""

from __future__ import annotations

import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.search.space import ABSENT, FlagSpace, FlagSpec
from tests.conftest import load_script


def load_bench() -> types.ModuleType:
    return load_script("bench_recall")


bench = load_bench()


def failed(file: str, line: int, function: str, *, message: str = "m", sig: str = "s",
           first: int | None = None) -> dict[str, Any]:
    frame = {"file": file, "line": line, "function": function, "statement_lines": [first or line, line]}
    return {"status": "failed", "frame": frame, "exception": {"type": "AssertionError", "message": message},
            "signature": {"id": sig}}


HOOK = ("srt/arg_groups/speculative_hook.py", 1162, "_handle_eagle_family")
ARGS_SPEC = ("srt/server_args.py", 900, "_handle_speculative_decoding")
ARGS_OTHER = ("srt/server_args.py", 120, "_handle_page_size")
MODEL = ("srt/configs/model_config.py", 40, "_verify_quantization")


def test_statement_is_file_first_line_and_function_not_message() -> None:
    one = bench.statement_of(failed(*HOOK, message="a", first=1160))
    other = bench.statement_of(failed(*HOOK, message="b", first=1160))
    assert one == other == bench.Statement("srt/arg_groups/speculative_hook.py", 1160, "_handle_eagle_family")
    assert bench.statement_of({"status": "passed"}) is None
    assert bench.statement_of({"status": "crashed", "frame": {}}) is None


def test_speculative_is_the_hook_file_or_a_speculative_function() -> None:
    speculative = [bench.Statement(*HOOK[:2], "anything"), bench.Statement("srt/speculative/eagle_utils.py", 3, "f"),
                   bench.Statement(*ARGS_SPEC), bench.Statement("srt/server_args.py", 5, "_handle_ngram")]
    assert all(bench.is_speculative(s) for s in speculative)
    assert not bench.is_speculative(bench.Statement(*ARGS_OTHER))
    assert not bench.is_speculative(bench.Statement(*MODEL))


def test_collect_keeps_the_simplest_example_and_counts_parts() -> None:
    big = Config.from_argv(["--page-size", "16", "--tp-size", "8"])
    small = Config.from_argv(["--page-size", "16"])
    found = bench.collect({"sample": [(big, failed(*ARGS_OTHER)), (Config(), {"status": "passed"})],
                           "core grid": [(small, failed(*ARGS_OTHER, message="simpler"))]})
    assert list(found) == [bench.Statement(*ARGS_OTHER)]
    seen = found[bench.Statement(*ARGS_OTHER)]
    assert seen.example == small and seen.message == "simpler"
    assert seen.parts == {"sample": 1, "core grid": 1}


def test_score_splits_speculative_and_lists_missed_speculative_first() -> None:
    records = [failed(*HOOK), failed(*ARGS_SPEC), failed(*ARGS_OTHER), failed(*MODEL)]
    oracle = bench.collect({"sample": [(Config.from_argv([f"--x{i}"]), r) for i, r in enumerate(records)]})
    extra = bench.Statement("srt/server_args.py", 7, "_handle_other")
    scored = bench.score(oracle, {bench.Statement(*HOOK), bench.Statement(*ARGS_OTHER), extra})
    assert scored["all"] == {"oracle": 4, "found": 2, "recall": 0.5}
    assert scored["speculative"] == {"oracle": 2, "found": 1, "recall": 0.5}
    assert [m["statement"] for m in scored["missed"]] == [str(bench.Statement(*ARGS_SPEC)), str(bench.Statement(*MODEL))]
    assert scored["missed"][0]["speculative"] and not scored["missed"][1]["speculative"]
    assert scored["found_only_by_plan"] == [str(extra)]
    verdict = bench.goals(scored, evaluations=100, baseline=60)
    assert verdict == {"speculative": False, "all": False, "evaluations": True, "met": False, "baseline_evaluations": 60}
    full = bench.score(oracle, set(oracle))
    assert bench.goals(full, evaluations=121, baseline=60)["evaluations"] is False
    assert bench.goals(full, evaluations=120, baseline=60)["met"] is True


def test_peel_removes_known_reproducers_until_pass_or_new_failure() -> None:
    # --a 1 fails with "A" (minimal: --a 1); without it, --b 1 --c 1 fails with "B" (minimal: --b 1);
    # without that, --c 1 fails with the unknown "C": a new way, the row stops there
    minimal = {"A": Config.from_argv(["--a", "1"]), "B": Config.from_argv(["--b", "1"])}

    def verdict(config: Config) -> Mapping[str, Any]:
        if config.get("--a"):
            return failed("x.py", 1, "f", sig="A")
        if config.get("--b"):
            return failed("x.py", 2, "g", sig="B")
        if config.get("--c"):
            return failed("y.py", 3, "h", sig="C")
        return {"status": "passed"}

    asked: list[list[Config]] = []

    def evaluate(configs: list[Config]) -> dict[Config, Mapping[str, Any]]:
        asked.append(configs)
        return {c: verdict(c) for c in configs}

    row = Config.from_argv(["--a", "1", "--b", "1", "--c", "1"])
    passing = Config.from_argv(["--a", "1", "--d", "1"])
    peeled = dict(bench.peel_oracle([(row, "A"), (passing, "A"), (Config.from_argv(["--z", "1"]), "Z")], minimal, evaluate))
    assert peeled[Config.from_argv(["--b", "1", "--c", "1"])]["signature"]["id"] == "B"
    assert peeled[Config.from_argv(["--c", "1"])]["signature"]["id"] == "C"
    assert peeled[Config.from_argv(["--d", "1"])] == {"status": "passed"}
    assert len(asked) == 2  # the passing row and the new failure end their rows; nothing is evaluated twice


def test_uniform_sample_is_distinct_and_deterministic_and_grid_is_complete() -> None:
    space = FlagSpace((FlagSpec("--a", (ABSENT, ("1",), ("2",))), FlagSpec("--b", (ABSENT, ())),
                       FlagSpec("--c", (ABSENT, ("x",), ("y",), ("z",)))), core=("--a", "--b"))
    sample = bench.uniform_sample(space, 20, seed=3)
    assert len(sample) == len(set(sample)) == 20
    assert sample == bench.uniform_sample(space, 20, seed=3)
    assert len(bench.uniform_sample(space, 100, seed=0)) == space.grid_size() == 24
    grid = bench.core_grid(space)
    assert len(set(grid)) == 6 and all(c.get("--c") is None for c in grid)


def test_score_against_scores_each_run_on_one_stored_oracle(tmp_path: Path) -> None:
    import json

    stored = {"oracle": {"statements_list": [
        {"file": f, "line": n, "function": fn} for f, n, fn in (HOOK, ARGS_OTHER, MODEL)]}}
    runs = []
    for name, found in (("a", [HOOK]), ("b", [HOOK, ARGS_OTHER, ARGS_SPEC])):
        run = tmp_path / name
        run.mkdir()
        rows = [{"config": ["--x", str(i)], **failed(*where, sig=str(i))} for i, where in enumerate(found)]
        (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "summary.json").write_text(json.dumps({"signatures": []}))
        (run / "bench_recall_cost.json").write_text(json.dumps({"evaluations": 10 * len(found), "seconds": 1.0}))
        runs.append(run)
    a, b = bench.score_against(stored, runs)
    assert (a["all"], a["speculative"], a["oracle"], a["oracle_speculative"]) == (1, 1, 3, 1)
    assert (b["all"], b["speculative"], b["found_outside_oracle"], b["evaluations"]) == (2, 1, 1, 30)
    assert b["missed"] == [str(bench.Statement(*MODEL[:2], MODEL[2]))]

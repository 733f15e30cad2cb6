"""Sweeps on real SGLang 0.5.23 (llama-3.1-8b + eagle3, one simulated H100), strategy quick.

One reference sweep is shared by the module; each other sweep is compared with it: a rerun
with the same seed, a run killed with SIGKILL and resumed, and runs answered from the
cross-run cache. Every evaluation here is real: ``use_cache=False`` (``--no-cache``)
wherever a result must come from SGLang rather than from an earlier run.

The target is the sweep's machinery's, whatever the model: llama-3.1-8b builds on meta in ~0.14 s where
Kimi-K2.6 at its deployment shape takes 0.6-1 s, and its quick sweep has both seed failures among six signatures
in 280 rows (Kimi-K2.6's deployment shape is test_branch_rows').
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from bisect_spec import api
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments, store
from bisect_spec.runtime.session import Session
from bisect_spec.search.plan import covering_plan, load_strategy
from tests.conftest import require_release, shared_session
from tests.once import once_per_run

pytestmark = pytest.mark.sglang

RELEASE = "0.5.23"
SPEC = api.TargetSpec(release=RELEASE, model="llama-3.1-8b", draft="eagle3", hardware="h100", gpus=1)
SESSION: dict[str, Any] = {"model": "llama-3.1-8b", "draft": "eagle3", "hardware": "h100", "gpus": 1}  # SPEC's shared session
HOOK = "srt/arg_groups/speculative_hook.py::_handle_eagle_family"
ASSERT_STATEMENT = "assert _.speculative_eagle_topk is None and _.speculative_num_draft_tokens is None"
TYPE_ERROR = "'>' not supported between instances of <type> and <type>"  # the seed's, operand types normalised
BISECT_SPEC = Path(sys.executable).parent / "bisect-spec"
#: as ``quick_sweep`` does through the API (which does not shrink unless asked)
#: the same ask as SPEC: the draft named, as SPEC names it (a named draft gets "starts on your box")
CLI_SWEEP = ["sweep", "--sglang", RELEASE, "--model", "llama-3.1-8b", "--draft", "eagle3", "--strategy", "quick",
             "--hardware", "h100", "--gpus", "1", "--no-cache", "--jobs", "2", "--no-shrink"]


def quick_sweep(runs_dir: Path, *, use_cache: bool = False) -> api.SweepResult:
    return api.sweep(SPEC, strategy="quick", jobs=2, runs_dir=runs_dir, use_cache=use_cache)


def results(run_path: Path) -> list[dict[str, Any]]:
    return store.read_results(run_path, "") or []


def result_keys(run_path: Path) -> list[str]:
    return [Config.from_argv(r["config"]).key() for r in results(run_path)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> api.SweepResult:
    """The uninterrupted quick sweep every other run is compared with."""
    require_release(RELEASE)
    return once_per_run(tmp_path_factory, "sweep-reference", quick_sweep)


def test_quick_sweep_finds_both_seed_failures(reference: api.SweepResult) -> None:
    summary = reference.summary
    # the seed failures in the speculative hook (another TypeError, the launcher's draft-token slots, is found too)
    in_hook = [s for s in summary["signatures"] if s["location"] == HOOK]
    assertion = next(s for s in in_hook if s["exc_type"] == "AssertionError" and s["statement"] == ASSERT_STATEMENT)
    type_error = next(s for s in in_hook if s["exc_type"] == "TypeError" and s["message"] == TYPE_ERROR)
    assert assertion["location"] == HOOK and assertion["statement"] == ASSERT_STATEMENT
    assert assertion["example_frame"]["file"] == "srt/arg_groups/speculative_hook.py"
    assert assertion["example_frame"]["function"] == "_handle_eagle_family"
    assert type_error["location"] == HOOK and type_error["message"] == TYPE_ERROR
    assert summary["strategy"] == "quick" and summary["seed"] == 0
    records = results(reference.run_path)
    assert summary["evaluated"] == len(records) == len(reference.outcomes)
    assert sum(summary["counts"].values()) == len(records)
    assert summary["counts"]["failed"] == sum(s["count"] for s in summary["signatures"])
    meta = json.loads((reference.run_path / "run.json").read_text())
    assert len(records) >= meta["plan_size"] > 100
    assert (reference.run_path / "summary.md").is_file() and (reference.run_path / "timing.json").is_file()


def test_the_smallest_configs_reproduce_their_signatures(reference: api.SweepResult) -> None:
    session = shared_session(RELEASE, **SESSION)
    for entry in reference.summary["signatures"]:
        outcome = session.evaluate(Config.from_argv(entry["smallest"]))
        assert outcome.signature is not None and outcome.signature.id == entry["id"], (entry["smallest"], outcome.headline)


def test_results_follow_the_plan_and_the_same_seed_gives_identical_files(reference: api.SweepResult,
                                                                         tmp_path: Path) -> None:
    again = quick_sweep(tmp_path)
    assert again.run_id != reference.run_id
    for name in ("run.json", "results.jsonl.gz", "summary.json", "summary.md"):
        assert (again.run_path / name).read_bytes() == (reference.run_path / name).read_bytes(), name
    # the results are the plan (the baseline at the deployment shape first, in plan order), then the search's new
    # configurations
    strategy = load_strategy("quick")
    session = Session(reference.target)
    try:
        base = Config.from_argv(reference.summary["shape"]["argv"])
        plan = covering_plan(dataclasses.replace(strategy.space(session.flags()), base=base), strategy)
    finally:
        session.close()
    keys = result_keys(reference.run_path)
    # one H100 takes SGLang's defaults (--tp-size 1); Kimi-K2.6's --tp-size 8 on 8 RTX PRO 6000 is test_branch_rows'
    assert base == Config() and reference.summary["shape"]["reason"].startswith("SGLang's default --tp-size 1")
    assert keys[:len(plan)] == [c.key() for c in plan] and plan[0] == base
    assert len(set(keys)) == len(keys)


def test_kill_9_then_resume_loses_and_duplicates_nothing(reference: api.SweepResult, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen([str(BISECT_SPEC), *CLI_SWEEP, "--runs-dir", str(runs)], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=err)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 180
        journal: Path | None = None
        while True:
            assert proc.poll() is None, f"the sweep ended before it was killed: {stderr.read_text()}"
            assert time.monotonic() < deadline, "no 40 journal lines within 180 s"
            found = list(runs.glob("*/journal.jsonl"))
            if found and found[0].read_bytes().count(b"\n") >= 40:
                journal = found[0]
                break
            time.sleep(0.005)
        workers = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # the workers run in their own sessions; they must still not outlive the sweep
        _, alive = psutil.wait_procs(workers, timeout=20)
        assert alive == [], f"workers left running after kill -9: {alive}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for worker in workers:
            if worker.is_running():
                worker.kill()
    run_id = journal.parent.name
    recorded = journal.read_bytes().count(b"\n")
    assert not (journal.parent / "summary.json").exists()
    assert recorded < len(reference.outcomes), "killed too late to test resuming"

    done = subprocess.run([str(BISECT_SPEC), "sweep", "--resume", run_id, "--runs-dir", str(runs), "--no-cache", "--jobs", "2",
                           "--no-shrink"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"run {run_id} stored in {runs / run_id}" in done.stdout
    entries = store.read_journal(journal.parent)
    keys = [str(e["key"]) for e in entries]
    assert len(keys) == len(set(keys)), "a configuration was journaled twice"
    assert set(keys) == set(result_keys(journal.parent)) == set(result_keys(reference.run_path))
    for name in ("run.json", "results.jsonl.gz", "summary.json"):
        assert (journal.parent / name).read_bytes() == (reference.run_path / name).read_bytes(), name


@pytest.fixture(scope="module")
def cached_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, api.SweepResult, api.SweepResult]:
    """Two cached sweeps in a fresh BISECT_SPEC_HOME (empty outcome cache) sharing the installed environments."""
    require_release(RELEASE)
    real = environments.home()

    def pair(home: Path) -> tuple[Path, api.SweepResult, api.SweepResult]:
        (home / "envs").symlink_to(real / "envs", target_is_directory=True)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("BISECT_SPEC_HOME", str(home))
            first = quick_sweep(home / "runs", use_cache=True)
            second = quick_sweep(home / "runs", use_cache=True)
        return home, first, second

    return once_per_run(tmp_path_factory, "cached-pair", pair)


def test_cross_run_cache_reuses_outcomes(reference: api.SweepResult,
                                         cached_pair: tuple[Path, api.SweepResult, api.SweepResult]) -> None:
    home, first, second = cached_pair
    assert first.reused == 0  # a fresh cache: everything evaluated
    assert not any(e["cached"] for e in store.read_journal(first.run_path))
    assert (home / "cache" / "outcomes.sqlite").is_file()
    assert second.reused > 0
    assert second.worker == {}, "every outcome came from the cache: no worker should have started"
    assert all(e["cached"] for e in store.read_journal(second.run_path))
    assert first.summary == second.summary == reference.summary
    assert (first.run_path / "results.jsonl.gz").read_bytes() == (second.run_path / "results.jsonl.gz").read_bytes()
    timing = json.loads((second.run_path / "timing.json").read_text())
    assert timing["reused_from_cache"] == second.reused


def test_reused_counts_every_cached_outcome(cached_pair: tuple[Path, api.SweepResult, api.SweepResult]) -> None:
    _, _, second = cached_pair
    cached = sum(1 for e in store.read_journal(second.run_path) if e["cached"])
    assert second.reused == cached


def test_results_do_not_depend_on_the_home_directory(reference: api.SweepResult,
                                                     cached_pair: tuple[Path, api.SweepResult, api.SweepResult]) -> None:
    _, first, _ = cached_pair  # evaluated from scratch (fresh cache), in another home
    assert first.summary == reference.summary
    assert (first.run_path / "results.jsonl.gz").read_bytes() == (reference.run_path / "results.jsonl.gz").read_bytes()


def test_default_space_keeps_the_interacting_switches_of_0_5_23() -> None:
    require_release(RELEASE)
    session = Session(SPEC.resolve())
    try:
        table = session.flags()
    finally:
        session.close()
    assert {"--enable-dp-attention", "--disable-cuda-graph"} <= {e["option"] for e in table}
    space = load_strategy("default").space(table)
    assert "--enable-dp-attention" in space.flags and "--disable-cuda-graph" in space.flags


def test_one_check_is_one_signature_whatever_the_offending_value() -> None:
    session = shared_session(RELEASE)
    outcomes = [session.evaluate(Config.of({"--speculative-algorithm": "EAGLE3", "--speculative-eagle-topk": "2",
                                            "--speculative-num-steps": "1", "--attention-backend": backend}))
                for backend in ("trtllm_mla", "flashmla")]
    for outcome in outcomes:
        assert outcome.exception["type"] == "ValueError", outcome.headline
        assert outcome.frame["function"] == "_handle_eagle_family"
        assert "is only supported on ('flashinfer', 'fa3', 'triton')" in outcome.exception["message"]
    assert outcomes[0].frame["statement"] == outcomes[1].frame["statement"]
    first, second = (o.signature for o in outcomes)
    assert first is not None and second is not None
    assert first.id == second.id


@pytest.mark.parametrize(("model", "draft", "hardware", "gpus"), [("deepseek-v3", "nextn", "h200", 8),
                                                                  ("llama-3.1-8b", None, "h100", 1)])
def test_a_draft_without_a_model_path_sweeps_without_naming_one(model: str, draft: str | None, hardware: str, gpus: int,
                                                                tmp_path: Path) -> None:
    """DeepSeek-V3's NEXTN draft is the target's own MTP layers, and ``--draft none`` names no draft: no path to give.
    A strategy that sweeps the draft path flag (the tiny one) used to end the sweep at its first row naming
    ``@draft`` ("draft 'nextn' has no draft model path"); the flag is not swept for such a target."""
    require_release("0.5.23")
    strategy = Path(__file__).parents[1] / "resources" / "matrices" / "tiny-strategy.toml"
    result = api.sweep(api.TargetSpec(release="0.5.23", model=model, draft=draft, hardware=hardware, gpus=gpus),
                       strategy=str(strategy), runs_dir=tmp_path, use_cache=False)
    configs = [o.config for o in result.outcomes]
    assert len(configs) > 10 and not any("--speculative-draft-model-path" in c.flags() for c in configs)
    assert any(o.passed and o.config.get("--speculative-algorithm") is None for o in result.outcomes)

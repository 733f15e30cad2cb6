"""Nothing outlives a sweep or a ``shrink --launch``, however the tool dies, and a killed sweep resumes.

Each way of dying: SIGKILL, SIGTERM, a closed terminal (the kernel's SIGHUP) and SIGINT.
A sweep is killed once its journal holds 40 results (real SGLang 0.5.23 evaluations);
``shrink --launch`` once the fake server's whole tree is up. Tests wait for those events,
never for a time, and the janitor kills what they started even when they fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bisect_spec.launch import server as launch
from bisect_spec.launch import supervision
from bisect_spec.model.flags import Config
from bisect_spec.runtime import store, warm
from tests.conftest import require_release
from tests.once import once_per_run
from tests.processes import (
    BISECT_SPEC,
    FAKE_SERVER,
    Janitor,
    Tool,
    evaluation_workers,
    gone,
    tree_is_up,
    wait_for,
)

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SWEEP = ["sweep", "--sglang", "0.5.23", "--model", "llama-3.1-8b", "--hardware", "h100", "--strategy", "quick",
         "--budget", "0", "--jobs", "2", "--no-cache", "--no-shrink"]
#: results journaled before the sweep is killed (the quick plan has 234)
KILL_AT = 40
WAYS = ["sigkill", "sigterm", "terminal-closed", "sigint"]


@pytest.fixture(scope="module", autouse=True)
def _own_workers() -> Iterator[None]:
    """These sweeps start workers of their own (not the test run's warm ones): the test kills the sweep and
    checks that its workers end with it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(warm.SCOPE_ENV, "commands")
        yield


#: the uninterrupted reference and the resumes are not about workers: they take the run's warm ones
WARM = {**os.environ, warm.SCOPE_ENV: "all"}


def kill(tool: Tool, how: str) -> None:
    if how == "terminal-closed":
        tool.close_terminal()
    else:
        tool.process.send_signal({"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}[how])


def journal_lines(runs: Path) -> int:
    found = list(runs.glob("*/journal.jsonl"))
    return found[0].read_bytes().count(b"\n") if found else 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same sweep, not interrupted (once per test run)."""
    require_release("0.5.23")

    def sweep(runs: Path) -> Path:
        done = subprocess.run([str(BISECT_SPEC), *SWEEP, "--runs-dir", str(runs)], capture_output=True, text=True,
                              timeout=600, env=WARM)
        assert done.returncode == 0, done.stderr
        [run] = [path for path in runs.iterdir() if path.is_dir()]
        return run

    return once_per_run(tmp_path_factory, "kill-reference", sweep)


@pytest.mark.parametrize("how", WAYS)
def test_a_killed_sweep_leaves_no_worker_and_resumes_with_nothing_lost(how: str, reference: Path, tmp_path: Path,
                                                                      janitor: Janitor) -> None:
    runs = tmp_path / "runs"
    tool = Tool([str(BISECT_SPEC), *SWEEP, "--runs-dir", str(runs)], janitor, terminal=how == "terminal-closed")
    wait_for(f"{KILL_AT} results in the journal", lambda: journal_lines(runs) >= KILL_AT or tool.process.poll() is not None)
    assert tool.process.poll() is None, "the sweep ended before it was killed"
    workers = evaluation_workers(janitor.snapshot())
    assert len(workers) == 2
    kill(tool, how)
    wait_for("the sweep to exit", lambda: tool.process.poll() is not None)
    wait_for("every evaluation worker to be gone", lambda: gone([], workers))
    # SIGINT is Ctrl-C (130, saying how to resume); SIGTERM and SIGHUP end it as SIGKILL does, the workers with it
    assert tool.process.returncode == {"sigkill": -signal.SIGKILL, "sigterm": -signal.SIGTERM,
                                       "terminal-closed": -signal.SIGHUP, "sigint": 130}[how]

    [journal] = list(runs.glob("*/journal.jsonl"))
    before = journal.read_bytes()
    plan_size = json.loads((journal.parent / "run.json").read_text())["plan_size"]
    assert KILL_AT <= before.count(b"\n") < plan_size and not (journal.parent / "summary.json").exists()
    done = subprocess.run([str(BISECT_SPEC), "sweep", "--resume", journal.parent.name, "--runs-dir", str(runs),
                           "--no-cache", "--jobs", "2", "--no-shrink"], capture_output=True, text=True, timeout=600,
                          env=WARM)
    assert done.returncode == 0, done.stderr
    after = store.stored_bytes(journal)  # sealed (gzipped) once the run finished
    assert after is not None and after.startswith(before.rsplit(b"\n", 1)[0]), "a journaled result was lost"
    keys = [entry["key"] for entry in store.read_journal(journal.parent)]
    assert len(keys) == len(set(keys)) == plan_size, "every configuration journaled once"
    for name in ("results.jsonl.gz", "summary.json"):
        assert (journal.parent / name).read_bytes() == (reference / name).read_bytes(), name


#: fails in-process on 0.5.23 (kimi-k2.6 + eagle3, rtx-pro-6000) and is already 1-minimal: the shrink is short
MINIMAL = Config.from_argv(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "2"])


@pytest.mark.parametrize(("mode", "how"), [*(("spawn-children", how) for how in WAYS), ("ignore-sigterm", "sigkill")])
def test_shrink_launch_killed_while_its_server_is_up_leaves_nothing(mode: str, how: str, tmp_path: Path,
                                                                   janitor: Janitor) -> None:
    """``shrink --launch`` launches its minimal reproducer (the fake server, never ready): then the tool is killed."""
    require_release("0.5.23")
    pidfile = janitor.pidfile(tmp_path / "pids")
    server = f"{{python}} {FAKE_SERVER} --fake-mode {mode} --fake-delay 600 --fake-pidfile {pidfile}"
    tool = Tool([str(BISECT_SPEC), "shrink", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--launch",
                 "--launch-without-gpu", "--no-fix", "--out", str(tmp_path / "out"), "--", *MINIMAL.argv()],
                janitor, terminal=how == "terminal-closed", env={**os.environ, launch.SERVER_COMMAND_ENV: server},
                cwd=tmp_path)
    started = tree_is_up(pidfile, mode)
    supervisor = psutil.Process(started[0]).parent()
    assert supervisor is not None and supervisor.cmdline()[1] == str(supervision.SUPERVISOR_SCRIPT)
    everything = janitor.snapshot(supervisor)  # the tool, any evaluation worker, the supervisor, the server tree
    kill(tool, how)
    wait_for("the tool to exit", lambda: tool.process.poll() is not None)
    wait_for("every process of the server tree (and every worker) to be gone", lambda: gone(started, everything))
    # an orderly stop exits 130, but after a hang-up its last line cannot be written (EIO): 1
    assert tool.process.returncode == {"sigkill": -signal.SIGKILL, "terminal-closed": 1}.get(how, 130)

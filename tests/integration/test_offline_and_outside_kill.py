"""Evaluations run offline; a worker killed from outside is an outcome of its own; a worker dies with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.runtime.session import Session
from tests.conftest import FAULT_PLUGIN, require_release
from tests.processes import Janitor, gone, wait_for

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def session_with_plugin(timeout: float) -> Session:
    require_release("0.5.23")
    target = TargetSpec(release="0.5.23", model="llama-3.1-8b", draft=None, hardware="h100").resolve()
    return Session(target, jobs=1, timeout=timeout, extra_env=(("BISECT_SPEC_WORKER_PLUGIN", str(FAULT_PLUGIN)),),
                   warm="own")  # its own worker: the test kills it and reads its history


def test_network_attempt_is_a_recorded_failure_not_a_hang() -> None:
    with session_with_plugin(timeout=60) as session:
        started = time.monotonic()
        outcome = session.evaluate(Config.of({"--served-model-name": "fault:network"}))
        elapsed = time.monotonic() - started
        info = session.pool.request({"op": "info"})
    assert outcome.status.value == "failed"
    assert outcome.exception["type"] == "URLError"
    assert "bisect-spec blocked network access to huggingface.co" in outcome.exception["message"]
    assert elapsed < 10
    assert info["network_blocked"] == ["huggingface.co"]


def test_a_sweep_opens_no_outbound_connection() -> None:
    with session_with_plugin(timeout=60) as session:
        configs = [Config(), Config.of({"--speculative-algorithm": "NGRAM"}), Config.of({"--tp-size": "2"}),
                   Config.of({"--speculative-algorithm": "EAGLE3", "--speculative-num-draft-tokens": "3"})]
        outcomes = list(session.evaluate_many(configs))
        info = session.pool.request({"op": "info"})
    assert len(outcomes) == 4
    assert info["network_blocked"] == []


def test_worker_killed_from_outside_during_an_evaluation() -> None:
    with session_with_plugin(timeout=60) as session:
        pid = session.pool.worker_pids()[0]
        killer = threading.Timer(2.0, os.kill, (pid, signal.SIGKILL))
        killer.start()
        killed = session.evaluate(Config.of({"--served-model-name": "fault:hang"}))
        after = session.evaluate(Config())
    assert killed.status.value == "crashed"
    assert killed.record["crash"] == "killed (SIGKILL)"
    assert after.passed and session.pool.replaced == 1


PARENT = """
import sys
from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.runtime.session import Session
plugin, notes = sys.argv[1:]
target = TargetSpec(release="0.5.23", model="llama-3.1-8b", draft=None, hardware="h100").resolve()
session = Session(target, jobs=1, timeout=3600, warm="own",
                  extra_env=(("BISECT_SPEC_WORKER_PLUGIN", plugin), ("BISECT_SPEC_FAULT_NOTES", notes)))
session.start()  # boots the worker from a thread, which has ended since
print(session.pool.worker_pids()[0], flush=True)
session.evaluate(Config.of({"--served-model-name": "fault:hang"}))
"""


def test_a_worker_hung_in_an_evaluation_dies_with_the_process_that_started_it(tmp_path: Path, janitor: Janitor) -> None:
    """A hung worker is not reading its stdin, so no end-of-file reaches it: its parent-death signal ends it.

    The worker was started from a thread that ended long before: it survived that (the
    kernel's "parent" is the thread that forked it, see ``worker._spawn``), and only the
    death of its process ends it.
    """
    require_release("0.5.23")
    notes = tmp_path / "notes"
    parent = janitor.tool(subprocess.Popen([sys.executable, "-c", PARENT, str(FAULT_PLUGIN), str(notes)],
                                           stdout=subprocess.PIPE))
    assert parent.stdout is not None
    with parent.stdout:
        booted = int(parent.stdout.readline())
    [hung_worker] = [p for p in janitor.snapshot() if p.pid == booted]
    wait_for("the worker to be in its hang", lambda: notes.is_file() and notes.read_text() == f"hang {booted}\n")
    parent.kill()
    parent.wait()
    wait_for("the hung worker to be gone", lambda: gone([], [hung_worker]))


def test_a_stand_in_read_outside_its_stage_is_a_tool_fault_named_as_ours() -> None:
    # the emulation's stand-ins end a stage with a BaseException (SGLang's `except Exception` must not swallow
    # it); one that escapes every stage is bisect-spec's fault: recorded as such, with what was read, never as
    # SGLang's verdict (it once ended the worker process: a bare "worker died" record, and a restart per row)
    with session_with_plugin(timeout=60) as session:
        faulty = session.evaluate(Config.of({"--served-model-name": "fault:stand_in"}))
        after = session.evaluate(Config.of({"--speculative-algorithm": "NGRAM"}))
    assert faulty.status.value == "crashed", faulty.headline
    assert faulty.tool_fault is not None and "a stand-in read outside its stage" in faulty.tool_fault
    assert "the loaded target worker's model" in faulty.tool_fault
    assert after.status.value == "passed", after.headline

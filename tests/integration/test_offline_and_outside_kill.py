"""Evaluations run offline; a worker killed from outside is an outcome of its own."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.flags import Config
from bisect_spec.session import Session
from tests.conftest import FAULT_PLUGIN, require_release

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def session_with_plugin(timeout: float) -> Session:
    require_release("0.5.23")
    target = TargetSpec(release="0.5.23", model="llama-3.1-8b", draft=None, hardware="h100").resolve()
    return Session(target, jobs=1, timeout=timeout, extra_env=(("BISECT_SPEC_WORKER_PLUGIN", str(FAULT_PLUGIN)),))


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

"""A pool's workers forked from its zygote (SGLang imported once) answer as workers that imported it themselves.

On real SGLang releases of two launch-path families: the same mixed configurations, evaluated by a pool whose
workers are forked from a zygote (the default) and by one whose workers each import SGLang
(``BISECT_SPEC_FORK=0``), give the same verdicts. The zygote is the workers' parent; killed from outside, it takes
them along, and the pool's next evaluation forks from a fresh one.
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.runtime import worker
from bisect_spec.runtime.session import Session
from tests.conftest import require_release
from tests.integration.test_isolation import mixed_configs, verdict
from tests.processes import wait_for

pytestmark = pytest.mark.sglang


def _session(release: str) -> Session:
    target = TargetSpec(release=release, model="llama-3.1-8b", draft="eagle3", hardware="h100", gpus=1).resolve()
    return Session(target, jobs=2, timeout=120, warm="own")


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_forked_workers_give_the_verdicts_of_workers_that_imported_sglang_themselves(
        release: str, monkeypatch: pytest.MonkeyPatch) -> None:
    require_release(release)
    configs = mixed_configs(40, seed=3)
    monkeypatch.setenv(worker.FORK_ENV, "1")
    with _session(release) as forked:
        zygote = forked.pool.zygote_pid  # type: ignore[attr-defined]
        assert zygote is not None
        pids = forked.pool.worker_pids()
        assert len(pids) == 2 and {psutil.Process(pid).ppid() for pid in pids} == {zygote}  # one import, two workers
        assert psutil.Process(zygote).ppid() == os.getpid()
        with_fork = {o.config.key(): verdict(o) for o in forked.evaluate_many(configs)}
    monkeypatch.setenv(worker.FORK_ENV, "0")
    with _session(release) as own:
        assert own.pool.zygote_pid is None  # type: ignore[attr-defined]
        assert {psutil.Process(pid).ppid() for pid in own.pool.worker_pids()} == {os.getpid()}
        without = {o.config.key(): verdict(o) for o in own.evaluate_many(configs)}
    assert with_fork == without
    assert len({v[0] for v in without.values()}) > 1  # the sample has passes and failures


def test_a_zygote_killed_from_outside_takes_its_workers_and_the_next_evaluation_forks_from_a_fresh_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    require_release("0.5.23")
    monkeypatch.setenv(worker.FORK_ENV, "1")
    with _session("0.5.23") as session:
        pool = session.pool
        assert session.evaluate(Config()).passed
        zygote = psutil.Process(pool.zygote_pid)  # type: ignore[attr-defined]
        workers = [psutil.Process(pid) for pid in pool.worker_pids()]
        zygote.send_signal(signal.SIGKILL)
        wait_for("the zygote's workers to end with it", lambda: not any(w.is_running() and w.status() != "zombie"
                                                                         for w in workers))
        outcome = session.evaluate(Config.of({"--tp-size": "1"}))
        assert outcome.passed, outcome.headline
        assert pool.zygote_pid not in (None, zygote.pid)  # type: ignore[attr-defined]
        assert pool.replaced >= 1

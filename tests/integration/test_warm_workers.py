"""Warm workers on real SGLang 0.5.23: reuse, idle stop, privacy, ``workers stop``, concurrency, kills.

Every test has a BISECT_SPEC_HOME of its own (its ``envs`` a link to the installed
environments), so its warm workers are its own: a fresh one starts, nothing of another
test is reused or stopped. Waits are for events (a process ending, a file appearing).
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bisect_spec import api
from bisect_spec.errors import WarmWorkerError
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments, warm
from bisect_spec.runtime.session import Session
from bisect_spec.runtime.worker import WorkerSpec
from tests.conftest import require_release
from tests.processes import BISECT_SPEC, Janitor, Tool, evaluation_workers, wait_for
from tests.schemas import assert_valid

pytestmark = pytest.mark.sglang

RELEASE = "0.5.23"
FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"]
TARGET = ["--sglang", RELEASE, "--hardware", "rtx-pro-6000"]
SPEC = api.TargetSpec(release=RELEASE, hardware="rtx-pro-6000")


@pytest.fixture
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A BISECT_SPEC_HOME of this test's own, sharing the installed environments; its warm workers stopped after."""
    require_release(RELEASE)
    shared = environments.home()
    fresh = tmp_path_factory.mktemp("h")  # short: a Unix socket's path holds at most 107 bytes
    (fresh / "envs").symlink_to(shared / "envs")
    monkeypatch.setenv("BISECT_SPEC_HOME", str(fresh))
    monkeypatch.setenv(warm.IDLE_ENV, "120")
    try:
        yield fresh
    finally:
        warm.stop_all()


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BISECT_SPEC), *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=600, check=False)


def listed() -> list[dict[str, object]]:
    done = cli("workers", "list", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert_valid(document, "workers")
    workers: list[dict[str, object]] = document["workers"]
    return workers


def test_a_second_probe_reuses_the_warm_worker_and_workers_stop_ends_it(home: Path) -> None:
    first = api.probe(FLAGS, SPEC)
    second = api.probe(FLAGS, SPEC)
    pid = first.worker["warm_worker"]["pid"]
    assert first.worker["warm_worker"]["started_now"] is True
    assert second.worker["warm_worker"] == {"pid": pid, "started_now": False, "served_before": 1}
    assert second.outcome.to_dict()["status"] == first.outcome.to_dict()["status"]
    by_cli = cli("probe", *TARGET, "--json", "--no-fix", "--", *FLAGS)  # one evaluation (no nearest-working search)
    assert by_cli.returncode == 3, by_cli.stderr  # this configuration fails in SGLang 0.5.23
    assert json.loads(by_cli.stdout)["worker"]["warm_worker"]["pid"] == pid
    assert "starting a warm evaluation worker" not in by_cli.stderr
    bisecting = Session(SPEC.resolve(), warm="reuse")  # as bisect's sessions are: it takes the one that runs
    try:
        assert bisecting.start()["warm_worker"]["pid"] == pid
    finally:
        bisecting.close()
    [entry] = listed()
    assert (entry["pid"], entry["served"], entry["state"]) == (pid, 3, "ready")
    assert entry["label"] == "SGLang 0.5.23 on rtx-pro-6000" and int(str(entry["memory"])) > 0
    daemon = psutil.Process(int(str(pid)))
    workers = evaluation_workers(daemon.children(recursive=True))
    assert workers
    stopped = cli("workers", "stop", RELEASE)
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout, stopped.stderr
    psutil.wait_procs([daemon, *workers], timeout=60)
    assert not daemon.is_running() and not any(w.is_running() for w in workers)
    assert listed() == []
    assert cli("workers", "stop", RELEASE).returncode == 1
    refused = cli("workers", "stop")
    assert refused.returncode == 2 and "--all" in refused.stderr


def test_a_warm_worker_stops_by_itself_once_idle(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warm.IDLE_ENV, "1")
    result = api.probe(FLAGS, SPEC)
    daemon = psutil.Process(result.worker["warm_worker"]["pid"])
    workers = evaluation_workers(daemon.children(recursive=True))
    assert workers
    gone, alive = psutil.wait_procs([daemon, *workers], timeout=120)  # the event: they end
    assert alive == [] and len(gone) == 1 + len(workers)
    assert not (home / "workers" / warm.key(workers_spec()) / "sock").exists()
    # its log says when it served and why it stopped
    log = (home / "workers" / warm.key(workers_spec()) / "daemon.log").read_text().splitlines()
    assert f"serving SGLang {RELEASE} on rtx-pro-6000 (pid {daemon.pid})" in log[0], log
    assert re.search(r" stopped: idle for \d+ s \(its limit: 1 s\); [1-9]\d* evaluations in \d+ s$", log[-1]), log
    # bisect's sessions only reuse one; one that has stopped (as it just did, by its idle limit, possibly after
    # they looked) leaves them a worker of their own, not "no warm worker runs" (CI, 2026-12-07)
    monkeypatch.setenv(warm.SCOPE_ENV, "commands")  # the default scope (the suite's "all" makes reuse start one)
    bisecting = Session(SPEC.resolve(), warm="reuse")
    try:
        info = bisecting.start()
        assert "warm_worker" not in info and not isinstance(bisecting.pool, warm.WarmPool)
        assert bisecting.pool.evaluate(["--speculative-algorithm", "EAGLE3"])["status"]
    finally:
        bisecting.close()
    assert not (home / "workers" / warm.key(workers_spec()) / "sock").exists()  # and it started no warm one


def test_a_warm_worker_that_cannot_describe_the_box_is_stopped_and_said_so(home: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """After its hello the pool asks the worker for this box's description. A daemon that stops just then (its
    idle limit, ``workers stop``) is reached afresh; one whose worker cannot answer is refused in one line naming
    the way out (never "reinstall the release"), and a daemon this command started is not left behind."""
    answers = iter([{"ok": False, "error": "the warm worker is stopping", "stopping": True},
                    {"ok": False, "error": "WorkerError: worker failed answering info"}])
    real = warm.WarmPool._describe_box
    monkeypatch.setattr(warm.WarmPool, "_describe_box", lambda self, conn: next(answers, None) or real(self, conn))
    session = Session(SPEC.resolve(), warm="start")
    with pytest.raises(WarmWorkerError, match=f"cannot describe its box .*{warm.IDLE_ENV}=0"):
        session.start()  # the first answer: reached again (the daemon it started, still up); the second: refused
    assert listed() == []  # the daemon it started is stopped
    with Session(SPEC.resolve(), warm="start") as again:  # the third: answered
        assert again.info["hardware"] == "simulated:rtx-pro-6000x8" and again.info["warm_worker"]["started_now"]


def test_a_caller_that_stops_reading_early_leaves_no_connection_open(home: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``evaluate_many`` on a warm worker keeps ``jobs`` connections busy. A caller that stops after the first
    outcome (a budget, an interrupt) closes the generator; its connections close with it, not when the garbage
    collector finds them (CI, 2026-12-07: "unclosed <socket ... workers/KEY/sock>" failed a nightly test)."""
    opened: list[warm.Connection] = []
    connect = warm.Connection.__init__

    def recorded(self: warm.Connection, *args: Any, **kwargs: Any) -> None:
        connect(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(warm.Connection, "__init__", recorded)
    with Session(SPEC.resolve(), warm="start", jobs=2) as session:
        configs = [Config.from_argv(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", str(n)])
                   for n in range(2, 8)]
        outcomes = session.evaluate_many(configs)
        assert next(outcomes).status
        clients = [c for c in opened if c is not session.pool._conn]  # type: ignore[attr-defined]
        assert len(clients) == 2 and all(c.sock.fileno() >= 0 for c in clients)  # one per job, open
        outcomes.close()
        assert [c.sock.fileno() for c in clients] == [-1, -1]
    assert all(c.sock.fileno() == -1 for c in opened)


def workers_spec() -> WorkerSpec:
    target = SPEC.resolve()
    return environments.get(RELEASE).worker_spec(hardware=target.hardware.record, gpus=target.hardware.gpus)


def test_a_command_interrupted_before_its_daemon_listens_stops_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after the daemon was started but before the command connected (a busy machine delays the command, CI
    2026-12-07): the daemon starts anyway, detached; the command stops it rather than leave it serving until idle."""
    real = warm._wait_for_socket

    def interrupted(directory: Path) -> Any:
        real(directory).close()  # the event: the daemon listens; the command's Ctrl-C comes now
        raise KeyboardInterrupt

    monkeypatch.setattr(warm, "_wait_for_socket", interrupted)
    spec = workers_spec()
    with pytest.raises(KeyboardInterrupt):
        warm.connect_or_start(spec, label="the interrupted start", timeout=60)
    directory = home / "workers" / warm.key(spec)
    assert (directory / "daemon.lock").exists() and not warm.running(directory)


def test_the_socket_is_private_and_a_loose_folder_is_refused(home: Path) -> None:
    api.probe(FLAGS, SPEC)
    base = home / "workers"
    [directory] = [p for p in base.iterdir() if p.is_dir()]
    for folder in (base, directory):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert folder.stat().st_uid == os.getuid()
    sock = (directory / "sock").lstat()
    assert stat.S_ISSOCK(sock.st_mode) and stat.S_IMODE(sock.st_mode) & 0o077 == 0
    directory.chmod(0o755)
    try:
        refused = cli("probe", *TARGET, "--", *FLAGS)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1] == (
            f"Error: refusing warm worker folder {directory}: mode 755 lets others in; run: chmod 700 {directory}")
        assert "Traceback" not in refused.stderr
    finally:
        directory.chmod(0o700)


def test_concurrent_probes_start_one_worker_and_get_the_same_answers(home: Path) -> None:
    """Two CLI probes at once from cold: one daemon (the start lock), the same verdicts; then two API threads on it."""
    tools = [subprocess.Popen([str(BISECT_SPEC), "probe", *TARGET, "--json", "--", *FLAGS], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    answers = [tool.communicate(timeout=600) for tool in tools]
    assert [tool.returncode for tool in tools] == [3, 3], answers
    records = [json.loads(out) for out, _ in answers]
    assert records[0]["worker"]["warm_worker"]["pid"] == records[1]["worker"]["warm_worker"]["pid"]
    verdicts = {json.dumps([r["outcome"]["status"], r["outcome"]["signature"]], sort_keys=True) for r in records}
    assert len(verdicts) == 1
    assert len(listed()) == 1
    results: list[api.ProbeResult] = []
    with api.ProbeSession(SPEC) as session:
        threads = [threading.Thread(target=lambda: results.append(session.probe(FLAGS))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(results) == 4
    assert {r.outcome.signature.id if r.outcome.signature else None for r in results} == {
        records[0]["outcome"]["signature"]["id"]}


def _daemon_started(home: Path) -> int | None:
    for pid_file in (home / "workers").glob("*/pid"):
        return int(pid_file.read_text())
    return None


@pytest.mark.parametrize("how", ["sigkill", "ctrl-c"])
def test_a_probe_killed_while_its_worker_starts_leaves_only_the_managed_daemon(how: str, home: Path,
                                                                               monkeypatch: pytest.MonkeyPatch,
                                                                               janitor: Janitor) -> None:
    """SIGKILL: the daemon it started stays, managed, and stops once idle. Ctrl-C: exit 130 and the daemon is stopped."""
    monkeypatch.setenv(warm.IDLE_ENV, "3")
    tool = Tool([sys.executable, "-m", "bisect_spec", "probe", *TARGET, "--", *FLAGS], janitor, env=dict(os.environ))
    wait_for("the warm worker daemon to start", lambda: _daemon_started(home) is not None or tool.process.poll() is not None)
    pid = _daemon_started(home)
    assert pid is not None and tool.process.poll() is None
    daemon = psutil.Process(pid)
    assert daemon.ppid() != tool.process.pid  # nobody's child: killing the tool's tree does not touch it
    assert warm.DAEMON_MODULE in daemon.cmdline()
    everything = janitor.snapshot()  # the tool and its children
    if how == "sigkill":
        tool.process.kill()
    else:
        tool.process.send_signal(signal.SIGINT)
    assert tool.process.wait(timeout=60) == (-signal.SIGKILL if how == "sigkill" else 130)
    left, _ = psutil.wait_procs([p for p in everything if p.pid != pid], timeout=30)
    assert all(not p.is_running() for p in everything if p.pid != pid), left
    gone, alive = psutil.wait_procs([daemon], timeout=300)  # idle stop (or stopped by the interrupted tool)
    assert alive == [] and gone
    assert not any(warm.DAEMON_MODULE in " ".join(p.cmdline()) and str(home) in " ".join(p.cmdline())
                   for p in psutil.process_iter() if _readable(p))


def _readable(proc: psutil.Process) -> bool:
    try:
        proc.cmdline()
        return True
    except psutil.Error:
        return False


def test_a_bad_idle_time_is_refused_in_one_line(home: Path) -> None:
    done = cli("probe", *TARGET, "--", *FLAGS, env={warm.IDLE_ENV: "soon"})
    assert done.returncode == 2
    assert done.stderr.strip() == ("Error: BISECT_SPEC_WORKER_IDLE=soon is not a number of seconds: "
                                   "set e.g. BISECT_SPEC_WORKER_IDLE=300, or 0 for no warm workers")
    assert not (home / "workers").exists() or listed() == []


#: one release per family (``docs/internals.md``): where SGLang keeps its state moved between them
FAMILIES = ["0.4.6", "0.5.3", "0.5.9", "0.5.12", "0.5.18", "0.5.23"]
#: DeepSeek-V3 with its NextN head on H200s (SGLang's documented MTP box): what one GPU cannot hold, eight can
COUNTS_CONFIGS = [
    [],
    ["--tp", "8"],
    ["--tp", "8", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
     "--speculative-num-draft-tokens", "4"],
    ["--tp", "2", "--dp", "2", "--enable-dp-attention"],
]


@pytest.mark.parametrize("release", FAMILIES)
def test_one_warm_worker_serves_every_gpu_count_of_its_box_as_fresh_workers_do(
        release: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm worker serves every GPU count of its box kind (one SGLang import, not one per count): switched from
    one count to another it answers as a worker started for that count does, so no module state of SGLang's or
    ours carries the count of an earlier evaluation."""
    require_release(release)
    shared = environments.home()
    fresh = tmp_path_factory.mktemp("h")  # a home of its own: its warm workers are this test's
    (fresh / "envs").symlink_to(shared / "envs")
    monkeypatch.setenv("BISECT_SPEC_HOME", str(fresh))
    answers: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for first, then in ((1, 8), (8, 1)):  # each order on a fresh warm worker, started for `first` GPUs
        pids = set()
        try:
            for gpus in (first, then):
                target = api.TargetSpec(release=release, model="deepseek-v3", draft="nextn", hardware="h200",
                                        gpus=gpus).resolve()
                with Session(target, warm="start") as session:
                    assert session.info["hardware"] == f"simulated:h200x{gpus}"
                    pids.add(session.info["warm_worker"]["pid"])
                    answers[(first, gpus)] = [
                        {k: v for k, v in session.evaluate(Config.from_argv(argv)).record.items() if k not in ("seconds", "id")}
                        for argv in COUNTS_CONFIGS]
        finally:
            warm.stop_all()
        assert len(pids) == 1, "both counts served by one warm worker"
    assert answers[(1, 8)] == answers[(8, 8)]  # switched from one GPU to eight = started on eight
    assert answers[(8, 1)] == answers[(1, 1)]  # and back
    statuses = [(a["status"], b["status"]) for a, b in zip(answers[(8, 8)], answers[(1, 1)], strict=True)]
    assert statuses[1][0] == "passed" and statuses[1][1] != "passed", statuses  # the count reaches SGLang

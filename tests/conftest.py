"""Shared fixtures.

Integration tests construct real ``ServerArgs`` from real installed SGLang releases
(installed by the README's test command). A missing release is a failure, not a skip,
so a CI run that forgot an install step cannot pass silently; set
``BISECT_SPEC_ALLOW_MISSING_RELEASES=1`` to skip them locally instead. Ray (the ``ray`` extra,
pulled in by ``dev``) is treated the same way: ``BISECT_SPEC_ALLOW_MISSING_RAY=1`` skips.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from bisect_spec import environments
from bisect_spec.api import TargetSpec
from bisect_spec.session import Session

RESOURCES = Path(__file__).parent / "resources"
FAULT_PLUGIN = RESOURCES / "fault_plugin.py"

_SESSIONS: dict[tuple[object, ...], Session] = {}


def require_release(release: str) -> None:
    if release in environments.installed():
        return
    message = f"SGLang {release} is not installed; run: bisect-spec env install {release}"
    if os.environ.get("BISECT_SPEC_ALLOW_MISSING_RELEASES"):
        pytest.skip(message)
    pytest.fail(message)


def require_ray() -> None:
    if importlib.util.find_spec("ray") is not None:
        return
    message = "Ray is not installed; run: pip install -e '.[dev]' (or '.[ray]')"
    if os.environ.get("BISECT_SPEC_ALLOW_MISSING_RAY"):
        pytest.skip(message)
    pytest.fail(message)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """One local Ray instance for the whole test session: 2 CPUs, no dashboard, a small object store."""
    require_ray()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
             object_store_memory=80 * 1024 * 1024)
    yield
    ray.shutdown()


def shared_session(release: str, model: str = "kimi-k2.6", draft: str | None = "eagle3", hardware: str = "rtx-pro-6000",
                   gpus: int = 8, jobs: int = 1) -> Session:
    """A started session reused by every test that asks for the same target (workers take ~7 s)."""
    require_release(release)
    key = (release, model, draft, hardware, gpus, jobs)
    if key not in _SESSIONS:
        target = TargetSpec(release=release, model=model, draft=draft, hardware=hardware, gpus=gpus).resolve()
        session = Session(target, jobs=jobs, timeout=120)
        session.start()
        _SESSIONS[key] = session
    return _SESSIONS[key]


@pytest.fixture(scope="session", autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    for session in _SESSIONS.values():
        session.close()
    _SESSIONS.clear()


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 120.0) -> None:
    """Wait until ``condition()`` holds (an event: a file has N lines, a port answers, pids are gone).

    The bound is generous on purpose: it is only reached when the event never comes, so a
    busy machine makes a test slower, never red.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout:g} s for {what}")
        time.sleep(0.05)


class Janitor:
    """What a test started, killed at teardown whether the test passed or not.

    ``tool(popen)``: a process the test started (killed, with every descendant seen by
    :meth:`snapshot`). ``pidfile(path)``: a fake server's pid file; its pids are killed if
    they are still the processes the test started (started after the test began, running
    the fake server or one of its sleepers), so a reused pid is never touched.
    """

    def __init__(self) -> None:
        self.started = time.time()
        self.tools: list[subprocess.Popen[bytes]] = []
        self.pidfiles: list[Path] = []
        self.seen: dict[int, psutil.Process] = {}

    def tool(self, process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self.tools.append(process)
        return process

    def pidfile(self, path: Path) -> Path:
        self.pidfiles.append(path)
        return path

    def snapshot(self) -> list[psutil.Process]:
        """Every live descendant of the tools now (remembered for teardown), the tools included."""
        found = []
        for process in self.tools:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(process.pid)
                found += [root, *root.children(recursive=True)]
        self.seen.update((p.pid, p) for p in found)
        return found

    def _ours(self, pid: int) -> psutil.Process | None:
        try:
            proc = psutil.Process(pid)
            command = " ".join(proc.cmdline())
            if proc.create_time() >= self.started - 1 and ("fake_server.py" in command or "time.sleep(3600)" in command):
                return proc
        except psutil.Error:
            pass
        return None

    def cleanup(self) -> None:
        for process in self.tools:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        procs = list(self.seen.values())
        for path in self.pidfiles:
            pids = path.read_text().split() if path.is_file() else []
            procs += [p for p in (self._ours(int(pid)) for pid in pids) if p is not None]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if proc.is_running():
                    proc.kill()
        psutil.wait_procs(procs, timeout=10)


@pytest.fixture
def janitor() -> Iterator[Janitor]:
    """Kills what the test started, even when it fails (see :class:`Janitor`)."""
    keeper = Janitor()
    try:
        yield keeper
    finally:
        keeper.cleanup()

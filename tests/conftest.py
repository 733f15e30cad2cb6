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
import signal
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.runtime import environments, warm
from bisect_spec.runtime.session import Session
from tests.processes import Janitor

RESOURCES = Path(__file__).parent / "resources"

#: warm workers the tests start stay up for the tests after (a restart imports SGLang again: with 60 s, a run
#: restarted 38 of its 101 warm workers), unless the machine runs short of memory (then they stop after
#: ``warm_daemon.IDLE_WHEN_SHORT`` seconds idle); all are stopped at the end of the run
#: (``pytest_sessionfinish``): the CI leftover check must find none
os.environ.setdefault(warm.IDLE_ENV, "600")
#: every command of the tests evaluates on warm workers (sweeps too): one worker per release and box kind imports
#: SGLang once for the whole run, not once per test. Tests of a command's own workers (faults, logs, kills)
#: ask for them (``warm="own"``, or this variable set to ``commands``).
os.environ.setdefault(warm.SCOPE_ENV, "all")
#: marks the warm workers this test session starts (they inherit it), wherever their BISECT_SPEC_HOME; one
#: mark for the whole run: pytest-xdist's workers inherit the controller's (they share warm workers)
TEST_SESSION_ENV = "BISECT_SPEC_TEST_SESSION"
os.environ.setdefault(TEST_SESSION_ENV, f"{os.getpid()}-{time.time_ns()}")
FAULT_PLUGIN = RESOURCES / "fault_plugin.py"
#: a suite started in the background by a non-interactive shell (``bash .ci/run &``) inherits SIGINT ignored,
#: and so would every tool it starts: the Ctrl-C tests would then see a tool finish instead of stopping
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_SESSIONS: dict[tuple[object, ...], Session] = {}


def _releases_the_readme_installs() -> frozenset[str]:
    """The releases the README's test command installs, which are all that CI has."""
    for line in (RESOURCES.parent.parent / "README.md").read_text().splitlines():
        if "env install" in line and "pytest" in line:
            return frozenset(t for t in line.split("env install", 1)[1].split("&&", 1)[0].split() if not t.startswith("-"))
    raise AssertionError("the README has no test command that installs releases")


#: a test may only need a release that CI installs: one found installed here but not there passes
#: on this machine and fails in CI, so it fails here too
CI_RELEASES = _releases_the_readme_installs()


def require_release(release: str) -> None:
    if release not in CI_RELEASES:
        pytest.fail(f"SGLang {release} is not installed by the README's test command "
                    f"({' '.join(sorted(CI_RELEASES))}): use one of those, or add it there and to .ci/run")
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


#: shared sessions each test process keeps open; beyond it the least recently used one is closed, and its warm
#: worker stops after its idle limit unless another test takes it up again. An open session keeps its warm
#: worker up: with no limit, a clean-clone CI run of 8958634 held 41 warm workers at once near its end, 22 GB of
#: the 2-core machine's 23 GB.
MAX_SHARED_SESSIONS = 6


def shared_session(release: str, model: str = "kimi-k2.6", draft: str | None = "eagle3", hardware: str = "rtx-pro-6000",
                   gpus: int = 8, jobs: int = 1) -> Session:
    """A started session reused by the tests that ask for the same target (workers take ~7 s), most recently
    used ones kept (:data:`MAX_SHARED_SESSIONS`): use it in the test that asked, not across tests."""
    require_release(release)
    key = (release, model, draft, hardware, gpus, jobs)
    session = _SESSIONS.pop(key, None)
    if session is None:
        target = TargetSpec(release=release, model=model, draft=draft, hardware=hardware, gpus=gpus).resolve()
        session = Session(target, jobs=jobs, timeout=120)
        session.start()
    _SESSIONS[key] = session  # the most recently used last
    while len(_SESSIONS) > MAX_SHARED_SESSIONS:
        _SESSIONS.pop(next(iter(_SESSIONS))).close()
    return session


@pytest.fixture(scope="session", autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    for session in _SESSIONS.values():
        session.close()
    _SESSIONS.clear()


def warm_daemons() -> list[psutil.Process]:
    """The warm worker daemons this test session started (they carry its marker), in any BISECT_SPEC_HOME."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if (warm.DAEMON_MODULE in proc.cmdline()
                    and proc.environ().get(TEST_SESSION_ENV) == os.environ[TEST_SESSION_ENV]):
                found.append(proc)
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, spread the ``slow`` tests over the workers and start them first.

    xdist's ``worksteal`` gives each of its N workers a contiguous run of the collection and
    lets an idle one take the second half of another's queue. Slow tests left together at the
    end of one run would then finish long after the rest; here each run of the collection
    starts with its share of them. Every worker collects the same order (xdist checks it).
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    slow = [item for item in items if item.get_closest_marker("slow")]
    if workers < 2 or not slow:
        return
    rest = [item for item in items if not item.get_closest_marker("slow")]
    ordered: list[pytest.Item] = []
    for worker in range(workers):
        ordered += slow[worker::workers] + rest[len(rest) * worker // workers:len(rest) * (worker + 1) // workers]
    items[:] = ordered


def pytest_sessionfinish(session: pytest.Session) -> None:
    """At the end of the run, stop every warm worker it started (SIGTERM: they stop their workers).

    Under pytest-xdist the controller does it, once every worker has finished: a worker that
    finishes first must not stop warm workers that another one still uses.
    """
    if hasattr(session.config, "workerinput"):
        return
    daemons = warm_daemons()
    for proc in daemons:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(daemons, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


@pytest.fixture
def janitor() -> Iterator[Janitor]:
    """Kills what the test started, even when it fails (see :class:`Janitor`)."""
    keeper = Janitor()
    try:
        yield keeper
    finally:
        keeper.cleanup()


def load_script(name: str) -> types.ModuleType:
    """``scripts/<name>.py`` as a module (registered under its name: its dataclasses resolve annotations there)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

"""``BISECT_SPEC_WARM``: which commands evaluate on warm workers (``commands``: probe and shrink; ``all``: every one)."""

from __future__ import annotations

import pytest

from bisect_spec.errors import UsageError
from bisect_spec.runtime import warm


@pytest.mark.parametrize(("scope", "idle", "expected"), [
    ("", "300", False), ("commands", "300", False), ("all", "300", True), (" all ", "300", True),
    ("all", "0", False),  # warm workers off: every command starts its own
])
def test_the_scope_says_whether_every_command_is_warm(monkeypatch: pytest.MonkeyPatch, scope: str, idle: str,
                                                      expected: bool) -> None:
    monkeypatch.setenv(warm.SCOPE_ENV, scope)
    monkeypatch.setenv(warm.IDLE_ENV, idle)
    assert warm.everywhere() is expected


def test_an_unknown_scope_is_one_line_naming_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(warm.SCOPE_ENV, "sweeps")
    with pytest.raises(UsageError) as raised:
        warm.everywhere()
    assert str(raised.value) == ("BISECT_SPEC_WARM=sweeps is not a scope: set BISECT_SPEC_WARM=all (every command on "
                                 "warm workers) or BISECT_SPEC_WARM=commands (probe and shrink only, the default)")
    assert raised.value.exit_code == 2


def test_the_warm_workers_code_version_covers_the_daemons_import_closure() -> None:
    # an edit of any module the daemon runs (runtime/processes.py was missing from a hand-kept list) starts a fresh
    # worker; so does one under inside/, which the worker runs
    from bisect_spec.runtime import warm

    version = warm._code_version()
    for module in ("runtime/processes.py", "runtime/worker.py", "runtime/warm_daemon.py", "model/flags.py",
                   "inside/evaluator.py", "inside/launch/memory_pool.py"):
        assert f"{module}:" in version, module


@pytest.mark.parametrize(("name", "expected"), [
    ("SGLang 0.5.23 on h100", True), ("SGLang 0.5.23 on h100x8", True), ("0.5.23", True), ("0123abcd", True),
    ("SGLang 0.5.23 on h100x1", True), ("SGLang 0.5.23 on h200x8", False), ("SGLang 0.5.12", False),
])
def test_workers_stop_takes_a_target_with_or_without_its_gpu_count(name: str, expected: bool) -> None:
    """One warm worker serves every GPU count of its box; a session names its target with the count."""
    state = {"key": "0123abcd", "label": "SGLang 0.5.23 on h100"}
    assert warm.names_worker(name, state) is expected
    assert warm.names_worker("SGLang 0.5.23 on rtx-pro-6000x8", {"key": "k", "label": "SGLang 0.5.23 on rtx-pro-6000"})


@pytest.mark.parametrize(("scope", "starts"), [("all", True), ("commands", False)])
def test_a_bisections_reuse_starts_a_warm_worker_only_when_every_command_is_warm(
        monkeypatch: pytest.MonkeyPatch, scope: str, starts: bool) -> None:
    """``bisect`` reuses a warm worker that runs; with ``BISECT_SPEC_WARM=all`` it starts one as every command does."""
    from bisect_spec.api import TargetSpec
    from bisect_spec.runtime.environments import Environment
    from bisect_spec.runtime.session import Session

    monkeypatch.setenv(warm.SCOPE_ENV, scope)
    monkeypatch.setenv(warm.IDLE_ENV, "300")
    target = TargetSpec(release="0.5.23", model="llama-3.1-8b", draft=None, hardware="h100").resolve()
    session = Session(target, warm="reuse", environment=Environment("0.5.23", "python3", (), False, None))
    assert isinstance(session.pool, warm.WarmPool) and session.pool.start_if_missing is starts

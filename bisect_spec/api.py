"""Public Python API: what the CLI calls, usable from your own code and tests.

Example (with SGLang 0.5.23 installed: ``bisect-spec env install 0.5.23``)::

    >>> from bisect_spec import api
    >>> target = api.TargetSpec(release="0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    >>> result = api.probe(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3"], target)
    >>> print(result.outcome.status)
    failed
    >>> print(result.outcome.headline)
    AssertionError (srt/arg_groups/speculative_hook.py:... in _handle_eagle_family)
    >>> print(result.outcome.frame["statement"])
    assert cfg.speculative_eagle_topk is None and cfg.speculative_num_draft_tokens is None
    >>> result.notes
    ["added --speculative-draft-model-path for the 'eagle3' draft"]

Many evaluations: :class:`ProbeSession` (one warm worker, each probe a few milliseconds once it is up)::

    >>> with api.ProbeSession(api.TargetSpec(release="0.5.23", hardware="rtx-pro-6000")) as session:
    ...     for steps in ("1", "2"):
    ...         print(session.probe(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", steps]).outcome.status)
    failed
    failed

The examples in this package's docstrings run as doctests (``tests/unit/test_doctests.py``).

This module is the façade: every name here lives in a layer below it (``docs/internals.md``), mostly
in :mod:`bisect_spec.workflows`. Import from here; the layout underneath may move. The command line is a thin
layer over it: besides these names it reads only the renderers of :mod:`bisect_spec.report` (results as text),
and the runtime only where a command manages it (``env``, ``runs``, ``workers``).

Besides the workflows, the names a caller needs to build their input and read the output:

* configurations: :class:`Config`, :func:`env_assignment` (``VAR=value``), the ``@model``/``@draft``
  placeholders :data:`MODEL_TOKEN` and :data:`DRAFT_TOKEN`, a shrink's :class:`Budget`;
* targets: the profile names (:func:`model_names`, :func:`draft_names`, :func:`hardware_names`),
  :data:`DEFAULT_HARDWARE`, :data:`DEFAULT_GPUS`; :class:`Session`, what ``on_start`` callbacks are handed;
* where evaluations run: :data:`EXECUTORS` (:data:`LOCAL_EXECUTOR` the default);
* strategies: :func:`strategy_names`, :func:`load_strategy`;
* the release smoke's record: :func:`smoke_status`, :func:`smoke_is_stale`, :data:`SMOKE_SCHEMA`;
* stored summaries: :func:`check_grep` (a ``--grep`` filter checked before a run is read).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bisect_spec.model.flags import Config, env_assignment
    from bisect_spec.reduce.shrink import Budget
    from bisect_spec.runtime.executor import EXECUTORS
    from bisect_spec.runtime.executor import LOCAL as LOCAL_EXECUTOR
    from bisect_spec.runtime.pasted_command import understand_flags
    from bisect_spec.runtime.profiles import DEFAULT_GPUS, DEFAULT_HARDWARE, draft_names, hardware_names, model_names
    from bisect_spec.runtime.session import DRAFT as DRAFT_TOKEN
    from bisect_spec.runtime.session import MODEL as MODEL_TOKEN
    from bisect_spec.runtime.session import Session
    from bisect_spec.runtime.target_spec import DEFAULT_DRAFT, DEFAULT_MODEL, TargetSpec
    from bisect_spec.search.plan import load_strategy, strategy_names
    from bisect_spec.workflows.bisect import bisect, bisect_commits, is_release_name, release_history
    from bisect_spec.workflows.crosscheck import CrosscheckReport, configs_to_crosscheck, crosscheck, selected_from_summary
    from bisect_spec.workflows.diff import DiffReport, diff
    from bisect_spec.workflows.nightly import run_nightly as nightly
    from bisect_spec.workflows.probe import ProbeResult, ProbeSession, probe, shrink_space, verify_release
    from bisect_spec.workflows.real_launch import LaunchPlan, LaunchReport, launch, launch_plan
    from bisect_spec.workflows.shrink import (
        ShrinkReport,
        evidence_of,
        failure_hints,
        report_names,
        shrink,
        shrink_in_session,
        write_reproducers,
    )
    from bisect_spec.workflows.smoke import SCHEMA as SMOKE_SCHEMA
    from bisect_spec.workflows.smoke import is_stale as smoke_is_stale
    from bisect_spec.workflows.smoke import status as smoke_status
    from bisect_spec.workflows.stored_reports import check_grep, report, report_input
    from bisect_spec.workflows.sweep import SweepResult, SweepRun, failures_for_ci, sweep

#: where each public name lives (``module`` or ``module:attribute``): imported on first use, so a
#: command imports only the layers it needs (the CLI's start-up; see ``scripts/bench_probe.py``)
_WHERE = {
    "Budget": "bisect_spec.reduce.shrink",
    "Config": "bisect_spec.model.flags",
    "CrosscheckReport": "bisect_spec.workflows.crosscheck",
    "DEFAULT_DRAFT": "bisect_spec.runtime.target_spec",
    "DEFAULT_GPUS": "bisect_spec.runtime.profiles",
    "DEFAULT_HARDWARE": "bisect_spec.runtime.profiles",
    "DEFAULT_MODEL": "bisect_spec.runtime.target_spec",
    "DRAFT_TOKEN": "bisect_spec.runtime.session:DRAFT",
    "DiffReport": "bisect_spec.workflows.diff",
    "EXECUTORS": "bisect_spec.runtime.executor",
    "LOCAL_EXECUTOR": "bisect_spec.runtime.executor:LOCAL",
    "LaunchPlan": "bisect_spec.workflows.real_launch",
    "LaunchReport": "bisect_spec.workflows.real_launch",
    "MODEL_TOKEN": "bisect_spec.runtime.session:MODEL",
    "ProbeResult": "bisect_spec.workflows.probe",
    "ProbeSession": "bisect_spec.workflows.probe",
    "SMOKE_SCHEMA": "bisect_spec.workflows.smoke:SCHEMA",
    "Session": "bisect_spec.runtime.session",
    "ShrinkReport": "bisect_spec.workflows.shrink",
    "SweepResult": "bisect_spec.workflows.sweep",
    "SweepRun": "bisect_spec.workflows.sweep",
    "TargetSpec": "bisect_spec.runtime.target_spec",
    "bisect": "bisect_spec.workflows.bisect",
    "bisect_commits": "bisect_spec.workflows.bisect",
    "check_grep": "bisect_spec.workflows.stored_reports",
    "configs_to_crosscheck": "bisect_spec.workflows.crosscheck",
    "crosscheck": "bisect_spec.workflows.crosscheck",
    "diff": "bisect_spec.workflows.diff",
    "draft_names": "bisect_spec.runtime.profiles",
    "env_assignment": "bisect_spec.model.flags",
    "evidence_of": "bisect_spec.workflows.shrink",
    "failure_hints": "bisect_spec.workflows.shrink",
    "failures_for_ci": "bisect_spec.workflows.sweep",
    "hardware_names": "bisect_spec.runtime.profiles",
    "is_release_name": "bisect_spec.workflows.bisect",
    "launch": "bisect_spec.workflows.real_launch",
    "launch_plan": "bisect_spec.workflows.real_launch",
    "load_strategy": "bisect_spec.search.plan",
    "model_names": "bisect_spec.runtime.profiles",
    "nightly": "bisect_spec.workflows.nightly:run_nightly",
    "probe": "bisect_spec.workflows.probe",
    "release_history": "bisect_spec.workflows.bisect",
    "report": "bisect_spec.workflows.stored_reports",
    "report_input": "bisect_spec.workflows.stored_reports",
    "report_names": "bisect_spec.workflows.shrink",
    "selected_from_summary": "bisect_spec.workflows.crosscheck",
    "shrink": "bisect_spec.workflows.shrink",
    "shrink_in_session": "bisect_spec.workflows.shrink",
    "shrink_space": "bisect_spec.workflows.probe",
    "smoke_is_stale": "bisect_spec.workflows.smoke:is_stale",
    "smoke_status": "bisect_spec.workflows.smoke:status",
    "strategy_names": "bisect_spec.search.plan",
    "sweep": "bisect_spec.workflows.sweep",
    "understand_flags": "bisect_spec.runtime.pasted_command",
    "verify_release": "bisect_spec.workflows.probe",
    "write_reproducers": "bisect_spec.workflows.shrink",
}

__all__ = [
    "DEFAULT_DRAFT", "DEFAULT_GPUS", "DEFAULT_HARDWARE", "DEFAULT_MODEL", "DRAFT_TOKEN", "EXECUTORS", "LOCAL_EXECUTOR",
    "MODEL_TOKEN", "SMOKE_SCHEMA", "Budget", "Config", "CrosscheckReport", "DiffReport", "LaunchPlan", "LaunchReport",
    "ProbeResult", "ProbeSession", "Session", "ShrinkReport", "SweepResult", "SweepRun", "TargetSpec", "bisect",
    "bisect_commits", "check_grep", "configs_to_crosscheck", "crosscheck", "diff", "draft_names", "env_assignment",
    "evidence_of", "failure_hints", "failures_for_ci", "hardware_names", "is_release_name", "launch", "launch_plan",
    "load_strategy", "model_names", "nightly", "probe", "release_history", "report", "report_input", "report_names",
    "selected_from_summary", "shrink", "shrink_in_session", "shrink_space", "smoke_is_stale", "smoke_status",
    "strategy_names", "sweep", "understand_flags", "verify_release", "write_reproducers",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

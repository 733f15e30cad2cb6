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
in :mod:`bisect_spec.workflows`. Import from here; the layout underneath may move.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bisect_spec.runtime.pasted_command import understand_flags
    from bisect_spec.runtime.target_spec import DEFAULT_DRAFT, DEFAULT_MODEL, TargetSpec
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
    from bisect_spec.workflows.stored_reports import report, report_input
    from bisect_spec.workflows.sweep import SweepResult, SweepRun, failures_for_ci, sweep

#: where each public name lives (``module`` or ``module:attribute``): imported on first use, so a
#: command imports only the layers it needs (the CLI's start-up; see ``scripts/bench_probe.py``)
_WHERE = {
    "CrosscheckReport": "bisect_spec.workflows.crosscheck",
    "DEFAULT_DRAFT": "bisect_spec.runtime.target_spec",
    "DiffReport": "bisect_spec.workflows.diff",
    "DEFAULT_MODEL": "bisect_spec.runtime.target_spec",
    "LaunchPlan": "bisect_spec.workflows.real_launch",
    "LaunchReport": "bisect_spec.workflows.real_launch",
    "ProbeResult": "bisect_spec.workflows.probe",
    "ProbeSession": "bisect_spec.workflows.probe",
    "ShrinkReport": "bisect_spec.workflows.shrink",
    "SweepResult": "bisect_spec.workflows.sweep",
    "SweepRun": "bisect_spec.workflows.sweep",
    "TargetSpec": "bisect_spec.runtime.target_spec",
    "bisect": "bisect_spec.workflows.bisect",
    "bisect_commits": "bisect_spec.workflows.bisect",
    "configs_to_crosscheck": "bisect_spec.workflows.crosscheck",
    "crosscheck": "bisect_spec.workflows.crosscheck",
    "diff": "bisect_spec.workflows.diff",
    "evidence_of": "bisect_spec.workflows.shrink",
    "failure_hints": "bisect_spec.workflows.shrink",
    "failures_for_ci": "bisect_spec.workflows.sweep",
    "is_release_name": "bisect_spec.workflows.bisect",
    "launch": "bisect_spec.workflows.real_launch",
    "launch_plan": "bisect_spec.workflows.real_launch",
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
    "sweep": "bisect_spec.workflows.sweep",
    "understand_flags": "bisect_spec.runtime.pasted_command",
    "verify_release": "bisect_spec.workflows.probe",
    "write_reproducers": "bisect_spec.workflows.shrink",
}

__all__ = [
    "DEFAULT_DRAFT", "DEFAULT_MODEL", "CrosscheckReport", "DiffReport", "LaunchPlan", "LaunchReport", "ProbeResult",
    "ProbeSession", "ShrinkReport", "SweepResult", "SweepRun", "TargetSpec", "bisect", "bisect_commits", "configs_to_crosscheck",
    "crosscheck", "diff", "evidence_of", "failure_hints", "failures_for_ci", "is_release_name", "launch", "launch_plan",
    "nightly", "probe", "release_history", "report", "report_input", "report_names", "selected_from_summary", "shrink",
    "shrink_in_session", "shrink_space", "sweep", "understand_flags", "verify_release", "write_reproducers",
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

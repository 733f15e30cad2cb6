"""Reports of stored runs and nightlies: read them from disk (:func:`report_input`) and render them (:func:`report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bisect_spec.errors import UsageError


def report_input(target: str | Path, *, runs_dir: Path = Path("runs")) -> Any:
    """Read what a report is made of: a sweep run (id or directory) or a nightly (directory or ``nightly.json``).

    :return: a :class:`bisect_spec.report.report_model.SweepInput` or :class:`bisect_spec.report.report_model.NightlyInput`.
    :raises UsageError: no such run or path, or a directory that is neither a run nor a nightly.
    :raises StoreError: the run did not finish, or its files / the nightly file are corrupt.
    """
    from bisect_spec.errors import StoreError
    from bisect_spec.report.report_model import NightlyInput, SweepInput
    from bisect_spec.runtime import store

    path = Path(target)
    if not path.exists() and not path.is_absolute() and "/" not in str(target) and runs_dir.is_dir():
        path = runs_dir / store.resolve_run_id(runs_dir, str(target))  # an id, latest, or a unique prefix
    if not path.exists() and not path.is_absolute() and (runs_dir / path).is_dir():
        path = runs_dir / path
    if not path.exists():
        known = store.list_runs(runs_dir)
        hint = f"; recent runs: {', '.join(r['id'] for r in known[-3:])}" if known else ""
        raise UsageError(f"no run or nightly '{target}': not a path, and no run '{target}' in {runs_dir}{hint}")
    if path.is_file() and path.name in ("run.json", "summary.json", store.RESULTS, store.PLAIN_RESULTS):
        path = path.parent
    if path.is_file() and path.suffix != ".json":
        raise UsageError(f"{path} is neither a bisect-spec run (a directory with run.json) nor a nightly (nightly.json)")
    nightly_file = path if path.is_file() else path / "nightly.json"
    if nightly_file.is_file():
        from bisect_spec.workflows.nightly import read_nightly

        return NightlyInput(read_nightly(nightly_file))
    if not (path.is_dir() and (path / "run.json").is_file()):
        raise UsageError(f"{path} is neither a bisect-spec run (no run.json) nor a nightly (no nightly.json)")
    if not (path / "summary.json").is_file():
        raise StoreError(f"run {path.name} did not finish (no summary.json): continue it with "
                         f"bisect-spec --resume {path.name}, then report")
    advice = "the run cannot be reported; run the sweep again"
    meta, summary = store.read_json(path / "run.json", advice), store.read_json(path / "summary.json", advice)
    return SweepInput(path.name, meta, summary, store.read_results(path, advice) or [])


def report(target_path: str | Path, fmt: str = "md", *, runs_dir: Path = Path("runs"), algorithm: str | None = None,
           flag: str | None = None, grep: str | None = None) -> str:
    """A report of a sweep run or a nightly matrix as ``md``, ``json`` (schema ``bisect-spec/report/1``), ``junit`` or ``html``.

    :param target_path: a run id (looked up in ``runs_dir``), a run directory, a nightly directory or its ``nightly.json``.
    :param algorithm: / :param flag: / :param grep: only the failure signatures that match
        (:func:`bisect_spec.report.summary.matches`); counts and pictures keep every configuration.
    :raises UsageError: unknown format, a bad ``grep`` expression, or see :func:`report_input`.
    """
    from bisect_spec.report.formats import FORMATS, render

    if fmt not in FORMATS:
        raise UsageError(f"unknown report format '{fmt}': choose one of {', '.join(FORMATS)}")
    data = report_input(target_path, runs_dir=runs_dir)
    if algorithm is not None or flag is not None or grep is not None:
        data = filtered(data, algorithm=algorithm, flag=flag, grep=grep)
    return render(data, fmt)


def check_grep(grep: str | None) -> None:
    """:raises UsageError: ``grep`` is not a regular expression (one line naming the problem)."""
    import re

    if grep is not None:
        try:
            re.compile(grep)
        except re.error as exc:
            raise UsageError(f"--grep '{grep}' is not a regular expression: {exc}") from None


def filtered(data: Any, *, algorithm: str | None, flag: str | None, grep: str | None) -> Any:
    """The report's input with only the failure signatures that match (a sweep's, or each nightly cell's)."""
    import dataclasses

    from bisect_spec.report.report_model import SweepInput
    from bisect_spec.report.summary import matches

    check_grep(grep)

    def keep(signatures: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [s for s in signatures if matches(s, algorithm=algorithm, flag=flag, grep=grep)]

    if isinstance(data, SweepInput):
        return dataclasses.replace(data, summary={**data.summary, "signatures": keep(data.summary["signatures"])})
    nightly = {**data.nightly, "cells": [{**c, "signatures": keep(c.get("signatures") or [])}
                                         for c in data.nightly.get("cells", [])]}
    return dataclasses.replace(data, nightly=nightly)

"""The nightly compatibility matrix: one sweep per cell, compared with the previous nightly.

A nightly lives in ``<out>/<id>/``::

    nightly.json      the matrix, each cell's state and signatures, the changes (bisect-spec/nightly/1)
    nightly.md        the same for people
    runs/<cell>/<run> each cell's sweep, in the ordinary run format (resumable)

``nightly.json`` is rewritten atomically after every cell, so a nightly killed half-way
resumes with ``--resume ID``: finished cells are kept, an interrupted cell's sweep resumes
from its journal. Failures are compared by cross-release key, so a signature whose line,
file or message drifted is reported as *moved* or *changed*, not as fixed-plus-new. Each failure's verdict
for the night (new, still failing, fixed, known) is :func:`bisect_spec.report.night.night_verdicts`'s, which
the exit status, ``nightly.md``, the terminal and every report read (``failures`` in ``nightly.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bisect_spec.errors import BisectSpecError, ExecutorError, StoreError, UsageError
from bisect_spec.model.outcome import STAGE_ORDER
from bisect_spec.model.signature import normalise_message
from bisect_spec.report.night import NEW, night_verdicts, verdict_counts
from bisect_spec.runtime import environments
from bisect_spec.runtime.files import atomic_write
from bisect_spec.runtime.store import list_runs, read_json
from bisect_spec.workflows.matrix import Cell, Matrix, load_matrix
from bisect_spec.workflows.sweep import sweep

SCHEMA = "bisect-spec/nightly/1"
ProgressFn = Callable[[str], None]


def new_id(matrix: Matrix) -> str:
    salt = hashlib.sha1(f"{time.time_ns()}{os.getpid()}".encode()).hexdigest()[:4]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{matrix.name}-{salt}"


def _cell_record(cell: Cell, strategy: str) -> dict[str, Any]:
    return {"id": cell.id, "release": cell.release, "model": cell.model, "draft": cell.draft,
            "hardware": f"{cell.hardware}x{cell.gpus}", "strategy": strategy, "status": "pending", "reason": None,
            "run": None, "evaluated": 0, "counts": {}, "signatures": []}


def list_nightlies(out: Path) -> list[dict[str, Any]]:
    """Nightlies under ``out`` with a readable ``nightly.json``, oldest first."""
    found = []
    if out.is_dir():
        for path in sorted(out.iterdir()):
            try:
                data = json.loads((path / "nightly.json").read_text())
            except (OSError, ValueError):
                continue
            if data.get("schema") == SCHEMA:
                found.append(data | {"path": str(path)})
    return found


def read_nightly(path: Path) -> dict[str, Any]:
    """A stored nightly (a directory or its ``nightly.json``).

    :raises StoreError: missing, unreadable or not a nightly.
    """
    file = path / "nightly.json" if path.is_dir() else path
    if not file.is_file():
        raise StoreError(f"{path} is not a nightly (no nightly.json)")
    data = read_json(file, "rerun bisect-spec nightly")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise StoreError(f"{file} is not a bisect-spec nightly (schema {found!r}, expected {SCHEMA!r})")
    return data


def pick_baseline(out: Path, name: str, baseline: str | None, exclude: str) -> dict[str, Any] | None:
    """The nightly to compare against: ``none``, a path or id, or (default) the newest finished one of ``name``."""
    if baseline == "none":
        return None
    if baseline not in (None, "latest"):
        candidate = Path(baseline)
        return read_nightly(candidate if candidate.exists() else out / baseline)
    finished = [n for n in list_nightlies(out) if n["matrix"].get("name") == name and n.get("finished")
                and n["id"] != exclude]
    return finished[-1] if finished else None


def compare(before: dict[str, Any] | None, after: dict[str, Any]) -> list[dict[str, Any]]:
    """Changes per cell against the baseline nightly, matched by cross-release key.

    ``new`` (a regression), ``vanished`` (fixed), ``not-checked`` (gone from a stage the newer cell's release
    does not run), ``masked`` (new, where the older cell failed earlier in such a stage), ``location-moved``,
    ``message-changed``.
    A cell the baseline had is compared with itself. A cell it did not have (a release
    that came out since) is compared with the same model/draft/hardware on the newest
    older release of this nightly, so a new release's new failures are regressions too;
    ``against`` names the cell compared with. Without a baseline nothing is compared (the
    first nightly is the baseline). Cells not done on either side are not compared. Pure.
    """
    counterparts = compared_with(before, after)
    changes: list[dict[str, Any]] = []
    for cell in after.get("cells", []):
        if cell["id"] in counterparts:
            changes += _cell_changes(counterparts[cell["id"]], cell)
    return changes


def compared_with(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each done cell of ``after`` and the cell it is compared with (:func:`compare`); a cell with none is absent."""
    if before is None:
        return {}
    old_cells = {c["id"]: c for c in before.get("cells", []) if c.get("status") == "done"}
    done = [c for c in after.get("cells", []) if c.get("status") == "done"]
    pairs: dict[str, dict[str, Any]] = {}
    for cell in done:
        old = old_cells.get(cell["id"])
        if old is None:
            facet = (cell["model"], cell["draft"], cell["hardware"])
            older = [c for c in done if (c["model"], c["draft"], c["hardware"]) == facet
                     and environments.version_key(c["release"]) < environments.version_key(cell["release"])]
            if not older:
                continue
            old = max(older, key=lambda c: environments.version_key(c["release"]))
        pairs[cell["id"]] = old
    return pairs


def _cell_changes(old: dict[str, Any], cell: dict[str, Any]) -> list[dict[str, Any]]:
    was = {s["cross_release_key"]: s for s in old.get("signatures", [])}
    now = {s["cross_release_key"]: s for s in cell.get("signatures", [])}

    def brief(sig: dict[str, Any]) -> dict[str, Any]:
        return {"signature": sig["id"], "location": sig.get("location"), "message": sig.get("message"),
                "smallest": sig.get("smallest"), "count": sig.get("count")}

    def change(kind: str, key: str, a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
        sig = b or a
        assert sig is not None
        return {"cell": cell["id"], "against": old["id"], "change": kind, "cross_release_key": key,
                "signature": sig["id"], "title": sig.get("title"), "before": brief(a) if a else None,
                "after": brief(b) if b else None}

    # a failure of a stage the newer cell's launch path never ran there was not checked, not fixed (0.5.14+ do not
    # size the memory pool yet: a pool that did not fit on 0.5.13 would otherwise read "vanished (fixed)")
    covered = cell.get("stages_run")

    def gone(sig: dict[str, Any]) -> str:
        return "not-checked" if covered is not None and sig.get("stage") and sig["stage"] not in covered else "vanished"

    unchecked = [was[key]["stage"] for key in was.keys() - now.keys() if gone(was[key]) == "not-checked"]

    def arrived(sig: dict[str, Any]) -> str:
        # new here, where the older cell failed earlier in a stage this release does not run: the same
        # configurations may have met it there too, behind that failure, so it is not counted as a regression
        stage = sig.get("stage")
        later = stage in STAGE_ORDER and any(STAGE_ORDER.index(stage) > STAGE_ORDER.index(u)
                                             for u in unchecked if u in STAGE_ORDER)
        return "masked" if later else "new"

    out = [change(arrived(now[key]), key, None, now[key]) for key in sorted(now.keys() - was.keys())]
    out += [change(gone(was[key]), key, was[key], None) for key in sorted(was.keys() - now.keys())]
    for key in sorted(was.keys() & now.keys()):
        a, b = was[key], now[key]
        if a.get("location") != b.get("location"):
            out.append(change("location-moved", key, a, b))
        elif normalise_message(str(a.get("message", ""))) != normalise_message(str(b.get("message", ""))):
            out.append(change("message-changed", key, a, b))
    return out


def run_nightly(matrix_file: str | Path, *, out: Path = Path("nightlies"), resume: str | None = None,
                baseline: str | None = "latest", jobs: int | None = None, progress: ProgressFn | None = None,
                install: bool = True, timeout: float = 60.0, executor: str = "local",
                address: str | None = None) -> dict[str, Any]:
    """Sweep every cell of a matrix (:func:`bisect_spec.workflows.sweep.sweep`) and compare with the baseline nightly.

    :param resume: id of an interrupted nightly to continue (the matrix file is re-read).
    :param baseline: ``latest`` (default), ``none``, or a nightly id/path.
    :param install: build missing release environments (else such cells are skipped).
    :param executor: / :param address: where each cell's evaluations run (see :func:`bisect_spec.workflows.sweep.sweep`).
    :return: the ``nightly.json`` data.
    :raises UsageError: bad matrix file. :raises StoreError: unwritable output, unknown resume id.
    """
    from bisect_spec.runtime.target_spec import TargetSpec

    matrix = load_matrix(matrix_file)
    if resume is not None:
        path = out / resume
        data = read_nightly(path)
        if data["matrix"].get("name") != matrix.name:
            raise UsageError(f"nightly {resume} ran matrix '{data['matrix'].get('name')}', not '{matrix.name}'")
    else:
        nightly_id = new_id(matrix)
        path = out / nightly_id
        try:
            path.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise StoreError(f"cannot create {path}: {exc.strerror or exc}") from exc
        data = {"schema": SCHEMA, "id": nightly_id, "matrix": matrix.to_dict(), "baseline": None,
                "started": time.time(), "finished": None,
                "cells": [_cell_record(c, matrix.strategy) for c in matrix.cells], "changes": [], "regressions": 0}
    known_cells = {c["id"]: c for c in data["cells"]}
    data["cells"] = [known_cells.get(c.id) or _cell_record(c, matrix.strategy) for c in matrix.cells]

    def save() -> None:
        try:
            atomic_write(path / "nightly.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise StoreError(f"cannot write {path / 'nightly.json'}: {exc.strerror or exc}") from exc

    save()
    for number, (cell, record) in enumerate(zip(matrix.cells, data["cells"], strict=True), 1):
        if record["status"] in ("done", "skipped"):
            continue
        if progress:
            progress(f"[{number}/{len(matrix.cells)}] {cell.id}")
        runs_dir = path / "runs" / cell.slug
        try:
            if cell.release not in environments.installed():
                if not install:
                    raise BisectSpecError(f"SGLang {cell.release} is not installed (nightly runs with --no-install)")
                environments.install(cell.release)
            unfinished = [r["id"] for r in list_runs(runs_dir) if not r["complete"]]
            finished = [r["id"] for r in list_runs(runs_dir) if r["complete"]]
            spec = TargetSpec(release=cell.release, model=cell.model, draft=cell.draft, hardware=cell.hardware,
                              gpus=cell.gpus)
            if finished:
                from bisect_spec.runtime.store import read_run

                _meta, _entries, summary = read_run(runs_dir, finished[-1])
                run_id = finished[-1]
            else:
                result = sweep(spec, strategy=matrix.strategy, jobs=jobs or matrix.jobs, runs_dir=runs_dir,
                               resume=unfinished[-1] if unfinished else None, seed=matrix.seed,
                               random_budget=matrix.budget, timeout=timeout, shrink=matrix.shrink,
                               executor=executor, address=address, algorithms="all")
                summary, run_id = result.summary, result.run_id
        except (StoreError, UsageError, ExecutorError):  # the whole nightly cannot run, not this cell
            raise
        except BisectSpecError as exc:  # release unavailable, model unknown to it, worker won't start
            record.update(status="skipped", reason=str(exc))
            save()
            continue
        assert summary is not None
        record.update(status="done", run=f"runs/{cell.slug}/{run_id}", evaluated=summary["evaluated"],
                      counts=summary["counts"], verdicts=summary.get("verdicts") or {},
                      signatures=[_signature_entry(s) for s in summary["signatures"]],
                      stages_run=summary.get("stages_run"))
        save()
    chosen = pick_baseline(out, matrix.name, baseline, exclude=data["id"])
    data["baseline"] = chosen["id"] if chosen else None
    data["changes"] = compare(chosen, data)
    counterparts = compared_with(chosen, data)
    for record in data["cells"]:  # what each cell was compared with: the night's verdicts read it
        record["against"] = counterparts[record["id"]]["id"] if record["id"] in counterparts else None
    data["failures"] = night_verdicts(data)
    data["regressions"] = verdict_counts(data["failures"])[NEW]
    if matrix.repo and data["regressions"]:
        bisect_regressions(data, matrix.repo, progress=progress)
    data["finished"] = time.time()
    save()
    from bisect_spec.report.text import nightly_markdown

    atomic_write(path / "nightly.md", nightly_markdown(data))
    data["path"] = str(path)
    return data


#: What one regression's commit bisection is: (smallest argv, cell, older release, newer release) -> summary.
CommitBisector = Callable[[list[str], dict[str, Any], str, str], dict[str, Any]]


def bisect_regressions(data: dict[str, Any], repo: str, *, progress: ProgressFn | None = None,
                       bisect: CommitBisector | None = None, limit: int = 5) -> None:
    """Bisect each regression between two releases down to the commit; the result goes into the
    change as ``commits`` (or ``{"error": ...}``, never an exception: the nightly is kept).

    A regression found against the same release (the baseline had this cell: what changed is
    not SGLang's code) is left alone with a note; at most ``limit`` regressions are bisected.
    """
    bisect = bisect or _commit_bisector(repo, progress)
    cells = {c["id"]: c for c in data["cells"]}
    regressions = [c for c in data["changes"] if c["change"] == "new"]
    for number, change in enumerate(regressions):
        older, newer = change["against"].split("/", 1)[0], cells[change["cell"]]["release"]
        if older == newer:
            change["commits"] = {"error": f"the baseline ran SGLang {newer} too: nothing in SGLang's history to bisect"}
            continue
        if number >= limit:
            change["commits"] = {"error": f"not bisected: only the first {limit} regressions are"}
            continue
        if progress:
            progress(f"bisecting {change['cross_release_key']} of {change['cell']} into the commits {older} … {newer}")
        try:
            change["commits"] = bisect(list((change.get("after") or {}).get("smallest") or []), cells[change["cell"]],
                                       older, newer)
        except BisectSpecError as exc:
            change["commits"] = {"error": str(exc)}


def _commit_bisector(repo_path: str, progress: ProgressFn | None) -> CommitBisector:
    """The real bisection: the cell's target, the commits between the two releases' tags."""
    from bisect_spec.model.flags import Config
    from bisect_spec.runtime.sources import Repo
    from bisect_spec.runtime.target_spec import TargetSpec
    from bisect_spec.workflows.commit_bisect import release_commits

    def bisect(argv: list[str], cell: dict[str, Any], older: str, newer: str) -> dict[str, Any]:
        hardware, _, gpus = str(cell["hardware"]).rpartition("x")
        spec = TargetSpec(model=cell["model"], draft=cell["draft"], hardware=hardware, gpus=int(gpus))
        report = release_commits(Config.from_argv(argv), spec, Repo(repo_path), older, newer, progress=progress)
        return commit_summary(report.to_dict())

    return bisect


def commit_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The few fields of a commit bisection a nightly keeps (``bisect-spec/commits/1`` has them all)."""
    keep = ("sha", "short", "subject", "date", "pr")
    return {"old": report["old"]["rev"], "new": report["new"]["rev"], "changed": report["changed"],
            "exact": report["exact"], "evaluations": report["evaluations"], "commits": report["commits"],
            "first": {k: report["first"][k] for k in keep} if report.get("first") else None,
            "candidates": [c["short"] for c in report["candidates"]], "notes": report["notes"]}


def _signature_entry(signature: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "cross_release_key", "kind", "exc_type", "location", "statement", "expression", "message", "title",
            "count", "smallest", "sglang_message", "example_frame", "stage")
    entry = {k: signature.get(k) for k in keep}
    # shown to people: the statement in the source's own words, not the signature's normal form (``_.``)
    entry["statement"] = (signature.get("example_frame") or {}).get("statement") or signature.get("statement")
    if signature.get("shrink"):
        entry["minimal_argv"] = signature["shrink"].get("minimal_argv")
    return entry

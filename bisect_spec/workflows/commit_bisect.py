"""One configuration across the commits between two SGLang revisions: the first commit that changes its verdict.

:func:`bisect_commits` is what ``bisect-spec bisect --repo PATH`` runs after the release
bisection (between the tags of the two releases it found), or instead of it with ``--old REV
--new REV``. It walks the first-parent commits between the two revisions that touch
``python/sglang/`` (:meth:`sources.Repo.first_parent_commits`) and evaluates a commit by
laying its ``python/sglang`` tree (``git archive``, cached by tree hash:
:func:`sources.materialise`) first on the import path of the **older release's**
environment. Every commit runs over the same release, so what changes between two probes
is SGLang's code only. :func:`commits.first_change` picks the commits.

A commit is **skipped**, like ``git bisect skip``, with its reason, when its code does not
import over that release (the worker does not start, or the evaluation fails while
importing an SGLang module or on a missing module), or when the evaluation crashes
(a timeout, GPU code the simulated box cannot run) — unless that is exactly what one end
does, which makes it that end's verdict. Both ends must evaluate.

The report names the first commit whose verdict differs from the old end's (hash, date,
subject, the pull request from the subject), the files it changed and the diff of the
failing function between its first parent and it; with skips, the candidates, as git
names them ("the first new commit could be any of").
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.errors import ArchitectureUnknown, ReleaseError, SourceError, UsageError
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.model.signature import normalise_message
from bisect_spec.reduce.commits import CommitSearch, first_change
from bisect_spec.runtime import environments, sources
from bisect_spec.workflows.timeline import verdict_key

ProgressFn = Callable[[str], None]
SCHEMA = "bisect-spec/commits/1"
#: An SGLang module's body on a traceback: the failure happened while importing it.
#: a module body that raised: a path into an ``sglang`` package, or relative to it (as a failure's traceback shows it)
_IMPORTING = re.compile(r'File "(?P<file>[^"]*?/sglang/[^"]+\.py|(?![/<])[^"]+\.py)", line \d+, in <module>')
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")
_HUNK = re.compile(r"^@@ -(?P<a>\d+)(?P<b>,\d+)? \+(?P<c>\d+)(?P<d>,\d+)? @@(?P<rest>.*)$")
_ANY_PACKAGE_PATH = re.compile(r"/[^\s'\"()]*?/sglang/")


@dataclass
class CommitReport:
    """What a commit bisection found; ``to_dict`` is the ``--json`` shape (``bisect-spec/commits/1``)."""

    config: Config
    target: dict[str, Any]
    repo: str
    old: dict[str, Any]
    new: dict[str, Any]
    base: str
    commits: int
    evaluated: list[dict[str, Any]]
    #: None when both ends agree (nothing to bisect)
    search: CommitSearch | None
    candidates: list[dict[str, Any]] = field(default_factory=list)
    last_old: dict[str, Any] | None = None
    first_new: dict[str, Any] | None = None
    function: dict[str, Any] | None = None
    diff: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exact(self) -> bool:
        return self.search is not None and self.search.exact

    @property
    def evaluations(self) -> int:
        """Evaluations made (a commit whose tree was evaluated already costs none)."""
        return sum(1 for record in self.evaluated if "same_tree_as" not in record)

    @property
    def first(self) -> dict[str, Any] | None:
        """The first commit with the new verdict, when it is known exactly."""
        return self.candidates[0] if self.exact and self.candidates else None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "config": self.config.argv(), "target": self.target, "repo": self.repo,
                "old": self.old, "new": self.new, "environment": self.base, "commits": self.commits,
                "evaluations": self.evaluations, "changed": self.search is not None, "exact": self.exact,
                "first": self.first, "candidates": self.candidates, "last_old": self.last_old,
                "first_new": self.first_new, "stopped": bool(self.search and self.search.stopped),
                "function": self.function, "diff": self.diff, "evaluated": self.evaluated, "notes": self.notes,
                "seconds": round(self.seconds, 1)}


def _package_relative(text: str) -> str:
    """Paths into a tree or an environment as ``sglang/...``: two commits broken the same way read the same."""
    return _ANY_PACKAGE_PATH.sub("sglang/", text)


def import_failure(outcome: Outcome) -> str | None:
    """Why an outcome says "this code does not import here" rather than a verdict, or None.

    A missing module, any exception raised while an SGLang module's body runs (a mixed tree
    calling a name its neighbour does not have yet), and a crash (GPU code refused, a timeout).
    """
    exception = outcome.exception
    what = _package_relative(f"{exception.get('type')}: {exception.get('message')}".strip(": "))
    if outcome.status in (Status.CRASHED, Status.TIMEOUT):
        return f"{outcome.status.value}: {outcome.record.get('crash') or what}"
    if outcome.status is not Status.FAILED:
        return None
    if exception.get("type") in _IMPORT_ERRORS:
        return f"does not import: {what}"
    found = _IMPORTING.findall(str(outcome.record.get("traceback_tail") or ""))
    if found:
        module = found[-1][found[-1].rfind("/sglang/") + 1:] if "/sglang/" in found[-1] else f"sglang/{found[-1]}"
        return f"does not import: {what} (while importing {module})"
    return None


class _CommitProber:
    """Evaluates the configuration on one commit at a time: its tree over the base release's environment."""

    def __init__(self, config: Config, spec: Any, repo: sources.Repo, base: environments.Environment, *,
                 progress: ProgressFn | None, timeout: float) -> None:
        self.config = config
        self.repo = repo
        self.base = base
        self.progress = progress
        self.timeout = timeout
        self.target = type(spec)(**{**spec.__dict__, "release": base.release}).resolve()
        self.by_tree: dict[str, dict[str, Any]] = {}
        self.records: list[dict[str, Any]] = []
        self.info: dict[str, sources.Commit] = {}
        self.ends: tuple[Hashable, Hashable] | None = None

    def commit(self, sha: str) -> sources.Commit:
        if sha not in self.info:
            self.info[sha] = self.repo.commit(sha)
        return self.info[sha]

    def _say(self, message: str) -> None:
        if self.progress:
            self.progress(message)

    def record(self, sha: str, role: str = "probe") -> dict[str, Any]:
        """Evaluate ``sha`` once per tree; the record of what it did (``key`` None when skipped)."""
        tree = self.repo.tree(sha)
        commit = self.commit(sha)
        base = {"commit": sha, "short": commit.short, "subject": commit.subject, "date": commit.date,
                "pr": commit.pr, "role": role, "tree": tree}
        if tree in self.by_tree:  # the same code as a commit already evaluated
            record = {**self.by_tree[tree], **base, "same_tree_as": self.by_tree[tree]["commit"]}
            self.records.append(record)
            return record
        started = time.perf_counter()
        self._say(f"evaluating {commit.short} ({role}): {commit.subject}")
        record = {**base, **self._evaluate(sha), "seconds": round(time.perf_counter() - started, 1)}
        self.by_tree[tree] = record
        self.records.append(record)
        return record

    def _evaluate(self, sha: str) -> dict[str, Any]:
        from bisect_spec.runtime.session import Session

        root = sources.materialise(self.repo, sha)
        label = f"{self.base.release}+g{sha[:12]}"
        environment = sources.overlay(self.base, root, label, None)
        target = dataclasses.replace(self.target, release=label)
        session = Session(target, jobs=1, timeout=self.timeout, environment=environment, warm="own")  # one tree, once
        try:
            try:
                session.start()
            except ArchitectureUnknown as exc:  # a verdict: this code cannot run the model
                return {"key": f"unsupported:{exc.architecture}", "verdict": "unsupported", "headline": str(exc)}
            except ReleaseError as exc:
                return {"key": None, "verdict": "skipped", "reason": f"does not import: {_last_line(exc)}"}
            try:
                config = session.with_draft(session.canonical(self.config))
            except UsageError as exc:
                return {"key": f"usage:{normalise_message(str(exc))}", "verdict": "usage", "headline": str(exc)}
            outcome = session.evaluate(config)
        finally:
            session.close()
        record: dict[str, Any] = {"key": verdict_key(outcome), "verdict": outcome.status.value,
                                  "headline": outcome.headline}
        if outcome.signature is not None:
            frame = outcome.frame
            record.update(signature=outcome.signature.id, cross_release_key=outcome.signature.cross_release_key,
                          location=outcome.signature.location, file=frame.get("file"), line=frame.get("line"),
                          function=frame.get("function"), statement=frame.get("statement"))
        failure = import_failure(outcome)
        if failure is not None:
            record["import_failure"] = failure
        return record

    def observe(self, sha: str) -> tuple[Hashable | None, str]:
        """For :func:`commits.first_change`: the commit's key, or None (skip) with the reason."""
        record = self.record(sha)
        assert self.ends is not None
        key = record.get("key")
        if key is not None and key not in self.ends and record.get("import_failure"):
            record.update(key=None, verdict="skipped", reason=record["import_failure"])
            key = None
        return key, str(record.get("reason") or "")


def _last_line(exc: BaseException) -> str:
    """The exception line of a worker's start failure (not the advice appended to it)."""
    text = str(exc).split("; this tree", 1)[0]
    found = re.search(r"\((\w+(?:Error|Exception)[^()]*(?:\([^()]*\)[^()]*)*)\)", text)
    return _package_relative(found.group(1) if found else text)[:300]


def _public(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "import_failure" or record.get("key") is None}


def function_diff(repo: sources.Repo, before: str, after: str, file: str, function: str) -> dict[str, Any]:
    """The failing function's source at ``before`` and ``after`` and their unified diff."""
    path = f"{sources.PACKAGE_PATH}/{file}"
    sides: dict[str, dict[str, Any]] = {}
    for name, rev in (("before", before), ("after", after)):
        found = sources.function_source(repo.read(rev, path), function)
        sides[name] = {"commit": repo.resolve(rev), "start": found[0] if found else None, "source": found[1] if found else None}

    def label(side: dict[str, Any]) -> str:
        where = f":{side['start']}" if side["start"] else " (no such function)"
        return f"{side['commit'][:12]}/{file}{where} ({function})"

    lines = {name: str(side["source"] or "").splitlines() for name, side in sides.items()}
    offsets = {name: (side["start"] or 1) - 1 for name, side in sides.items()}

    def in_file(line: str) -> str:  # hunk headers count lines of the file, not of the function
        match = _HUNK.match(line)
        if match is None:
            return line
        old_start, new_start = int(match["a"]) + offsets["before"], int(match["c"]) + offsets["after"]
        return f"@@ -{old_start}{match['b'] or ''} +{new_start}{match['d'] or ''} @@{match['rest']}"

    diff = "\n".join(in_file(line) for line in difflib.unified_diff(
        lines["before"], lines["after"], label(sides["before"]), label(sides["after"]), lineterm="", n=3))
    return {"file": file, "function": function, "before": sides["before"], "after": sides["after"], "diff": diff}


def bisect_commits(config: Config, spec: Any, repo: sources.Repo, old: str, new: str, *, base: str | None = None,
                   progress: ProgressFn | None = None, timeout: float = 120.0,
                   max_evaluations: int | None = None) -> CommitReport:
    """The first commit between ``old`` and ``new`` whose verdict for ``config`` differs from ``old``'s.

    :param spec: a :class:`~bisect_spec.api.TargetSpec` (its release is ignored).
    :param base: the release whose environment every commit is laid over (default: the
        release at or before ``old``'s version, built if missing).
    :param max_evaluations: stop with the range found so far after this many evaluations.
    :raises SourceError: revisions that do not exist or are in the wrong order, no commit
        between them touches ``python/sglang``, or an end cannot be evaluated.
    """
    started = time.perf_counter()
    old_sha, new_sha = repo.resolve(old), repo.resolve(new)
    listed = repo.first_parent_commits(old_sha, new_sha)
    if not listed:
        raise SourceError(f"no commit between {old} and {new} touches {sources.PACKAGE_PATH}: nothing to bisect")
    if base is None:
        version = sources.tree_version(sources.materialise(repo, old_sha)) or repo.nearest_tag_version(old_sha)
        if version is None:
            raise SourceError(f"cannot tell which release {old} is (no sglang/version.py, no v* tag before it): "
                              "name the release with --good, or run git fetch --tags in the clone")
        base = sources.release_at_or_before(version)
    if not environments.is_installed(base) and progress:
        progress(f"building the environment of SGLang {base}")
    environment = environments.ensure(base, progress=None)
    prober = _CommitProber(config, spec, repo, environment, progress=progress, timeout=timeout)
    ends = {}
    for role, sha, rev in (("old end", old_sha, old), ("new end", new_sha, new)):
        record = prober.record(sha, role)
        if record["key"] is None:  # the end's code does not import there: nothing to compare with
            why = record.get("reason")
            raise SourceError(f"the {role} {rev} cannot be evaluated over SGLang {base}'s environment ({why}); "
                              f"pick an --{role.split()[0]} that imports there")
        ends[role] = record
    notes: list[str] = []
    old_key, new_key = ends["old end"]["key"], ends["new end"]["key"]
    commits = [c.sha for c in listed]
    for commit in listed:
        prober.info.setdefault(commit.sha, commit)
    report = CommitReport(config=config, target={k: v for k, v in spec.__dict__.items() if k != "release"},
                          repo=str(repo.path), old={"rev": old, **_public(ends["old end"])},
                          new={"rev": new, **_public(ends["new end"])}, base=base, commits=len(commits),
                          evaluated=prober.records, search=None, notes=notes)
    if old_key == new_key:
        notes.append(f"no verdict change: {ends['old end']['verdict']} at both ends ({old} and {new})")
        report.seconds = time.perf_counter() - started
        return report
    prober.ends = (old_key, new_key)
    budget = None if max_evaluations is None else max(0, max_evaluations - 2)
    search = first_change(commits, prober.observe, old_key=old_key, new_key=new_key, max_probes=budget)
    report.search = search
    by_commit = {r["commit"]: r for r in prober.records if r["role"] == "probe"}
    by_commit[new_sha] = ends["new end"]
    last_old_sha = old_sha if search.last_old < 0 else commits[search.last_old]
    first_new_sha = commits[search.first_new]
    report.last_old = _public(ends["old end"] if search.last_old < 0 else by_commit[last_old_sha])
    report.first_new = _public(by_commit.get(first_new_sha) or prober.record(first_new_sha))
    untested = {commits[i] for i in search.untested}
    for sha in search.candidates:
        commit = prober.commit(sha)
        entry = {**commit.to_dict(), "changed_files": repo.changed_files(commit.parent, sha)}
        entry["tested"] = "untested" if sha in untested else ("skipped" if sha != first_new_sha else "new")
        if sha in by_commit and by_commit[sha].get("reason"):
            entry["reason"] = by_commit[sha]["reason"]
        report.candidates.append(entry)
    before = last_old_sha if not search.exact else (prober.commit(first_new_sha).parent or last_old_sha)
    failing = next((r for r in (report.first_new, report.last_old)
                    if r.get("function") and r.get("file") and r.get("verdict") not in ("usage", "passed")), None)
    if failing is not None:
        function = function_diff(repo, before, first_new_sha, failing["file"], failing["function"])
        if function["diff"]:
            report.function, report.diff = function, function["diff"]
    if not report.diff:  # no failing function, or it did not change (a flag the parser now accepts): the code's diff
        report.diff = repo.git("diff", before, first_new_sha, "--", sources.PACKAGE_PATH,
                               what=f"cannot diff {before[:12]}..{first_new_sha[:12]}")
    if search.stopped:
        notes.append(f"stopped after {len(prober.records)} evaluations (--max-evaluations): "
                     f"the first new commit is one of {len(search.candidates)}")
    if any(p.other for p in search.probes if p.index == search.first_new):
        notes.append(f"the verdict changed to {report.first_new.get('verdict')} ({report.first_new.get('headline')}) "
                     f"first, not yet to the new end's ({ends['new end'].get('headline')})")
    for probe in search.skipped:
        notes.append(f"skipped {probe.commit[:12]}: {probe.reason}")
    report.seconds = time.perf_counter() - started
    return report


def release_commits(config: Config, spec: Any, repo: sources.Repo, last_good: str, first_bad: str, *,
                    progress: ProgressFn | None = None, timeout: float = 120.0) -> CommitReport:
    """:func:`bisect_commits` between the tags of two releases, over the older one's environment.

    :raises SourceError: a release has no tag in the clone (naming ``git fetch --tags``).
    """
    return bisect_commits(config, spec, repo, repo.release_rev(last_good), repo.release_rev(first_bad), base=last_good,
                          progress=progress, timeout=timeout)


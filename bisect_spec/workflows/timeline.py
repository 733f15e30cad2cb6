"""One configuration across SGLang releases: where its verdict changed, and where its failure moved.

:func:`bisect_releases` is what ``bisect-spec bisect`` runs. It evaluates the configuration
on as few releases as it can (:mod:`bisect_spec.reduce.bisection` picks them; environments are built
on demand and reused), in two phases:

1. **verdict**: passed, failed with cross-release key K, rejected by the parser, ... — a
   failure that moved to another file or function keeps its key, so it is *one* failure;
2. **moves** (optional): inside each run of releases that fail the same way, where the
   failing location (file and function) changed.

Every boundary comes with the code around the failing statement in the release on each
side, side by side: for a failure that appeared, the same expression found in the older
release (or the function of the same name); for a move, the old and the new place.

Terms, as in ``git bisect``: the two ends are *old* and *new* (the older and the newer
release), and the search finds the first release whose verdict differs from the old one, in
whichever direction — a regression or a fix. The terms only name the two verdicts in what is
printed (``--good/--bad``, ``--fixed`` = broken/fixed, ``--term-old/--term-new``).

Verdicts are compared release-neutrally: a failure by its cross-release key (release numbers in
its message normalised, :func:`bisect_spec.model.signature.normalise_versions`), a refusal of the flags
by its first clause with release numbers normalised ("SGLang <version> has no flag --x"; the
advice after the colon names other releases and close names, which vary by release).

Binary search evaluates two releases when the ends agree, so a failure that exists only in
middle releases is invisible to it; ``scan`` evaluates every installed release of the range
first, and the report always says how many releases were evaluated, with a warning when the
ends agreed and the releases between them were not evaluated.
"""

from __future__ import annotations

import difflib
import math
import re
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.errors import ArchitectureUnknown, BisectSpecError, ReleaseError, ReleaseUnavailable, UsageError
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.model.signature import normalise_message, normalise_versions
from bisect_spec.reduce.bisection import Change, Observation, find_changes
from bisect_spec.runtime import environments, profiles

ProgressFn = Callable[[str], None]


def verdict_key(outcome: Outcome) -> str:
    """What must be equal for two releases to "do the same" with a configuration."""
    if outcome.status is Status.PASSED:
        return "passed"
    if outcome.signature is not None and outcome.status is not Status.USAGE:
        return f"{outcome.status.value}:{outcome.signature.cross_release_key}"
    return f"{outcome.status.value}:{normalise_message(normalise_versions(str(outcome.exception.get('message', ''))))}"


def refusal_key(message: str) -> str:
    """The verdict key of flags a release refuses before evaluating them: the first clause,
    release numbers normalised (``usage:SGLang <version> has no flag --x``)."""
    return f"usage:{normalise_message(normalise_versions(message.split(': ', 1)[0]))}"


#: What the two ends' verdicts are called when the user names no terms.
DEFAULT_TERMS = ("old", "new")


@dataclass
class BisectReport:
    """Everything ``bisect`` found; ``to_dict`` is the ``--json`` shape (``bisect-spec/bisect/1``)."""

    config: Config
    target: dict[str, Any]
    releases: list[str]
    evaluated: list[dict[str, Any]]
    segments: list[dict[str, Any]]
    boundaries: list[dict[str, Any]]
    last_good: str | None
    first_bad: str | None
    built: list[str]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: the commit bisection between ``last_good`` and ``first_bad`` (``bisect --repo``), a CommitReport
    commits: Any = None
    #: what the old and the new verdict are called (``git bisect``'s terms)
    terms: tuple[str, str] = DEFAULT_TERMS
    #: every installed release of the range was evaluated (``--scan``)
    scan: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def evaluated_count(self) -> int:
        """Releases evaluated (not skipped)."""
        return sum(1 for e in self.evaluated if e.get("key") is not None)

    def to_dict(self) -> dict[str, Any]:
        """``last_good``/``first_bad`` are the last release with the old verdict and the first with
        another one, whatever the terms (``last_old``/``first_new`` say the same)."""
        return {"schema": "bisect-spec/bisect/1", "config": self.config.argv(), "target": self.target,
                "releases": self.releases, "last_good": self.last_good, "first_bad": self.first_bad,
                "last_old": self.last_good, "first_new": self.first_bad,
                "terms": {"old": self.terms[0], "new": self.terms[1]}, "scan": self.scan,
                "evaluated_count": self.evaluated_count, "releases_count": len(self.releases),
                "evaluated": self.evaluated, "segments": self.segments, "boundaries": self.boundaries,
                "environments_built": self.built, "environments_built_count": len(self.built),
                "notes": self.notes, "warnings": self.warnings, "seconds": round(self.seconds, 1),
                **({"commits": self.commits.to_dict()} if self.commits is not None else {})}


def release_range(old: str | None, new: str | None, candidates: Sequence[str], *,
                  names: tuple[str, str] = ("--old", "--new")) -> list[str]:
    """Releases from ``old`` to ``new`` (both included), oldest first.

    :param names: how the caller named the two ends, for messages.
    :raises UsageError: an end that is not a known release, or ends in the wrong order.
    """
    ordered = sorted(set(candidates), key=environments.version_key)
    for name, value in zip(names, (old, new), strict=True):
        if value is not None and value not in ordered:
            close = difflib.get_close_matches(value, ordered, n=3, cutoff=0.6)
            hint = f" (closest: {', '.join(close)})" if close else ""
            raise UsageError(f"{name} {value} is not a known SGLang release{hint}; known: {ordered[0]} … {ordered[-1]}"
                             if ordered else f"{name} {value}: no SGLang release is known")
    lo = ordered.index(old) if old else 0
    hi = ordered.index(new) if new else len(ordered) - 1
    if lo == hi:
        raise UsageError(f"{names[0]} and {names[1]} are both {ordered[lo]}: name two different releases")
    if lo > hi:
        raise UsageError(f"{names[0]} {ordered[lo]} is newer than {names[1]} {ordered[hi]}: {names[0]} is the older end "
                         "(also when looking for a fix: add --fixed to call the verdicts broken and fixed)")
    return ordered[lo: hi + 1]


def _steps(left: int) -> str:
    """``git bisect``'s "(roughly N steps)" for ``left`` releases still to test."""
    steps = math.ceil(math.log2(left + 1)) if left else 0
    return f"{left} release{'s' if left != 1 else ''} left (roughly {steps} step{'s' if steps != 1 else ''})"


class _Prober:
    """Evaluates the configuration on one release at a time, building environments on demand."""

    def __init__(self, config: Config, spec: Any, *, progress: ProgressFn | None, timeout: float) -> None:
        self.config = config
        self.spec = spec
        self.progress = progress
        self.timeout = timeout
        self.ready_before = set(environments.installed())
        self.built: list[str] = []
        self.details: dict[str, dict[str, Any]] = {}

    def free(self, release: str) -> bool:
        return release in self.ready_before or release in self.built

    def _say(self, message: str) -> None:
        if self.progress:
            self.progress(message)

    def _session(self, release: str) -> Any:
        from bisect_spec.runtime.session import Session

        if not environments.is_installed(release):
            self._say(f"building the environment of SGLang {release}")
            if release not in self.built:
                self.built.append(release)  # a build attempt costs the same whether or not it works
            environments.ensure(release, progress=None)
        target = type(self.spec)(**{**self.spec.__dict__, "release": release}).resolve()
        # a warm worker already up for the release is reused; none is started (one per release would stay behind)
        session = Session(target, jobs=1, timeout=self.timeout, warm="reuse")
        try:
            session.start()
        except BaseException:
            session.close()
            raise
        return session

    def detail(self, release: str) -> dict[str, Any]:
        """Evaluate once per release; the record of what it did (``key`` None when skipped)."""
        if release in self.details:
            return self.details[release]
        started = time.perf_counter()
        self._say(f"evaluating on SGLang {release}")
        record: dict[str, Any] = {"release": release, "built": False}
        try:
            try:
                session = self._session(release)
            except ReleaseError as exc:
                if isinstance(exc, (ArchitectureUnknown, ReleaseUnavailable)):
                    raise
                self._say(f"SGLang {release} did not start ({exc}); trying once more")
                session = self._session(release)  # a passing failure (a loaded machine, a network blip)
        except ArchitectureUnknown as exc:  # a verdict, not a skip: this release cannot run the model
            record.update(key=f"unsupported:{exc.architecture}", verdict="unsupported", headline=str(exc))
            self.details[release] = record
            return record
        except ReleaseError as exc:
            record.update(key=None, verdict="skipped", reason=str(exc))
            self.details[release] = record
            return record
        record["built"] = release in self.built
        try:
            try:
                config = session.with_draft(session.merge_config_file(session.canonical(self.config)))
            except UsageError as exc:
                record.update(key=refusal_key(str(exc)), verdict="usage", headline=str(exc))
            else:
                outcome = session.evaluate(config)
                record.update(key=verdict_key(outcome), verdict=outcome.status.value, headline=outcome.headline)
                if outcome.signature is not None:
                    frame = outcome.frame
                    record.update(signature=outcome.signature.id, cross_release_key=outcome.signature.cross_release_key,
                                  exc_type=outcome.signature.exc_type, location=outcome.signature.location,
                                  message=outcome.exception.get("message", ""), file=frame.get("file"),
                                  line=frame.get("line"), function=frame.get("function"),
                                  statement=frame.get("statement"), expression=frame.get("expression"))
                    if frame.get("file") and frame.get("line"):
                        record["block"] = session.pool.request({"op": "block", "file": frame["file"],
                                                                "line": frame["line"]})
                        record["block"].pop("id", None)
                elif outcome.passed:
                    record["resolved"] = {k: outcome.resolved.get(k) for k in sorted(outcome.resolved)
                                          if k.startswith("speculative_")}
        finally:
            session.close()
        record["seconds"] = round(time.perf_counter() - started, 1)
        self.details[release] = record
        return record

    def observe_verdict(self, release: str) -> Observation:
        record = self.detail(release)
        return Observation(release, record["key"], record, record.get("reason", ""))

    def observe_place(self, release: str) -> Observation:
        record = self.detail(release)
        key = None if record["key"] is None else (record["key"], record.get("location"))
        return Observation(release, key, record, record.get("reason", ""))

    def find_before(self, release: str, after: dict[str, Any]) -> dict[str, Any] | None:
        """The code in ``release`` that matches the failing code of ``after`` (for a diff)."""
        pattern = code_pattern(after.get("expression") or after.get("statement") or "")
        try:
            session = self._session(release)
        except BisectSpecError:
            return None
        try:
            matches: list[dict[str, Any]] = []
            if pattern:
                matches = session.pool.request({"op": "find", "pattern": pattern, "limit": 50})["matches"]
            if matches:
                def rank(match: dict[str, Any]) -> tuple[int, int]:
                    return (match["file"] != after.get("file"), int(match["line"]))

                best = min(matches, key=rank)
                block: dict[str, Any] = session.pool.request({"op": "block", "file": best["file"], "line": best["line"]})
                block.pop("id", None)
                block["matched"] = pattern
                return block
            if after.get("file") and after.get("function"):
                found = session.source_of(after["file"], after["function"])
                if found.get("source"):
                    return {"file": after["file"], "function": after["function"], "start": found["line"],
                            "source": found["source"], "matched": None}
            return None
        finally:
            session.close()


def code_pattern(code: str) -> str:
    """A regular expression finding ``code`` in another release: ``self.``/``cfg.`` prefixes and
    spacing may differ, so the first line of the expression is matched loosely."""
    first = code.strip().removeprefix("assert").strip().splitlines()[0] if code.strip() else ""
    first = re.sub(r"^(if|elif|while)\s+|:$", "", first).strip().strip("()")
    first = re.sub(r"\b[A-Za-z_]\w*\.(?=[A-Za-z_])", "", first)
    words = re.findall(r"\w+|[^\w\s]+", first)[:6]
    if not words:
        return ""
    return r"\s*".join(re.escape(w) for w in words)


def side_by_side_diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """A unified diff of two code blocks, dedented so a move into another function reads as such."""
    def lines(block: dict[str, Any] | None) -> list[str]:
        if not block or not block.get("source"):
            return []
        return textwrap.dedent(str(block["source"])).splitlines()

    def label(block: dict[str, Any] | None, release: str) -> str:
        if not block:
            return f"{release} (no such code)"
        return f"{release}/{block.get('file')}:{block.get('start')} ({block.get('function')})"

    return "\n".join(difflib.unified_diff(lines(before), lines(after), label(before, str((before or {}).get("release"))),
                                          label(after, str((after or {}).get("release"))), lineterm="", n=3))


def _segment(releases: list[str], first: Observation, details: dict[str, dict[str, Any]]) -> dict[str, Any]:
    record = first.detail
    probed = [r for r in releases if r in details and details[r].get("key") is not None]
    return {"first": releases[0], "last": releases[-1], "releases": len(releases), "probed": probed,
            "verdict": record.get("verdict"), "key": record.get("key"), "headline": record.get("headline"),
            "location": record.get("location"), "signature": record.get("signature"),
            "cross_release_key": record.get("cross_release_key")}


def _boundary(change: Change, kind: str, releases: list[str], prober: _Prober) -> dict[str, Any]:
    before, after = dict(change.before.detail), dict(change.after.detail)
    between = releases[releases.index(before["release"]) + 1: releases.index(after["release"])]
    before_block = before.get("block")
    after_block = after.get("block")
    if after_block is None and before_block is not None:  # a failure that disappeared: where did its code go?
        after_block = prober.find_before(after["release"], before)
    elif before_block is None and after_block is not None:  # a failure that appeared: what was there before?
        before_block = prober.find_before(before["release"], after)
    for block, side in ((before_block, before), (after_block, after)):
        if block is not None:
            block["release"] = side["release"]
    strip = ("block", "resolved")
    return {"kind": kind, "last_good": before["release"], "first_bad": after["release"],
            "skipped_between": between,
            "before": {k: v for k, v in before.items() if k not in strip},
            "after": {k: v for k, v in after.items() if k not in strip},
            "code_before": before_block, "code_after": after_block,
            "diff": side_by_side_diff(before_block, after_block)}


def bisect_releases(config: Config, spec: Any, *, old: str | None = None, new: str | None = None,
                    candidates: Sequence[str] | None = None, moves: bool = True, progress: ProgressFn | None = None,
                    timeout: float = 120.0, terms: tuple[str, str] = DEFAULT_TERMS, scan: bool = False,
                    end_names: tuple[str, str] = ("--old", "--new")) -> BisectReport:
    """Find the releases where ``config``'s verdict changes between ``old`` and ``new``.

    :param spec: a :class:`~bisect_spec.api.TargetSpec` (its release is ignored).
    :param candidates: releases to consider (default: every release with recorded pins, plus installed ones).
    :param moves: also find where a failure that stays the same moved (file/function).
    :param terms: what the old and the new verdict are called in the report.
    :param scan: evaluate every installed release of the range first (histories that are not monotone).
    :param end_names: the options that named ``old`` and ``new``, for messages.
    """
    started = time.perf_counter()
    pool = list(candidates) if candidates is not None else sorted(
        set(environments.known_releases()) | set(environments.installed()), key=environments.version_key)
    releases = release_range(old, new, pool, names=end_names)
    notes: list[str] = []
    model = profiles.load_model(spec.model, path=spec.model_path)
    first_known = environments.first_release_knowing(model.architecture) if model.architecture else None
    if first_known and environments.version_key(releases[0]) < environments.version_key(first_known):
        older = [r for r in releases if environments.version_key(r) < environments.version_key(first_known)]
        releases = [r for r in releases if r not in older]
        notes.append(f"{model.name} ({model.architecture}) needs SGLang {first_known} or newer: "
                     f"{len(older)} older release(s) not evaluated ({older[0]} … {older[-1]})")
        if len(releases) < 2:
            raise UsageError(f"{model.name} ({model.architecture}) is first known in SGLang {first_known}: "
                             f"pick {end_names[1]} {first_known} or newer, or another --model")
    prober = _Prober(config, spec, progress=progress, timeout=timeout)

    def on_probe(observation: Observation, left: int) -> None:
        if progress:
            said = observation.detail.get("verdict") or "skipped"
            progress(f"{observation.release}: {said}; {_steps(left)}")

    known: list[Observation] = []
    if scan:
        installed = [r for r in releases if prober.free(r)]
        for number, release in enumerate(installed, 1):
            known.append(prober.observe_verdict(release))
            if progress:
                progress(f"{release}: {known[-1].detail.get('verdict')}; scanning installed releases, "
                         f"{len(installed) - number} left")
    search = find_changes(releases, prober.observe_verdict, free=prober.free, known=known, on_probe=on_probe)
    changes = [(c, "verdict") for c in search.changes]
    segments = search.segments()
    places: list[tuple[list[str], Observation]] = []
    if moves:
        index = {r: i for i, r in enumerate(releases)}
        for span, first in segments:
            if first.detail.get("location") is None:
                places.append((span, first))
                continue
            lo, hi = index[span[0]], index[span[-1]]
            known = [prober.observe_place(o.release) for o in search.probes if lo <= index[o.release] <= hi]
            inner = find_changes(releases, prober.observe_place, free=prober.free, lo=lo, hi=hi, known=known)
            changes += [(c, "moved") for c in inner.changes]
            places += inner.segments()
    else:
        places = segments
    changes.sort(key=lambda pair: environments.version_key(pair[0].after.release))
    boundaries = [_boundary(change, kind, releases, prober) for change, kind in changes]
    verdict_changes = [b for b in boundaries if b["kind"] == "verdict"]
    notes += [f"skipped {r}: {d['reason']}" for r, d in prober.details.items() if d.get("key") is None]
    warnings: list[str] = []
    evaluated = sum(1 for d in prober.details.values() if d.get("key") is not None)
    if not verdict_changes and not scan and evaluated < len(releases):
        warnings.append(f"the ends agree, so only {evaluated} of {len(releases)} releases were evaluated: a verdict "
                        "that differs only in middle releases would be missed; --scan evaluates every installed release")
    return BisectReport(
        config=config, target={k: v for k, v in spec.__dict__.items() if k != "release"}, releases=releases,
        evaluated=[{k: v for k, v in d.items() if k != "block"} for d in prober.details.values()],
        segments=[_segment(span, first, prober.details) for span, first in sorted(
            places, key=lambda p: environments.version_key(p[0][0]))],
        boundaries=boundaries,
        last_good=verdict_changes[0]["last_good"] if verdict_changes else None,
        first_bad=verdict_changes[0]["first_bad"] if verdict_changes else None,
        built=prober.built, notes=notes, seconds=time.perf_counter() - started, terms=terms, scan=scan,
        warnings=warnings)

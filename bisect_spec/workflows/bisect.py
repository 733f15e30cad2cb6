"""A configuration across releases (:func:`bisect`), down to the commit (:func:`bisect_commits`), and a
reproducer's history for its bug report (:func:`release_history`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bisect_spec.errors import BisectSpecError, UsageError
from bisect_spec.model.flags import Config
from bisect_spec.model.signature import Signature
from bisect_spec.runtime import environments, profiles, sources
from bisect_spec.runtime.pasted_command import understand_flags
from bisect_spec.runtime.session import Session
from bisect_spec.runtime.target_spec import TargetSpec


def release_history(config: Config, spec: TargetSpec, session: Session, signature: Signature, *, bisect: bool,
                    timeout: float = 120.0) -> dict[str, Any]:
    """The reproducer on the newest installed release and, with ``bisect``, its first bad release.

    The bisection runs over the installed releases with :func:`bisect_spec.workflows.timeline.bisect_releases`
    (verdicts only); the first bad release is where the verdict changes *to this failure* (its
    cross-release key), which need not be the first verdict change.
    """
    from bisect_spec.report.bug_report import ReleaseVerdict
    from bisect_spec.workflows.timeline import bisect_releases, verdict_key

    key = f"failed:{signature.cross_release_key}"
    newest = environments.newest_installed()
    history: dict[str, Any] = {"newest_known": environments.pins().get("newest"), "notes": []}
    records: dict[str, dict[str, Any]] = {}
    if bisect:
        candidates = environments.installed()
        if not sources.is_label(session.target.release) and session.target.release not in candidates:
            candidates.append(session.target.release)
        try:
            found = bisect_releases(config, spec, candidates=candidates, moves=False, timeout=timeout)
        except BisectSpecError as exc:
            history["bisection"] = {"none": f"not bisected ({exc})"}
        else:
            records = {d["release"]: d for d in found.evaluated}
            history["bisection"] = _first_bad(found, key)
            if history["bisection"].get("model_limited"):  # the model is newer than the failure: ask its sibling
                sibling = _sibling_history(config, spec, key, candidates, timeout)
                if sibling is not None:
                    history["bisection"]["sibling"] = sibling
    if newest in records:
        record = records[newest]
        history["newest"] = ReleaseVerdict(newest, str(record.get("verdict")), record.get("key") == key,
                                           str(record.get("headline") or record.get("reason") or ""))
    elif newest == session.target.release:
        history["newest"] = ReleaseVerdict(newest, "failed", True, "")
    else:
        try:
            target = TargetSpec(**{**spec.__dict__, "release": newest}).resolve()
            with Session(target, jobs=1, timeout=timeout) as other:
                outcome = other.evaluate(other.with_draft(other.canonical(config)))
        except BisectSpecError as exc:
            history["notes"].append(f"not evaluated on SGLang {newest}: {exc}")
        else:
            history["newest"] = ReleaseVerdict(newest, outcome.status.value, verdict_key(outcome) == key,
                                               outcome.headline)
    return history


def _first_bad(found: Any, key: str) -> dict[str, Any]:
    evaluated = [d for d in found.evaluated if d.get("key") is not None]
    order = {r: i for i, r in enumerate(found.releases)}
    evaluated.sort(key=lambda d: order[d["release"]])
    releases = [d["release"] for d in evaluated]
    for boundary in found.boundaries:
        if boundary["kind"] == "verdict" and boundary["after"].get("key") == key:
            before = boundary["before"]
            return {"first_bad": boundary["first_bad"], "last_good": boundary["last_good"], "releases": releases,
                    "before": {"verdict": before.get("verdict"), "words": _before_words(before)}}
    failing = [d["release"] for d in evaluated if d.get("key") == key]
    if failing and failing[0] == releases[0]:  # no release that passes: not a "first bad release"
        notes = [note[0].upper() + note[1:] + "." for note in found.notes if "needs SGLang" in note]
        return {"fails_from": failing[0], "model_limited": bool(notes), "releases": list(found.releases),
                "notes": notes}
    return {"none": f"none found among {', '.join(releases) or 'no release'}"}


def sibling_model(model: Any) -> str | None:
    """A shipped model profile with the text architecture of ``model`` that older releases know (Kimi-K2.6's
    ``text_config`` is DeepseekV3ForCausalLM: ``deepseek-v3``), or None."""
    text = (model.config.get("text_config") or {}).get("architectures") or []
    if not text or text == model.config.get("architectures"):
        return None
    for name in profiles.model_names():
        other = profiles.load_model(name)
        if other.config.get("architectures") == text and other.config.get("model_type") == (
                model.config.get("text_config") or {}).get("model_type"):
            return name
    return None


def _sibling_history(config: Config, spec: TargetSpec, key: str, candidates: list[str], timeout: float) -> dict[str, Any] | None:
    """The reproducer bisected with the sibling model (:func:`sibling_model`) over the same releases."""
    from bisect_spec.workflows.timeline import bisect_releases

    name = sibling_model(profiles.load_model(spec.model, path=spec.model_path))
    if name is None:
        return None
    sibling = TargetSpec(**{**spec.__dict__, "model": name, "model_path": None})
    try:
        found = bisect_releases(config, sibling, candidates=candidates, moves=False, timeout=timeout)
    except BisectSpecError as exc:
        return {"model": name, "none": f"not bisected ({exc})"}
    return {"model": name, **_first_bad(found, key)}


def _before_words(record: dict[str, Any]) -> str:
    verdict = record.get("verdict")
    if verdict == "passed":
        return "starts without error"
    if verdict == "unsupported":
        return "cannot run this model (its architecture is unknown there)"
    return f"fails differently ({record.get('headline')})"


SPECULATIVE_PREFIX = "--speculative-"


def _bisect_config(tokens: Sequence[str], spec: TargetSpec) -> tuple[Config, TargetSpec, list[str]]:
    """The configuration a bisection evaluates: the user's flags, with the draft's algorithm when missing."""
    config, spec, notes = understand_flags(tokens, spec)
    if not config.items:
        raise UsageError("no flags to bisect: pass SGLang flags after --, "
                         "e.g. bisect-spec bisect -- --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3")
    flags = config.flags()
    if "--speculative-algorithm" not in flags and any(f.startswith(SPECULATIVE_PREFIX) for f in flags) and spec.draft \
            and "--config" not in flags:  # the file may name the algorithm: a flag added here would override it
        draft = profiles.load_draft(spec.draft, profiles.load_model(spec.model, path=spec.model_path), path=spec.draft_path)
        if draft is not None and draft.algorithm:
            config = config.with_("--speculative-algorithm", draft.algorithm)
            notes.append(f"added --speculative-algorithm {draft.algorithm} for the '{draft.name}' draft")
    return config, spec, notes


def bisect(tokens: Sequence[str], spec: TargetSpec | None = None, *, old: str | None = None, new: str | None = None,
           releases: Sequence[str] | None = None, moves: bool = True, progress: Callable[[str], None] | None = None,
           timeout: float = 120.0, repo: str | Path | None = None, terms: tuple[str, str] = ("old", "new"),
           scan: bool = False, end_names: tuple[str, str] = ("--old", "--new")) -> Any:
    """Find the first release whose verdict for a configuration differs from the ``old`` release's,
    and where its failure moved (``git bisect``'s old/new: a regression or a fix alike).

    Speculative flags without ``--speculative-algorithm`` get the draft's algorithm (EAGLE3 for
    ``--draft eagle3``): without one, SGLang switches speculation off and checks nothing.
    With ``repo`` (a local SGLang clone), the first verdict change is then bisected down to the
    commit, between the two releases' tags (:func:`bisect_commits`): the report's ``commits``.

    :param old: the older end (default: the oldest known release); ``new`` the newer end.
    :param terms: what the old and the new verdict are called (``("good", "bad")``, ``("broken", "fixed")``).
    :param scan: evaluate every installed release of the range, for histories that are not monotone.
    :param end_names: the options that named the ends, for messages.
    :return: a :class:`~bisect_spec.workflows.timeline.BisectReport`.
    :raises UsageError: no flags, unknown release, ends in the wrong order, ``repo`` not a clone.
    """
    from bisect_spec.errors import SourceError
    from bisect_spec.workflows.commit_bisect import release_commits
    from bisect_spec.workflows.timeline import bisect_releases

    spec = spec or TargetSpec()
    clone = sources.Repo(repo) if repo is not None else None  # a bad path fails now, not after the releases
    config, spec, notes = _bisect_config(tokens, spec)
    report = bisect_releases(config, spec, old=old, new=new, candidates=releases, moves=moves, progress=progress,
                             timeout=timeout, terms=terms, scan=scan, end_names=end_names)
    report.notes[:0] = notes
    if clone is not None:
        if report.last_good is None or report.first_bad is None:
            report.notes.append("no release boundary to bisect into commits: the verdict does not change")
        else:
            try:
                report.commits = release_commits(config, spec, clone, report.last_good, report.first_bad,
                                                 progress=progress, timeout=timeout)
            except SourceError as exc:  # keep what the releases found
                report.notes.append(f"commits not bisected: {exc}")
    return report


def is_release_name(value: str) -> bool:
    """Whether ``value`` names an SGLang release this tool knows (pinned or installed), not a git revision."""
    return value in set(environments.known_releases()) | set(environments.installed())


def bisect_commits(tokens: Sequence[str], spec: TargetSpec | None = None, *, repo: str | Path, old: str, new: str,
                   progress: Callable[[str], None] | None = None, timeout: float = 120.0,
                   max_evaluations: int | None = None) -> Any:
    """The first commit between ``old`` and ``new`` (revisions of the SGLang clone ``repo``) where a
    configuration's verdict changes.

    Every commit's ``python/sglang`` tree is laid over the environment of the release at or
    before ``old`` (built if missing); see :mod:`bisect_spec.workflows.commit_bisect`.

    :return: a :class:`~bisect_spec.workflows.commit_bisect.CommitReport`.
    :raises UsageError: no flags; ``repo`` not a clone, unknown revisions, no commit between them
        touching ``python/sglang``, an end that cannot be evaluated (all :class:`SourceError`).
    """
    from bisect_spec.workflows.commit_bisect import bisect_commits as run

    spec = spec or TargetSpec()
    clone = sources.Repo(repo)
    config, spec, notes = _bisect_config(tokens, spec)
    report = run(config, spec, clone, old, new, progress=progress, timeout=timeout, max_evaluations=max_evaluations)
    report.notes[:0] = notes
    return report

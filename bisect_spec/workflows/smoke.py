"""The release smoke: configurations every release must get right before its verdicts are trusted.

A release nobody measured can fail inside bisect-spec's own emulation of ``launch_server``
(0.5.18 did, on every configuration, before its runtime context was published). The smoke
finds that the day a release is installed: a few configurations that a real server of the
release accepts must pass, one known failure must fail in SGLang's own speculative
checks, and every algorithm the release accepts, given alone, must get a verdict of SGLang's
(passing or failing), never a fault of bisect-spec's emulation. A release whose smoke fails
is *unverified*: ``env list`` says so, and so does one line in every command's output that
evaluates on it (:func:`warning`).

Cases are chosen **by feature**, never by version string: an algorithm case runs where the
release's ``--speculative-algorithm`` accepts that algorithm, a flag case where the flag
exists. The target is fixed so that every release knows it: ``llama-3.1-8b`` on one simulated
H100 (``LlamaForCausalLM``, known since 0.4.6), with draft profiles materialised for it and
passed as explicit paths, so one worker serves every case.

The expected verdicts are not this module's opinion: each passing case was launched with
SGLang's real ``launch_server`` (``scripts/bench_fidelity.py --smoke``) on one release of
every family, and the known failure is the EAGLE assert of the seed episodes
(``--speculative-num-draft-tokens`` without ``--speculative-num-steps``), raised by every
release 0.4.6 … 0.5.23 in its speculative argument checks.

The result is recorded next to the release (``smoke.json``), with the digest of the
evaluating code, so a later bisect-spec can tell a stale record from a current one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.runtime import environments, profiles

#: The smoke's fixed target: a model every release knows, on one simulated H100.
MODEL = "llama-3.1-8b"
HARDWARE = "h100"
GPUS = 1
RECORD = "smoke.json"
SCHEMA = "bisect-spec/smoke/1"

#: Files that hold the speculative argument checks in some release (the known failure's home).
_SPECULATIVE_CHECKS = ("srt/server_args.py", "srt/arg_groups/speculative_hook.py")


@dataclass(frozen=True)
class Case:
    """One smoke configuration: flags (``@draft:NAME`` is that draft profile's directory) and the verdict expected."""

    name: str
    flags: tuple[str, ...]
    expect: str  # "pass" | "fail" | "no tool fault" (any verdict of SGLang's)
    #: ``--speculative-algorithm`` must accept this (None: no algorithm needed)
    algorithm: str | None = None
    #: these flags must exist in the release
    needs_flags: tuple[str, ...] = ()


_CHAIN = ("--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")

CASES: tuple[Case, ...] = (
    Case("no speculative decoding", ("--tp-size", "1"), "pass"),
    Case("EAGLE, explicit chain", ("--tp-size", "1", "--speculative-algorithm", "EAGLE",
                                   "--speculative-draft-model-path", "@draft:eagle", *_CHAIN), "pass", "EAGLE"),
    Case("EAGLE3, explicit chain", ("--tp-size", "1", "--speculative-algorithm", "EAGLE3",
                                    "--speculative-draft-model-path", "@draft:eagle3", *_CHAIN), "pass", "EAGLE3"),
    Case("STANDALONE, explicit chain", ("--tp-size", "1", "--speculative-algorithm", "STANDALONE",
                                        "--speculative-draft-model-path", "@draft:standalone", *_CHAIN),
         "pass", "STANDALONE"),
    Case("NGRAM", ("--tp-size", "1", "--speculative-algorithm", "NGRAM"), "pass", "NGRAM"),
    # SGLang's verdict, either way: 0.5.9 and 0.5.10 cannot build this worker (its module's annotation
    # ``-> ModelRunner`` names a class imported only for type checkers: a NameError on Python < 3.14)
    Case("multi-layer EAGLE", ("--tp-size", "1", "--speculative-algorithm", "EAGLE", "--enable-multi-layer-eagle",
                               "--speculative-draft-model-path", "@draft:eagle", *_CHAIN), "no tool fault", "EAGLE",
         ("--enable-multi-layer-eagle",)),
    Case("known failure: draft tokens without steps",
         ("--tp-size", "1", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "@draft:eagle",
          "--speculative-num-draft-tokens", "4"), "fail", "EAGLE"),
)


#: The draft profile each algorithm reads, for the baseline cases (others take none).
_ALGORITHM_DRAFTS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "eagle", "MTP": "eagle", "STANDALONE": "standalone"}


def algorithms_of(table: Sequence[dict[str, Any]]) -> list[str]:
    """The algorithms the release's ``--speculative-algorithm`` accepts: its argparse choices, or
    where it has none (0.5.13+ takes any registered name), the names its code compares it with."""
    row = next((row for row in table if row.get("option") == "--speculative-algorithm"), {})
    return [str(a) for a in (row.get("choices") or row.get("branch_values") or [])]


def baseline_cases(table: Sequence[dict[str, Any]]) -> list[Case]:
    """Every algorithm the release's ``--speculative-algorithm`` accepts, alone (with its draft).

    SGLang may accept or refuse each: the verdict is its own. What may never happen is a
    fault of bisect-spec's emulation (``expect == "no tool fault"``).
    """
    cases = []
    for algorithm in algorithms_of(table):
        draft = _ALGORITHM_DRAFTS.get(algorithm.upper())
        flags = ("--tp-size", "1", "--speculative-algorithm", algorithm,
                 *(("--speculative-draft-model-path", f"@draft:{draft}") if draft else ()))
        cases.append(Case(f"baseline {algorithm}", flags, "no tool fault", algorithm.upper()))
    return cases


@dataclass
class CaseResult:
    """What one case did on the release."""

    name: str
    flags: list[str]
    expect: str
    status: str
    ok: bool
    stage: str = ""
    headline: str = ""
    #: the failing statement, ``file:line in function`` (failures)
    statement: str = ""
    why: str = ""


@dataclass
class SmokeResult:
    """The smoke of one release: verified when every case it ran came out as expected."""

    release: str
    cases: list[CaseResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    digest: str = ""
    error: str = ""

    @property
    def verified(self) -> bool:
        return not self.error and bool(self.cases) and all(case.ok for case in self.cases)

    @property
    def failures(self) -> list[CaseResult]:
        return [case for case in self.cases if not case.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "release": self.release, "verified": self.verified, "seconds": self.seconds,
                "digest": self.digest, "error": self.error, "skipped": self.skipped,
                "cases": [asdict(case) for case in self.cases]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SmokeResult:
        return cls(str(data["release"]), [CaseResult(**case) for case in data.get("cases", [])],
                   list(data.get("skipped", [])), float(data.get("seconds", 0.0)), str(data.get("digest", "")),
                   str(data.get("error", "")))


def applicable(case: Case, table: Sequence[dict[str, Any]]) -> str | None:
    """Why ``case`` does not apply to a release with this flag table, or None when it does."""
    options = {str(alias) for row in table for alias in (row.get("aliases") or [row.get("option")])}
    for flag in case.needs_flags:
        if flag not in options:
            return f"no {flag}"
    if case.algorithm is not None and case.algorithm not in [a.upper() for a in algorithms_of(table)]:
        return f"--speculative-algorithm has no {case.algorithm}"
    return None


def flags_of(case: Case) -> list[str]:
    model = profiles.load_model(MODEL)
    out: list[str] = []
    for token in case.flags:
        if token.startswith("@draft:"):
            draft = profiles.load_draft(token.removeprefix("@draft:"), model)
            token = str(draft.path) if draft is not None and draft.path is not None else token
        out.append(token)
    return out


def judge(case: Case, outcome: Any) -> CaseResult:
    """Compare one outcome with the case's expectation (an :class:`~bisect_spec.model.outcome.Outcome`)."""
    frame = outcome.frame or {}
    statement = f"{frame.get('file')}:{frame.get('line')} in {frame.get('function')}" if frame else ""
    result = CaseResult(case.name, list(case.flags), case.expect, outcome.status.value, False,
                        str(outcome.record.get("stage", "")), outcome.headline, statement)
    if case.expect == "no tool fault":
        result.ok = outcome.tool_fault is None
        result.why = "" if result.ok else f"bisect-spec's own emulation failed: {outcome.tool_fault}"
    elif case.expect == "pass":
        result.ok = outcome.passed
        result.why = "" if result.ok else "a real server of this release accepts it"
    else:
        file = str(frame.get("file", ""))
        result.ok = (outcome.status.value == "failed" and outcome.exception.get("type") == "AssertionError"
                     and file in _SPECULATIVE_CHECKS)
        result.why = "" if result.ok else "expected SGLang's own AssertionError in its speculative argument checks"
    return result


def run(release: str, evaluate: Callable[[list[str]], Any], table: Sequence[dict[str, Any]]) -> SmokeResult:
    """Evaluate the smoke on ``release`` through ``evaluate`` (flags -> Outcome) and record it.

    Starts no process: the caller owns the evaluation (``api.verify_release`` gives it one
    worker of the smoke's target). An exception from ``evaluate`` (the release does not
    start) makes the result unverified, with the reason; it is recorded all the same.
    """
    from bisect_spec.runtime.store import evaluation_digest

    started = time.perf_counter()
    result = SmokeResult(release, digest=evaluation_digest())
    try:
        for case in (*CASES, *baseline_cases(table)):
            reason = applicable(case, table)
            if reason is not None:
                result.skipped.append(f"{case.name}: {reason}")
                continue
            result.cases.append(judge(case, evaluate(flags_of(case))))
    except Exception as exc:
        text = str(exc).strip()
        result.error = f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}"[:300]
    result.seconds = round(time.perf_counter() - started, 1)
    record(result)
    return result


def _path(release: str) -> Path:
    return environments.release_dir(release) / RECORD


def record(result: SmokeResult) -> None:
    from bisect_spec.runtime.files import atomic_write

    atomic_write(_path(result.release), json.dumps(result.to_dict(), indent=2))


def recorded(release: str) -> SmokeResult | None:
    """The last smoke of an installed release, or None when it never ran here."""
    path = _path(release)
    if not path.is_file():
        return None
    try:
        return SmokeResult.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError):
        return None


def is_stale(release: str) -> bool:
    """Whether ``release``'s smoke should run again: it never ran here, or other evaluating code ran it."""
    from bisect_spec.runtime.store import evaluation_digest

    found = recorded(release)
    return found is None or found.digest != evaluation_digest()


def status(release: str) -> str:
    """``verified``, ``unverified`` (its smoke failed) or ``not checked``, for ``env list``."""
    found = recorded(release)
    if found is None:
        return "not checked"
    return "verified" if found.verified else "unverified"


def warning(release: str) -> str | None:
    """The one line every output on ``release`` carries when its smoke failed; None otherwise."""
    found = recorded(release)
    if found is None or found.verified:
        return None
    first = found.error or next((f"{c.name}: {c.headline}" for c in found.failures), "")
    return (f"SGLang {release} is unverified: its release smoke failed ({first[:160]}); verdicts on it may be "
            f"bisect-spec's own faults. Re-check with `bisect-spec env verify {release}`, or report it against "
            "bisect-spec")

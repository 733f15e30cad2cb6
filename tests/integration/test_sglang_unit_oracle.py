"""SGLang's own unit tests, as an oracle for the in-process evaluation.

Each case in ``tests/resources/sglang_unit_cases.json`` is one test (or subtest) from SGLang's
``test/registered/unit/server_args/``, or from its attention-backend unit tests (the backend choice on
the target's runner, after the weights: ``model_runner_components/test_attention_backend_setup.py``,
``layers/attention/test_attention_backend_registry.py``), translated into a configuration: a release, a model, draft and
hardware profile, the CLI flags and what SGLang's test claims happens (an exception type and message
substring, or a pass with resolved values). ``docs/sglang-unit-oracle.md`` lists every test of those
files, translated or not, and why.

Cases are evaluated through the public API (:class:`~bisect_spec.api.TargetSpec`,
:func:`~bisect_spec.api.understand_flags`) on the real installed release, along the whole launch path
the evaluator follows (resolution, ``check_server_args``, model configs). One session (one worker,
which imports SGLang once) serves every case of a target; the cases are ordered by target so each
session starts once, and only one worker is alive at a time.

Case fields beyond the obvious ones: ``env`` (environment variables for that evaluation, as the
test's ``envs.X.override``; given as a ``VAR=value`` prefix, as a pasted command would), ``stage``
(``parse``, ``resolve``, ``check_server_args`` or ``attention_backend``: the launch-path stage where SGLang
decides the case; a failure must be reported at that stage), ``expect.attention_backends`` (the backend
classes SGLang's choice built, in order; the stage must not have stopped early), ``expect.given`` (values
SGLang's parser produced, for tests that check the parse) and ``note`` (how the translation departs from the test). A flag value
``@resources/NAME`` is the file ``tests/resources/NAME``; ``@draft`` is the draft profile's directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bisect_spec.api import TargetSpec, understand_flags
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome, Status
from bisect_spec.runtime import environments, profiles
from bisect_spec.runtime.session import Session

pytestmark = pytest.mark.sglang

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
CASES_FILE = RESOURCES / "sglang_unit_cases.json"
RESOURCE_PREFIX = "@resources/"
STAGES = ("parse", "resolve", "check_server_args", "attention_backend")


@dataclass(frozen=True)
class Case:
    """One translated SGLang unit test."""

    id: str
    release: str
    model: str
    draft: str
    hardware: str
    gpus: int
    flags: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    expect: dict[str, Any]
    stage: str
    note: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Case:
        return cls(id=str(data["id"]), release=str(data["release"]), model=str(data["model"]), draft=str(data["draft"]),
                   hardware=str(data["hardware"]), gpus=int(data.get("gpus", profiles.DEFAULT_GPUS)),
                   flags=tuple(str(flag) for flag in data["flags"]),
                   env=tuple(sorted((str(k), str(v)) for k, v in (data.get("env") or {}).items())),
                   expect=dict(data["expect"]), stage=str(data.get("stage", "resolve")), note=str(data.get("note", "")))

    @property
    def target_key(self) -> tuple[object, ...]:
        return (self.release, self.model, self.draft, self.hardware, self.gpus)

    def spec(self) -> TargetSpec:
        """The target, without the caller's own ``SGLANG_*`` variables: a case's environment is its own."""
        return TargetSpec(release=self.release, model=self.model, draft=None if self.draft == "none" else self.draft,
                          hardware=self.hardware, gpus=self.gpus, inherit_env=False)

    def tokens(self) -> list[str]:
        """``VAR=value`` prefixes, then the flags with ``@resources/NAME`` made an absolute path (the worker has its
        own working directory)."""
        flags = [str(RESOURCES / flag.removeprefix(RESOURCE_PREFIX)) if flag.startswith(RESOURCE_PREFIX) else flag
                 for flag in self.flags]
        return [f"{name}={value}" for name, value in self.env] + flags


def load_cases() -> list[Case]:
    cases = [Case.from_dict(item) for item in json.loads(CASES_FILE.read_text())]
    # grouped by target, so each target's worker starts once and the previous one can be closed
    return sorted(cases, key=lambda case: (repr(case.target_key), case.id))


CASES = load_cases()


class _Sessions:
    """One started session at a time: switching targets closes the previous worker (each holds SGLang in memory)."""

    def __init__(self) -> None:
        self.key: tuple[object, ...] | None = None
        self.session: Session | None = None

    def get(self, case: Case) -> Session:
        if self.session is not None and self.key == case.target_key:
            return self.session
        self.close()
        session = Session(case.spec().resolve(), jobs=1, timeout=120)
        session.start()
        self.key, self.session = case.target_key, session
        return session

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        self.key, self.session = None, None


@pytest.fixture(scope="module")
def sessions() -> Iterator[_Sessions]:
    pool = _Sessions()
    yield pool
    pool.close()


def evaluate(sessions: _Sessions, case: Case) -> Outcome:
    """Evaluate as ``probe`` does: flags understood, spelled as the release spells them, draft path added."""
    tokens = case.tokens()
    config = understand_flags(tokens, case.spec())[0] if tokens else Config()  # no flags at all: SGLang's defaults
    session = sessions.get(case)
    return session.evaluate(session.with_draft(session.canonical(config)))


def describe(case: Case, outcome: Outcome) -> str:
    return (f"{case.id} on SGLang {case.release} ({case.model} + {case.draft}, {case.hardware}; decided at {case.stage})\n"
            f"  flags:   {' '.join(case.tokens())}\n"
            f"  outcome: {outcome.headline} [stage {outcome.record.get('stage', '?')}]"
            + (f"\n  note:    {case.note}" if case.note else ""))


@pytest.mark.parametrize("case", CASES, ids=[f"{case.release}:{case.id}" for case in CASES])
def test_sglang_unit_case(case: Case, sessions: _Sessions) -> None:
    if case.release not in environments.installed():
        pytest.skip(f"SGLang {case.release} is not installed; run: bisect-spec env install {case.release}")
    outcome = evaluate(sessions, case)
    where = describe(case, outcome)
    if "raises" in case.expect:
        expected_status = Status.USAGE if case.expect["raises"] == "SystemExit" else Status.FAILED
        assert outcome.status is expected_status, f"expected {case.expect['raises']}, got {outcome.status}\n{where}"
        assert outcome.exception.get("type") == case.expect["raises"], where
        message = str(outcome.exception.get("message") or "")
        assert str(case.expect["match"]) in message, f"{case.expect['match']!r} not in the message\n{where}"
        if "stage" in outcome.record:
            assert outcome.record["stage"] == case.stage, f"failed at stage {outcome.record['stage']}\n{where}"
        return
    # SGLang's unit test decides at case.stage; a launch goes on past it, where SGLang may refuse the configuration
    # for another reason (0.5.23's pools refuse --enable-unified-memory on a model without hybrid layers)
    beyond = outcome.status is Status.FAILED and case.stage in outcome.record.get("stages_passed", [])
    assert outcome.status is Status.PASSED or beyond, f"expected to pass\n{where}"
    if beyond:  # SGLang's verdict at the case's stage is the unit test's (admitted); a failure records no resolution
        assert outcome.record.get("after_weights") is True, f"refused before the weights\n{where}"
        return
    for name, value in (case.expect.get("resolved") or {}).items():
        assert name in outcome.resolved, f"the evaluator does not report resolved field {name}\n{where}"
        assert outcome.resolved[name] == value, f"resolved {name}={outcome.resolved[name]!r}, expected {value!r}\n{where}"
    if "attention_backends" in case.expect:  # the backend classes SGLang's own choice built, in order
        assert outcome.record.get("attention_backends") == case.expect["attention_backends"], where
        assert outcome.record.get("stage") != case.stage or not (outcome.record.get("needs_gpu") or {}).get(case.stage), \
            f"stage {case.stage} stopped early: {outcome.record['needs_gpu']}\n{where}"
    given: dict[str, Any] = outcome.record.get("given") or {}
    for name, value in (case.expect.get("given") or {}).items():
        assert given.get(name) == value, f"parsed {name}={given.get(name)!r}, expected {value!r}\n{where}"


def test_cases_file_is_well_formed() -> None:
    """Every case names known profiles and exactly one kind of expectation; (id, release) is unique."""
    seen: set[tuple[str, str]] = set()
    for case in CASES:
        assert (case.id, case.release) not in seen, case.id
        seen.add((case.id, case.release))
        assert case.model in profiles.model_names(), case.id
        assert case.draft == "none" or case.draft in profiles.draft_names(), case.id
        assert case.hardware in profiles.hardware_names(), case.id
        assert ("raises" in case.expect) != (case.expect.get("passes") is True), case.id
        if "raises" in case.expect:
            assert case.expect.get("match"), case.id
        assert case.stage in STAGES, case.id
        assert not any(flag in ("--model-path", "--model") for flag in case.flags), case.id
        for flag in case.flags:
            if flag.startswith(RESOURCE_PREFIX):
                assert (RESOURCES / flag.removeprefix(RESOURCE_PREFIX)).is_file(), flag

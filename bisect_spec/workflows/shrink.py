"""One failure shrunk to a 1-minimal reproducer, explained, fixed and written as reproducers and a bug report.

:func:`shrink_in_session` is the shrink of an already started session (sweeps call it for every
signature); :func:`shrink` starts from the user's flags."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config, parse_command
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.signature import Signature
from bisect_spec.runtime import environments, sources
from bisect_spec.runtime.session import Session, Target
from bisect_spec.runtime.store import DURABLE
from bisect_spec.runtime.target_spec import TargetSpec
from bisect_spec.workflows.bisect import release_history
from bisect_spec.workflows.probe import first_evaluation, shrink_space


@dataclass
class ShrinkReport:
    """A shrunk failure: reproducer, proof, explanation, verified fixes, files written."""

    target: Target
    original: Outcome
    result: Any  # shrink.ShrinkResult
    minimal: Outcome | None
    explanation: dict[str, Any] | None = None
    fixes: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)
    #: the reproducer on other releases (:func:`release_history`), when evaluated
    history: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        result = self.result.to_dict()
        return {"schema": "bisect-spec/shrink/1", "target": self.target.describe(), "notes": self.notes,
                "status": result["status"], "stop_reason": result["stop_reason"], "signature": result["signature"],
                "original_argv": result["original_argv"], "minimal_argv": result["minimal_argv"],
                "evaluations": result["evaluations"], "removal_evaluations": result["removal_evaluations"],
                "proof": result["proof"], "steps": result["steps"], "other_signatures": result["other_signatures"],
                "explanation": self.explanation, "nearest_working": self.fixes, "files": self.files,
                **({"newest": vars(self.history["newest"])} if self.history.get("newest") else {}),
                **({"bisection": self.history["bisection"]} if self.history.get("bisection") else {}),
                "failure": self.minimal.to_dict() if self.minimal else self.original.to_dict()}


def failure_hints(session: Session, outcome: Outcome, learnt: Sequence[Config] = ()) -> set[str]:
    """Flags the failure names (its statement, guard and message, through the parser's dests) and flags
    of ``learnt`` reproducers of its signature: the shrinker's first guess (:mod:`bisect_spec.reduce.hints`)."""
    from bisect_spec.reduce.hints import failure_flags

    return failure_flags(outcome.record, session.flags(), learnt)


def evidence_of(outcomes: Sequence[Outcome], signature_id: str) -> set[str]:
    """Flags present in every outcome seen failing with ``signature_id`` (the shrinker's best guess)."""
    members = [set(o.config.flags()) for o in outcomes if o.signature is not None and o.signature.id == signature_id]
    return set.intersection(*members) if members else set()




def shrink_in_session(session: Session, config: Config, *, budget: Any = None, fix: bool = True,
                      out_dir: Path | None = None, original: Config | None = None,
                      evidence: set[str] | None = None, first: Outcome | None = None,
                      progress: Callable[[int], None] | None = None, learnt: Sequence[Config] = (),
                      memo: MutableMapping[str, Outcome] | None = None) -> ShrinkReport:
    """Shrink one failing configuration with an already started session (used by sweeps too).

    :param first: the configuration's outcome if the caller has it (it is not evaluated again for it;
        the shrinker's own re-check still evaluates the original afresh).
    :param progress: called with the number of evaluations so far, after each.
    :param evidence: flags present in every configuration seen failing this way (tried first).
    :param learnt: minimal reproducers already known for this failure's signature: their flags are hints,
        and one the configuration holds is the shrinker's first guess.
    :param memo: outcomes by configuration key that one sweep's shrinks share (its rows' outcomes
        included): a candidate found there is not evaluated again, and what is evaluated is added.
        The original is always re-checked afresh.
    """
    from bisect_spec.errors import BudgetExhausted
    from bisect_spec.reduce.shrink import Shrinker

    outcomes: dict[Config, Outcome] = {}
    shared: MutableMapping[str, Outcome] = memo if memo is not None else {}

    def remembered(candidate: Config) -> Outcome | None:
        found = shared.get(candidate.key())
        if found is None or found.status.value not in DURABLE:
            return None
        outcomes[candidate] = found
        return found

    def keep(candidate: Config, outcome: Outcome) -> None:
        outcomes[candidate] = outcome
        if outcome.status.value in DURABLE:  # a crash or a time-out may not happen again
            shared[candidate.key()] = outcome

    def evaluate(candidate: Config) -> Outcome:
        if candidate not in outcomes and remembered(candidate) is None:
            keep(candidate, session.evaluate(candidate))
            if progress:
                progress(len(outcomes))
        return outcomes[candidate]

    def evaluate_many(candidates: Sequence[Config]) -> list[Outcome]:
        missing = [c for c in dict.fromkeys(candidates) if c not in outcomes and remembered(c) is None]
        for outcome in session.evaluate_many(missing):
            keep(outcome.config, outcome)
        if progress and missing:
            progress(len(outcomes))
        return [outcomes[c] for c in candidates]

    first = first or evaluate(config)
    checks = [0]

    def predicate(candidate: Config) -> Signature | None:
        if candidate == config:  # the shrinker asks for the original to check it, then to re-check it:
            checks[0] += 1      # the outcome known is the check, every re-check is evaluated afresh
            if checks[0] > 1:
                outcomes[candidate] = session.evaluate(candidate)
            else:
                outcomes[candidate] = first
        return evaluate(candidate).signature

    space = shrink_space(session, config)
    shrinker = Shrinker(config, predicate, space=space, budget=budget,
                        hints=failure_hints(session, first, learnt), evidence=evidence or (), rechecks=1,
                        learnt=learnt)
    notes: list[str] = []
    try:
        result = shrinker.run()
    except BudgetExhausted as exc:
        result = exc.result
        notes.append(str(exc))
    minimal = outcomes.get(result.minimal)
    report = ShrinkReport(session.target, first, result, minimal, notes=notes, worker=session.info)
    if result.status in ("minimal", "stopped") and result.signature is not None:
        report.explanation = _explain(result, space, evaluate_many)
        if fix:
            from bisect_spec.reduce.repair import fitting_layout, nearest_working

            figures = first.will_not_start
            if figures is not None:  # out of memory, too few GPUs: only a layout the box runs fixes it
                layout = fitting_layout(original or config, evaluate_many, gpus=session.target.hardware.gpus,
                                        cause=str(figures["cause"]), fraction=figures.get("mem_fraction_static"),
                                        tp=session.canonical_flag("--tp-size"), pp=session.canonical_flag("--pp-size"))
                report.fixes = {"fixes": [layout] if layout else [], "evaluations": 0,
                                "candidates_passing": 1 if layout else 0}
            else:
                report.fixes = nearest_working(original or config, shrink_space(session, original or config, first),
                                               evaluate_many, failing=first)
        if out_dir is not None:
            report.files = write_reproducers(session, report, out_dir)
    return report


def _explain(result: Any, space: Any, evaluate_many: Callable[[Sequence[Config]], list[Outcome]]) -> dict[str, Any]:
    from bisect_spec.reduce.repair import explain

    return explain(result.minimal, result.signature, space, evaluate_many)


def write_reproducers(session: Session, report: ShrinkReport, out_dir: Path, *, names: Any = None,
                      history: dict[str, Any] | None = None, typed: Sequence[str] | None = None) -> dict[str, str]:
    """Write launch.sh, repro.py, test_regression.py and bug_report.md for one signature.

    :param names: how the model and draft are named (:func:`report_names`; default: from the target).
    :param history: the reproducer on other releases (:func:`release_history`); None when not evaluated.
    :param typed: the command the user pasted, word for word (the report's "command as I ran it"); None: the
        configuration's own flags with the report's names.
    """
    from bisect_spec.report import bug_report, reproducers
    from bisect_spec.runtime.files import atomic_write

    outcome = report.minimal or report.original
    signature = report.result.signature.to_dict()
    target = session.target
    names = names or report_names(target)
    draft_config = (json.loads((target.draft.path / "config.json").read_text())
                    if target.draft and target.draft.path else None)
    info = session.pool.request({"op": "info"})
    config = reported_config(session, report)
    directory = out_dir / signature["id"]
    directory.mkdir(parents=True, exist_ok=True)
    model_args = list(target.model.extra_args)
    described = target.describe()
    source = sources.describe(target.release) if sources.is_label(target.release) else None
    env = dict(target.env)
    hardware = target.hardware.record if info.get("hardware", "").startswith("simulated") else None
    environment = session.environment
    rows, simulated = bug_report.simulated_check_env(
        release=target.release, python=str(session.info.get("python")), pythonpath=environment.pythonpath,
        base_python=environment.python, hardware=hardware, gpus=target.hardware.gpus,
        wheel=str(source["base"]) if source else target.release)
    history = history or {}
    local = {str(target.model.path): names.model, str(environments.home()): "bisect-spec's cache"}
    if target.draft and target.draft.path:
        local[str(target.draft.path)] = names.draft or target.draft.name
    for entry in environment.pythonpath:
        local[entry + os.sep] = ""
    from bisect_spec import __version__

    facts = bug_report.Facts(
        original=report.original.config,
        signature=signature, outcome=outcome, release=target.release, config=config, model_args=model_args,
        names=names, env=env, hardware=target.hardware.label, explanation=report.explanation, fixes=report.fixes,
        check_env=rows, simulated=simulated, tool_version=__version__,
        repro_command=f"bisect-spec env run {target.release} -- python repro.py\n"
                      f"# or, where SGLang {target.release} is importable: python repro.py",
        newest=history.get("newest"), newest_known=history.get("newest_known"), bisection=history.get("bisection"),
        notes=list(history.get("notes") or []), local=local,
        typed=(typed[0] if len(typed) == 1 else shlex.join(typed)) if typed else None)
    files = {
        "launch.sh": reproducers.launch_script(bug_report.launch_command(config, names, env, model_args), described,
                                               config),
        "repro.py": reproducers.repro_script(config, outcome, described, target.model.config, draft_config,
                                             hardware, target.hardware.gpus, model_args, info.get("cpu_imports", []),
                                             source),
        "test_regression.py": reproducers.regression_test(signature["id"], outcome, described),
        "bug_report.md": bug_report.render(facts),
        "shrink.json": json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n",
    }
    if names.draft == LOCAL_DRAFT and draft_config is not None:
        files[f"{LOCAL_DRAFT[2:]}/config.json"] = json.dumps(draft_config, indent=2, sort_keys=True) + "\n"
    written = {}
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
        if name.endswith((".sh", ".py")):
            path.chmod(0o755)
        written[name] = str(path)
    return written


#: the draft a report names when no published or user draft is known: its config.json next to the report
LOCAL_DRAFT = "./draft"


def report_names(target: Target, pasted_model: str | None = None, pasted_draft: str | None = None,
                 spec: TargetSpec | None = None) -> Any:
    """How a bug report names the model and the draft: as the user runs them.

    A Hugging Face id the user typed is kept; a path the user typed that holds a published
    checkpoint (``/models/Kimi-K2.6``, ``/models/kimi-k2.6-eagle3``) becomes its Hugging Face id (the
    path is theirs, not the reader's); a draft path naming no published draft is the user's own
    checkpoint and is kept. Without any, the profile's published id; a draft recipe with none is
    written next to the report (``./draft/config.json``).
    """
    from bisect_spec.report.bug_report import Names
    from bisect_spec.runtime.model_sources import is_hub_id

    notes: list[str] = []
    model_path = pasted_model or (spec.model_path if spec else None)
    if pasted_model and is_hub_id(pasted_model):
        model = pasted_model
    elif target.model.hf_id:
        model = target.model.hf_id
        notes.append(f"`{model}` is the checkpoint {'your --model-path holds' if model_path else 'evaluated'}: "
                     "bisect-spec evaluated its published config.json")
    else:
        model = model_path or str(target.model.path)
    draft: str | None = None
    profile = target.draft
    draft_path = pasted_draft or (spec.draft_path if spec else None)
    if profile is not None and (profile.path is not None or draft_path):
        if draft_path and is_hub_id(draft_path):
            draft = draft_path
        elif draft_path and profile.hf_id and Path(draft_path).name.lower() == profile.hf_id.rsplit("/", 1)[-1].lower():
            draft = profile.hf_id
            notes.append(f"`{draft}` is the published {profile.algorithm} draft your --speculative-draft-model-path "
                         "holds; bisect-spec evaluated a draft config of that kind shaped for the model")
        elif draft_path:
            draft = draft_path
            notes.append(f"`{draft}` is your own draft checkpoint; bisect-spec evaluated a draft config for {profile.algorithm} "
                         "shaped for the model in its place (the failure happens before any weights load)")
        elif profile.hf_id:
            draft = profile.hf_id
            notes.append(f"`{draft}` is a published {profile.algorithm} draft for this model; bisect-spec evaluated a "
                         "draft config of the same kind shaped for the model")
        else:
            draft = LOCAL_DRAFT
            notes.append(f"`{LOCAL_DRAFT}` holds the {profile.algorithm} draft's config.json bisect-spec evaluated "
                         "(attached; no weights: the failure happens before any weights load)")
    return Names(model, draft, tuple(notes))


def reported_config(session: Session, report: ShrinkReport) -> Config:
    """The minimal configuration as a report shows it: with the draft path where the algorithm needs
    one (a real launch needs it; the shrinker may drop it when the failure does not), if it fails the same way."""
    minimal: Config = with_users_values(session, report)
    full = session.with_draft(minimal)
    if full == minimal:
        return minimal
    outcome = session.evaluate(full)
    same = outcome.signature is not None and outcome.signature.id == report.result.signature.id
    return full if same else minimal


def with_users_values(session: Session, report: ShrinkReport) -> Config:
    """The minimal reproducer with the values the user typed put back, one flag at a time, where it still fails
    the same way (the shrinker simplifies ``--speculative-num-draft-tokens 3`` to ``2``; a report should show
    the user's 3 when 3 reproduces too). The flags stay the 1-minimal ones; each kept value was evaluated."""
    minimal: Config = report.result.minimal
    original = report.original.config
    signature = report.result.signature
    if signature is None:
        return minimal
    for flag, value in minimal.items:
        typed = original.get(flag)
        if typed is None or typed == value:
            continue
        candidate = minimal.with_(flag, typed)
        outcome = session.evaluate(candidate)
        if outcome.signature is not None and outcome.signature.id == signature.id:
            minimal = candidate
    return minimal


def shrink(tokens: Sequence[str], spec: TargetSpec | None = None, *, budget: Any = None, fix: bool = True,
           out_dir: Path | None = None, on_start: Callable[[Session], None] | None = None,
           timeout: float = 60.0, bisect: bool = False, progress: Callable[[int], None] | None = None,
           runs_dir: Path = Path("runs"), warm: bool = True, notify: Callable[[str], None] | None = None) -> ShrinkReport:
    """Shrink a failing configuration (flags or a pasted launch command) to a 1-minimal reproducer.

    The bug report evaluates the reproducer on the newest installed release too and, with
    ``bisect``, bisects it across the installed releases for its first bad release.
    ``warm`` and ``notify`` as for :func:`probe` (the warm worker is asked for more workers for
    the parallel steps, and keeps them until its idle stop).

    :param out_dir: where the reproducers go (default ``runs_dir/shrink-<signature>``).
    :param progress: called with the number of evaluations so far, after each.

    :raises UsageError: bad flags, or the configuration passes (nothing to shrink).
    """
    jobs = max(1, min(os.cpu_count() or 1, 4))
    with first_evaluation(tokens, spec, jobs=jobs, timeout=timeout, on_start=on_start, warm=warm,
                           notify=notify) as (session, full, first, notes, spec):
        if first.passed:
            raise UsageError(f"this configuration resolves without error on SGLang {session.target.release}: "
                             "nothing to shrink (use bisect-spec probe to see the resolved values)")
        signature = first.signature
        assert signature is not None
        report = shrink_in_session(session, full, budget=budget, fix=fix, first=first, progress=progress)
        report.notes[:0] = notes
        found = report.result.signature
        if report.result.status in ("minimal", "stopped") and found is not None:
            pasted = parse_command(tokens)
            names = report_names(session.target, pasted.model_path, pasted.draft_path, spec)
            history = release_history(reported_config(session, report), spec, session, found, bisect=bisect,
                                      timeout=max(timeout, 120.0))
            report.history = history
            report.files = write_reproducers(session, report, out_dir or runs_dir / f"shrink-{found.id}",
                                             names=names, history=history,
                                             typed=tokens if pasted.model_path is not None else None)
        return report

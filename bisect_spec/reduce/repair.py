"""Explain a minimal reproducer and find the nearest configuration that works.

Both take a *batch* predicate (``configs -> outcomes``, evaluated in parallel by the
caller) and start no processes themselves.

* :func:`explain`: which flags are necessary (all of a 1-minimal reproducer's flags are)
  and, for each, which of its values trigger the failure ("any value of
  --speculative-num-draft-tokens triggers it").
* :func:`nearest_working`: from the user's own failing configuration, the smallest edits
  (remove / change / add a flag, then pairs of edits to the core speculative flags) that
  make it pass, ranked so that what the user evidently wants (algorithm, draft path,
  number of draft tokens) is kept where possible. Every suggestion was evaluated.

Ranking, in the words each fix carries as its ``reason``: first the fixes that keep what the
user asked for and only *add* flags (among those, first the ones that keep what the stages after
the weights chose: the target's attention backends when only the draft's failed); then those that
keep the intent but change a value the user typed (``--speculative-eagle-topk 1`` to ``2``: a tree of drafts instead of a chain);
then those that change the algorithm, the draft or the number of draft tokens. A configuration
that resolves with speculative decoding switched off is never offered: it does not do what the
user is trying to do. Besides the strategy's values, a count flag is also tried with the values
next to the user's own counts (``--speculative-num-steps 15`` for 16 draft tokens): with top-k 1,
SGLang drafts ``num_steps + 1`` tokens, so that is the edit that keeps a chain of 16 drafts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bisect_spec.model.findings import findings_of
from bisect_spec.model.flags import Config, Value
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.signature import Signature
from bisect_spec.search.space import DRAFT_FLAG, FlagSpace, simplicity_key

BatchPredicate = Callable[[Sequence[Config]], list[Outcome]]

#: What a user of speculative decoding evidently wants kept, in order of importance.
INTENT = ("--speculative-algorithm", DRAFT_FLAG, "--speculative-num-draft-tokens")
#: Flags a fix may add or change in pairs.
CORE_EDITS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
              "--speculative-algorithm")


def _show(value: Value | None) -> str:
    return "(unset)" if value is None else (" ".join(value) or "(on)")


def explain(minimal: Config, signature: Signature, space: FlagSpace, evaluate: BatchPredicate) -> dict[str, Any]:
    """Which flags are necessary and which of their values trigger the failure."""
    candidates: list[Config] = []
    for flag, value in minimal.items:
        spec = space.spec(flag)
        for other in spec.values[1:] if spec else ():
            if other is not None and other != value:
                candidates.append(minimal.with_(flag, other))
    outcomes = {o.config: o for o in evaluate(candidates)} if candidates else {}
    flags = []
    for flag, value in minimal.items:
        spec = space.spec(flag)
        tried = [v for v in (spec.values[1:] if spec else ()) if v is not None]
        triggering = [v for v in tried if v == value or (minimal.with_(flag, v) in outcomes
                                                          and outcomes[minimal.with_(flag, v)].signature == signature)]
        if not tried:
            verdict = f"{flag} {_show(value)} is needed (no other values tried)"
        elif len(triggering) == len(tried):
            verdict = f"any value of {flag} triggers it" if spec and spec.kind != "bool" else f"{flag} must be given"
        else:
            verdict = f"{flag} triggers it with {', '.join(_show(v) for v in triggering)}; not with " + \
                ", ".join(_show(v) for v in tried if v not in triggering)
        flags.append({"flag": flag, "value": list(value), "necessary": True, "free": len(triggering) == len(tried),
                      "triggering_values": [list(v) for v in triggering], "verdict": verdict})
    return {"flags": flags, "evaluations": len(candidates)}


@dataclass(frozen=True)
class Fix:
    """A verified nearest working configuration."""

    edits: tuple[str, ...]
    config: Config
    keeps_intent: bool
    outcome: Outcome

    def to_dict(self, original: Config | None = None) -> dict[str, Any]:
        return {"edits": list(self.edits), "argv": self.config.argv(), "keeps_intent": self.keeps_intent,
                "verified": self.outcome.passed, "resolved": self.outcome.resolved,
                **({"reason": _reason(original, self)} if original is not None else {})}


#: Count flags whose user-typed values suggest values for each other (``num_steps + 1`` draft tokens).
COUNTS = ("--speculative-num-steps", "--speculative-num-draft-tokens")


def _near_user_counts(config: Config, flag: str) -> list[Value]:
    """Values of ``flag`` next to the user's own counts: 15 and 16 steps for 16 draft tokens."""
    if flag not in COUNTS:
        return []
    numbers = []
    for other in COUNTS:
        value = config.get(other)
        if other != flag and value and value[0].isdigit():
            numbers.append(int(value[0]))
    return [(str(n),) for base in numbers for n in (base - 1, base, base + 1) if n >= 1]


def _values(config: Config, space: FlagSpace, flag: str) -> list[Value]:
    spec = space.spec(flag)
    tried = [v for v in (spec.values[1:] if spec else ()) if v is not None]
    return list(dict.fromkeys([*tried, *_near_user_counts(config, flag)]))


def _single_edits(config: Config, space: FlagSpace) -> list[tuple[str, Config]]:
    edits: list[tuple[str, Config]] = []
    for flag, value in config.items:
        edits.append((f"remove {flag}", config.without(flag)))
        for other in _values(config, space, flag):
            if other != value:
                edits.append((f"set {flag} {_show(other)}", config.with_(flag, other)))
    for spec in space.specs:
        if spec.flag not in config.as_dict():
            for other in _values(config, space, spec.flag):
                edits.append((f"add {spec.flag} {_show(other)}", config.with_(spec.flag, other)))
    return edits


def _sound(outcome: Outcome, original: Config) -> bool:
    """Passes, and passes for real: no nonsense value accepted, no speculative field left None, and
    speculative decoding still on when the user had it on (switching it off is no workaround)."""
    if original.get("--speculative-algorithm") is not None and not outcome.resolved.get("speculative_algorithm"):
        return False
    return outcome.passed and not any(f.kind in ("nonsense", "left-none") for f in findings_of(outcome))


def _gets_past(outcome: Outcome, failing: Outcome | None) -> bool:
    """A pass that stopped early is no fix of a failure in a stage it never reached: the check that refused the
    original did not run on it (a backend whose GPU code stops the stage before the draft worker's refusal)."""
    stage = failing.record.get("stage") if failing is not None else None
    if not outcome.stopped_early or not isinstance(stage, str):
        return True
    return stage in (outcome.record.get("stages_passed") or ()) and stage not in outcome.stopped_early


def _typed_changes(original: Config, candidate: Config) -> list[str]:
    """Flags the user typed whose value the fix changes or removes."""
    return [flag for flag, value in original.items if candidate.get(flag) != value]


def _reason(original: Config, fix: Fix) -> str:
    """Why the fix ranks where it does, in plain words."""
    changed = _typed_changes(original, fix.config)
    if not fix.keeps_intent:
        lost = [flag for flag in INTENT if original.get(flag) is not None and original.get(flag) != fix.config.get(flag)]
        tokens = original.get("--speculative-num-draft-tokens")
        resolved = fix.outcome.resolved.get("speculative_num_draft_tokens")
        if not lost and tokens and resolved is not None and resolved != int(tokens[0]):
            return (f"ranked lower: SGLang then drafts {resolved} tokens instead of your {tokens[0]} "
                    "(it overrides --speculative-num-draft-tokens for this combination)")
        return "ranked lower: it changes " + ", ".join(f"{flag} (you gave {_show(original.get(flag))})" for flag in lost)
    if not changed:
        return "keeps every flag and value you gave and only adds what SGLang needs"
    return ("keeps your algorithm, draft and number of draft tokens, but changes "
            + ", ".join(f"{flag} from {_show(original.get(flag))} to {_show(fix.config.get(flag))}" for flag in changed))


def _keeps_intent(original: Config, candidate: Config, outcome: Outcome | None = None) -> bool:
    """The user's algorithm, draft path and draft-token count survive the edit (and resolution)."""
    if not all(original.get(flag) == candidate.get(flag) for flag in INTENT if original.get(flag) is not None):
        return False
    tokens = original.get("--speculative-num-draft-tokens")
    # resolution must not replace the draft-token count the user asked for
    return not (outcome is not None and tokens
                and outcome.resolved.get("speculative_num_draft_tokens") not in (None, int(tokens[0])))


#: What the stages after the weights record that they chose (the target's attention backends, the draft
#: worker's class, the model classes): a fix that keeps the choices the failing configuration already got
#: ranks before one that changes them (sglang#23490: the draft's own backend, not the target's).
CHOICES = ("attention_backends", "draft_worker", "model_classes")


def _disturbs(failing: Outcome | None, fix: Fix) -> int:
    """How many of the failing configuration's recorded choices the fix changes."""
    if failing is None:
        return 0
    return sum(1 for key in CHOICES
               if failing.record.get(key) is not None and fix.outcome.record.get(key) != failing.record.get(key))


def nearest_working(original: Config, space: FlagSpace, evaluate: BatchPredicate, *, limit: int = 5,
                    failing: Outcome | None = None) -> dict[str, Any]:
    """Smallest verified edits that make ``original`` pass, best first.

    :param failing: ``original``'s own outcome, where known: among fixes equal otherwise, one that keeps the
        choices it records (:data:`CHOICES`) ranks first; a pass that stopped before the stage that refused it is
        no fix (:func:`_gets_past`).
    """
    singles = _single_edits(original, space)
    found: dict[Config, Fix] = {}

    def verify(candidates: list[tuple[tuple[str, ...], Config]]) -> int:
        """Evaluate candidates in one batch; keep the sound passing ones; return how many were evaluated."""
        unique = list({config: labels for labels, config in candidates}.items())
        by_config = {o.config: o for o in evaluate([c for c, _ in unique])}
        for candidate, labels in unique:
            outcome = by_config[candidate]
            if _sound(outcome, original) and _gets_past(outcome, failing) and candidate not in found:
                found[candidate] = Fix(labels, candidate, _keeps_intent(original, candidate, outcome), outcome)
        return len(unique)

    evaluations = verify([((label,), c) for label, c in singles])
    if not any(f.keeps_intent for f in found.values()):
        core = [(label, c) for label, c in singles
                if any(label.startswith(p) for p in ("add ", "set ")) and label.split()[1] in CORE_EDITS]
        pairs: list[tuple[tuple[str, ...], Config]] = []
        for (la, ca), (lb, cb) in itertools.combinations(core, 2):
            fa, fb = la.split()[1], lb.split()[1]
            if fa == fb:
                continue
            merged = ca.with_(fb, cb.get(fb))
            if _keeps_intent(original, merged):
                pairs.append(((la, lb), merged))
        evaluations += verify(pairs)
    ranked = sorted(found.values(), key=lambda f: (not f.keeps_intent, bool(f.outcome.stopped_early),
                                                   len(_typed_changes(original, f.config)),
                                                   len(f.edits), _disturbs(failing, f),
                                                   simplicity_key(f.config, space)))
    return {"fixes": [f.to_dict(original) for f in ranked[:limit]], "evaluations": evaluations,
            "candidates_passing": len(found)}


#: The layout flags a fit may set, in SGLang's canonical spelling.
TP, PP = "--tp-size", "--pp-size"


def _count(config: Config, flag: str) -> int:
    value = config.get(flag)
    return int(value[0]) if value and value[0].isdigit() else 1


def fitting_layout(original: Config, evaluate: BatchPredicate, *, gpus: int, cause: str, tp: str = TP,
                   pp: str = PP, fraction: float | None = None) -> dict[str, Any] | None:
    """The nearest parallel layout that starts on a box of ``gpus`` GPUs, verified, for a configuration that will
    not start (``cause``: ``weights``, out of memory; ``gpus``, more GPUs than the box has); None when none does.

    Out of memory: the smallest ``--tp-size`` (then ``--tp-size`` × ``--pp-size``) above the user's that the box
    holds; too many GPUs: the largest that fits the box. Every candidate is evaluated in one batch; a full pass
    ranks before a pass that stopped early, and a layout the box cannot run is never offered. ``tp``, ``pp``: the
    release's canonical spelling of the two flags (0.5.9: ``--tensor-parallel-size``).

    The draft's weights and pool over the target's (``draft``, up to 0.5.13): no layout helps (the target's sizing
    takes ``--mem-fraction-static`` of every GPU at any width), so the largest ``--mem-fraction-static`` below the
    resolved ``fraction``, in steps of 0.05, that starts.
    """
    if cause == "draft":
        if fraction is not None:
            return _fitting_fraction(original, evaluate, fraction)
        cause = "weights"  # 0.5.14+: the two models' weights alone outgrow a GPU: a wider layout shards both
    tp_flag, pp_flag = tp, pp
    tp_now, pp_now = _count(original, tp_flag), _count(original, pp_flag)
    widths = [1 << k for k in range(0, max(gpus, 1).bit_length()) if (1 << k) <= gpus]
    layouts: list[tuple[int, int]] = []
    if cause == "weights":
        layouts = sorted({(t, p) for t in widths for p in widths if t * p <= gpus and t * p > tp_now * pp_now
                          and t >= tp_now and p >= pp_now}, key=lambda layout: (layout[0] * layout[1], -layout[0]))
    else:
        layouts = sorted({(t, p) for t in widths for p in widths if t * p <= gpus}, key=lambda layout: (
            -(layout[0] * layout[1]), layout[1] != pp_now, -layout[0]))
    candidates: list[tuple[tuple[str, ...], Config]] = []
    for t, p in layouts:
        config, edits = original, list[str]()
        if t != tp_now:
            config, edits = config.with_(tp_flag, (str(t),)), [*edits, f"set {tp_flag} {t}"]
        if p != pp_now:
            config = config.with_(pp_flag, (str(p),)) if p > 1 else config.without(pp_flag)
            edits.append(f"set {pp_flag} {p}" if p > 1 else f"remove {pp_flag}")
        if edits:
            candidates.append((tuple(edits), config))
    fix = _best_verified(original, candidates, evaluate)
    if fix is None:
        return None
    reason = ("the smallest layout whose weights fit the box's GPUs" if cause == "weights"
              else f"the widest layout the box's {gpus} GPUs can run")
    return {**fix.to_dict(), "reason": reason, "full_pass": not fix.outcome.stopped_early}


def _best_verified(original: Config, candidates: Sequence[tuple[tuple[str, ...], Config]], evaluate: BatchPredicate,
                   tight: Callable[[Outcome], bool] = lambda outcome: False) -> Fix | None:
    """Of ``candidates`` (edits and the configuration they make, nearest first), evaluated in one batch, the first
    that passes soundly: a full pass before one that stopped early, then one not ``tight``; None where none passes."""
    by_config = {o.config: o for o in evaluate([config for _, config in candidates])} if candidates else {}
    passing = [(index, Fix(edits, config, True, by_config[config])) for index, (edits, config) in enumerate(candidates)
               if config in by_config and _sound(by_config[config], original)]
    best = min(passing, key=lambda item: (bool(item[1].outcome.stopped_early), tight(item[1].outcome), item[0]),
               default=None)
    return best[1] if best is not None else None


#: The flag that sets the share of each GPU the target's weights and pool take.
MEM_FRACTION = "--mem-fraction-static"


#: What a fraction that fits should leave free beside the draft for what the simulated box does not hold (the CUDA
#: context, communication buffers, both CUDA graphs' memory).
HEADROOM_BYTES = 2 << 30


def _tight(outcome: Outcome) -> bool:
    """Whether a pass leaves less than :data:`HEADROOM_BYTES` free once the draft's weights and pool are on the GPU."""
    free = (outcome.record.get("memory_pool") or {}).get("free_after_draft_bytes")
    return isinstance(free, int) and free < HEADROOM_BYTES


def _fitting_fraction(original: Config, evaluate: BatchPredicate, fraction: float | None) -> dict[str, Any] | None:
    """The largest ``--mem-fraction-static`` below ``fraction`` (steps of 0.05, down to 0.3) whose configuration
    starts, verified in one batch; a full pass ranks first, then one that leaves :data:`HEADROOM_BYTES` free. None
    where none does or ``fraction`` is unknown."""
    if fraction is None or fraction <= 0.3:
        return None
    verb = "set" if original.get(MEM_FRACTION) is not None else "add"
    steps = [round(0.05 * k, 2) for k in range(round(fraction / 0.05 - 1e-9), 5, -1)]  # the largest first
    candidates = [((f"{verb} {MEM_FRACTION} {value:g}",), original.with_(MEM_FRACTION, (f"{value:g}",)))
                  for value in steps if value < fraction - 1e-9]
    fix = _best_verified(original, candidates, evaluate, _tight)
    if fix is None:
        return None
    return {**fix.to_dict(), "reason": "the largest --mem-fraction-static that leaves the draft's weights and pool room",
            "full_pass": not fix.outcome.stopped_early}


def _edits_between(original: Config, candidate: Config) -> list[str]:
    """The edits that turn ``original`` into ``candidate``, in the words the fixes use (set, add, remove)."""
    edits = []
    for flag, value in original.items:
        now = candidate.get(flag)
        if now is None:
            edits.append(f"remove {flag}")
        elif now != value:
            edits.append(f"set {flag} {_show(now)}")
    edits += [f"add {flag} {_show(value)}" for flag, value in candidate.items if original.get(flag) is None]
    return edits


def fixed_then_fitted(original: Config, tried: dict[Config, Outcome], evaluate: BatchPredicate, *, gpus: int,
                      space: FlagSpace | None = None, tp: str = TP, pp: str = PP, keep_algorithm: bool = False,
                      attempts: int = 3) -> dict[str, Any] | None:
    """For a refused configuration that no edit near it makes pass because the box cannot hold it as typed (a
    model that needs more GPUs than the typed ``--tp-size``): the nearest edit SGLang accepted that then WILL NOT
    START (``tried``: the candidates evaluated so far and their outcomes), with the nearest layout that starts on
    the box (:func:`fitting_layout`), verified; the ``attempts`` nearest such edits are tried, fewest typed changes
    first, then the simplest values (``space``); an edit whose resolved values are nonsense is never one of them.
    ``keep_algorithm``: only edits that keep the typed ``--speculative-algorithm``."""
    algorithm = original.get("--speculative-algorithm")
    fixed = [config for config, outcome in tried.items() if outcome.will_not_start is not None
             and (not keep_algorithm or config.get("--speculative-algorithm") == algorithm)
             and not any(f.kind in ("nonsense", "left-none") for f in findings_of(outcome))]
    fixed.sort(key=lambda c: (not _keeps_intent(original, c, tried[c]), len(_typed_changes(original, c)),
                              len(_edits_between(original, c)),
                              simplicity_key(c, space) if space is not None else (), c.key()))
    fixes: list[Fix] = []
    for candidate in fixed[:attempts]:
        figures = tried[candidate].will_not_start or {}
        layout = fitting_layout(candidate, evaluate, gpus=gpus, cause=str(figures.get("cause")), tp=tp, pp=pp,
                                fraction=figures.get("mem_fraction_static"))
        if layout is not None:
            config = Config.from_argv(layout["argv"])
            outcome = tried.get(config) or evaluate([config])[0]  # ``evaluate`` may keep what it evaluated in ``tried``
            fixes.append(Fix(tuple(_edits_between(original, config)), config,
                             _keeps_intent(original, config, outcome), outcome))
            if fixes[-1].keeps_intent and not outcome.stopped_early:
                break
    if not fixes:
        return None
    fix = min(fixes, key=lambda f: (not f.keeps_intent, bool(f.outcome.stopped_early), fixes.index(f)))
    return {**fix.to_dict(original), "full_pass": not fix.outcome.stopped_early}

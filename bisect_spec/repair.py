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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .findings import findings_of
from .flags import Config, Value
from .outcome import Outcome
from .signature import Signature
from .space import DRAFT_FLAG, FlagSpace, simplicity_key

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

    def to_dict(self) -> dict[str, Any]:
        return {"edits": list(self.edits), "argv": self.config.argv(), "keeps_intent": self.keeps_intent,
                "verified": self.outcome.passed, "resolved": self.outcome.resolved}


def _single_edits(config: Config, space: FlagSpace) -> list[tuple[str, Config]]:
    edits: list[tuple[str, Config]] = []
    for flag, value in config.items:
        edits.append((f"remove {flag}", config.without(flag)))
        spec = space.spec(flag)
        for other in spec.values[1:] if spec else ():
            if other is not None and other != value:
                edits.append((f"set {flag} {_show(other)}", config.with_(flag, other)))
    for spec in space.specs:
        if spec.flag not in config.as_dict():
            for other in spec.values[1:]:
                if other is not None:
                    edits.append((f"add {spec.flag} {_show(other)}", config.with_(spec.flag, other)))
    return edits


def _sound(outcome: Outcome) -> bool:
    """Passes, and passes for real: no nonsense value accepted, no speculative field left None."""
    return outcome.passed and not any(f.kind in ("nonsense", "left-none") for f in findings_of(outcome))


def _keeps_intent(original: Config, candidate: Config, outcome: Outcome | None = None) -> bool:
    """The user's algorithm, draft path and draft-token count survive the edit (and resolution)."""
    if not all(original.get(flag) == candidate.get(flag) for flag in INTENT if original.get(flag) is not None):
        return False
    tokens = original.get("--speculative-num-draft-tokens")
    # resolution must not replace the draft-token count the user asked for
    return not (outcome is not None and tokens
                and outcome.resolved.get("speculative_num_draft_tokens") not in (None, int(tokens[0])))


def nearest_working(original: Config, space: FlagSpace, evaluate: BatchPredicate, *, limit: int = 5) -> dict[str, Any]:
    """Smallest verified edits that make ``original`` pass, best first."""
    singles = _single_edits(original, space)
    found: dict[Config, Fix] = {}

    def verify(candidates: list[tuple[tuple[str, ...], Config]]) -> int:
        """Evaluate candidates in one batch; keep the sound passing ones; return how many were evaluated."""
        unique = list({config: labels for labels, config in candidates}.items())
        by_config = {o.config: o for o in evaluate([c for c, _ in unique])}
        for candidate, labels in unique:
            outcome = by_config[candidate]
            if _sound(outcome) and candidate not in found:
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
    ranked = sorted(found.values(), key=lambda f: (not f.keeps_intent, len(f.edits), simplicity_key(f.config, space)))
    return {"fixes": [f.to_dict() for f in ranked[:limit]], "evaluations": evaluations, "candidates_passing": len(found)}

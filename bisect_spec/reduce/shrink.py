"""Shrink a failing configuration to a 1-minimal reproducer with the same signature.

Design notes (invariants, in the spirit of Hypothesis' ``Shrinker`` and picire's ``DD``):

* The algorithm takes a predicate ``test(config) -> Signature | None`` and never starts
  processes, touches files or prints. Outcomes are cached by canonical config.
* **Same signature only.** A candidate is accepted iff it fails with the *same* signature
  as the original; other signatures met on the way are recorded as findings of their own.
* **One definition of simpler**: :func:`bisect_spec.search.space.simplicity_key`. Every accepted
  candidate is strictly simpler than the current best (asserted).
* **Confirm first.** The original is re-checked; if it does not fail the same way every
  time, the result is ``flaky`` and nothing is shrunk.
* **Informed first guess, then proof.** ``hints`` are flags the failure names (the fields of
  its statement and guard, mapped to flags through each flag's parser ``dest``, plus flags of
  reproducers already learnt for the signature: :mod:`bisect_spec.reduce.hints`); ``evidence`` are
  flags present in every configuration a sweep saw failing this way. Phases:

  1. *guess*: keep only a likely set: first the flags of a 1-minimal reproducer already learnt
     for this signature (``learnt``) when the configuration holds it, which, accepted, skips
     phase 2 (the set is believed minimal; phase 3 proves it); else hinted and seen, seen,
     hinted, either (at most ``max_guesses`` evaluations, one each);
  2. *isolate*: find the necessary flags one by one, each by binary search for the shortest
     failing prefix of a likelihood-ordered list (hinted and seen, hinted, seen, the rest):
     about k * log2(n) evaluations for k necessary flags of n. It replaced ddmin, which
     spends most of its evaluations on chunks that all turn out necessary when, as here,
     reproducers hold one to four flags (``scripts/bench_shrink.py`` measures both);
  3. *one at a time*, likely flags last, to a fixpoint (the removals the proof needs);
  4. *singles*: each flag of a 1-minimal set alone (failing is not always monotone);
  5. value simplification of ordered (numeric) values towards the start of their domain;
     phases 3-5 again until nothing changes.

  Hints and evidence change the order of work only, never what is accepted: a wrong or
  empty hint costs evaluations, not the result's signature or 1-minimality.
* **1-minimal, with proof.** At the end, removing any flag and simplifying any value
  loses the signature; :attr:`ShrinkResult.proof` lists those evaluations.
* **Budgets** (evaluations, seconds) raise :class:`~bisect_spec.errors.BudgetExhausted`
  carrying the best result so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.errors import BudgetExhausted
from bisect_spec.model.flags import Config, Value
from bisect_spec.model.signature import Signature
from bisect_spec.search.space import FlagSpace, simplicity_key

Predicate = Callable[[Config], "Signature | None"]


@dataclass(frozen=True)
class Budget:
    """Limits for one shrink: evaluations (cache misses) and wall-clock seconds."""

    max_evaluations: int | None = 2000
    max_seconds: float | None = 600.0


@dataclass(frozen=True)
class ProofStep:
    """One evaluation showing a simplification loses the signature."""

    change: str  # "remove --flag" | "--flag VALUE"
    config: Config
    outcome: str  # "passed" or the signature id met instead

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "argv": self.config.argv(), "outcome": self.outcome}


@dataclass
class ShrinkResult:
    """What a shrink found: the minimal reproducer and how it knows."""

    original: Config
    signature: Signature | None
    minimal: Config
    status: str  # "minimal" | "flaky" | "passes" | "stopped"
    evaluations: int = 0
    removal_evaluations: int = 0
    proof: list[ProofStep] = field(default_factory=list)
    others: dict[Signature, Config] = field(default_factory=dict)
    history: list[tuple[str, Config]] = field(default_factory=list)
    stop_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "original_argv": self.original.argv(), "minimal_argv": self.minimal.argv(),
                "signature": self.signature.to_dict() if self.signature else None, "evaluations": self.evaluations,
                "removal_evaluations": self.removal_evaluations, "proof": [p.to_dict() for p in self.proof],
                "other_signatures": [{"signature": s.to_dict(), "argv": c.argv()} for s, c in self.others.items()],
                "steps": [{"step": step, "argv": c.argv()} for step, c in self.history], "stop_reason": self.stop_reason}


class Shrinker:
    """Shrinks one failing configuration against a predicate (see module notes)."""

    def __init__(self, original: Config, test: Predicate, *, space: FlagSpace | None = None,
                 budget: Budget | None = None, hints: Iterable[str] = (), evidence: Iterable[str] = (),
                 protected: Iterable[str] = (), rechecks: int = 1, max_guesses: int = 2,
                 learnt: Iterable[Config] = ()) -> None:
        self.original = original
        self.test = test
        self.space = space
        self.budget = budget or Budget()
        self.hints = set(hints)
        self.evidence = set(evidence)
        self.protected = set(protected)
        self.rechecks = rechecks
        self.max_guesses = max_guesses
        self.learnt = list(dict.fromkeys(learnt))
        self.cache: dict[Config, Signature | None] = {}
        self.evaluations = 0
        self.started = time.monotonic()
        self.target: Signature | None = None
        self.best = original
        self.result = ShrinkResult(original, None, original, "stopped")

    # -- predicate plumbing -----------------------------------------------------

    def key(self, config: Config) -> tuple[int, int, tuple[int, ...], str]:
        return simplicity_key(config, self.space)

    def outcome(self, config: Config) -> Signature | None:
        """Cached predicate call; spends budget on misses only."""
        if config in self.cache:
            return self.cache[config]
        self._check_budget()
        self.evaluations += 1
        signature = self.test(config)
        self.cache[config] = signature
        if signature is not None and signature != self.target and self.target is not None:
            known = self.result.others.get(signature)
            if known is None or self.key(config) < self.key(known):
                self.result.others[signature] = config
        return signature

    def _check_budget(self) -> None:
        limit, seconds = self.budget.max_evaluations, self.budget.max_seconds
        over = None
        if limit is not None and self.evaluations >= limit:
            over = f"evaluation budget of {limit} spent"
        elif seconds is not None and time.monotonic() - self.started > seconds:
            over = f"time budget of {seconds:g} s spent"
        if over:
            self.result.minimal, self.result.status, self.result.stop_reason = self.best, "stopped", over
            self.result.evaluations = self.evaluations
            raise BudgetExhausted(f"shrinking stopped: {over}; the best reproducer so far is kept", self.result)

    def interesting(self, config: Config) -> bool:
        return self.outcome(config) == self.target

    def accept(self, candidate: Config, step: str) -> bool:
        """Make ``candidate`` the best if it keeps the signature (and is simpler)."""
        if not self.interesting(candidate):
            return False
        assert self.key(candidate) < self.key(self.best), "shrinking must only move to simpler configurations"
        self.best = candidate
        self.result.history.append((step, candidate))
        return True

    # -- phases -------------------------------------------------------------------

    def run(self) -> ShrinkResult:
        """Shrink; raises :class:`BudgetExhausted` with the best result if the budget runs out."""
        first = self.test(self.original)
        self.evaluations += 1
        self.cache[self.original] = first
        self.target = first
        self.result.signature = first
        if first is None:
            self.result.status = "passes"
            self.result.evaluations = self.evaluations
            return self.result
        for _ in range(self.rechecks):
            again = self.test(self.original)
            self.evaluations += 1
            if again != first:
                self.result.status = "flaky"
                self.result.stop_reason = f"re-check gave {again.id if again else 'passed'} instead of {first.id}"
                self.result.evaluations = self.evaluations
                return self.result
        spent = self.evaluations
        reused = self.reuse()
        if not reused:
            self.guess()
        first_pass = not reused  # a learnt reproducer is believed minimal: no isolation, the proof checks it
        self.result.removal_evaluations += self.evaluations - spent
        while True:
            before = self.best
            spent = self.evaluations
            self.remove_flags(isolate=first_pass)
            self.result.removal_evaluations += self.evaluations - spent
            first_pass = False  # later passes start from a set that one-at-a-time removal already left
            self.simplify_values()
            if self.best == before:
                break
        self.result.minimal = self.best
        self.result.status = "minimal"
        self.result.proof = self.prove()
        self.result.evaluations = self.evaluations
        return self.result

    def removable(self) -> list[str]:
        return [f for f in self.best.flags() if f not in self.protected]

    def likely(self, flag: str) -> bool:
        """Whether ``flag`` is hinted or in the evidence: such flags are tried for removal last."""
        return flag in self.hints or flag in self.evidence

    def guesses(self) -> list[tuple[list[str], str]]:
        """Sets of flags to keep, most specific first: hinted and seen, seen, hinted, either."""
        flags = self.removable()
        hinted = {f for f in flags if f in self.hints}
        seen = {f for f in flags if f in self.evidence}
        candidates = [(hinted & seen, "named by the failure and present in every configuration seen failing this way"),
                      (seen, "present in every configuration seen failing this way"),
                      (hinted, "named by the failure"),
                      (hinted | seen, "named by the failure or seen failing this way")]
        out: list[tuple[list[str], str]] = []
        for keep, why in candidates:
            ordered = [f for f in flags if f in keep]
            if ordered and len(ordered) < len(flags) and ordered not in [k for k, _ in out]:
                out.append((ordered, why))
        return out

    def reuse(self) -> bool:
        """Keep only the flags of a reproducer already learnt for this signature that the best holds
        (same values); True when one still fails the same way (then it needs no isolation)."""
        held = set(self.best.items)
        if self.best in self.learnt:
            return True
        for known in self.learnt:
            if known.items and set(known.items) <= held and not (
                    set(known.flags()) & self.protected):
                keep = set(known.flags()) | {f for f in self.best.flags() if f in self.protected}
                drop = [f for f in self.removable() if f not in keep]
                if self.accept(self.best.without(*drop), "keep only the flags of a reproducer already learnt"):
                    return True
        return False

    def guess(self) -> bool:
        """Keep only a likely set of flags (:meth:`guesses`); True when one still fails the same way.

        Tried once, before anything else; each wrong guess costs one evaluation.
        """
        for keep, why in self.guesses()[: self.max_guesses]:
            drop = [f for f in self.removable() if f not in keep]
            if self.accept(self.best.without(*drop), f"keep only the {len(keep)} flags {why}"):
                return True
        return False

    def rank(self, flag: str) -> tuple[int, str]:
        """Likelihood order: hinted and seen first, then hinted, then seen, then the rest (by name)."""
        return (0 if flag in self.hints and flag in self.evidence else 1 if flag in self.hints
                else 2 if flag in self.evidence else 3, flag)

    def isolate(self) -> None:
        """Find the necessary flags one by one, each by binary search over a likelihood-ordered list.

        The list holds the flags not yet known necessary, likely ones first. The search finds
        the shortest prefix that, with the flags known necessary, still fails the same way; its
        last flag is necessary (when failing is monotone in the flags), the rest of the list
        after it goes, and the search repeats on the part before it. k necessary flags of n
        cost about k * log2(n) evaluations (QuickXplain's bound), where ddmin pays for chunks
        whose every half fails. Nothing is assumed: a flag wrongly kept here is removed by the
        one-at-a-time pass that follows, which the proof of 1-minimality needs anyway.
        """
        kept: list[str] = []
        candidates = sorted(self.removable(), key=self.rank)
        while candidates:
            # smallest m such that kept + candidates[:m] fails; m = len(candidates) is the current best.
            # With nothing kept yet, m = 0 (no flag at all) is not tried: the original needs some flag.
            lo, hi = (0 if not kept else -1), len(candidates)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                keep = set(kept) | set(candidates[:mid])
                drop = [f for f in self.removable() if f not in keep]
                if self.accept(self.best.without(*drop), f"keep only {' '.join(sorted(keep)) or 'no flag'}"):
                    hi = mid
                else:
                    lo = mid
            if hi == 0:
                return
            kept.append(candidates[hi - 1])
            candidates = candidates[: hi - 1]

    def remove_flags(self, *, isolate: bool = True) -> None:
        """:meth:`isolate` (first pass only), then one at a time, likely flags last, to a fixpoint,
        then each flag alone (:meth:`singles`)."""
        if isolate:
            self.isolate()
        while True:
            progress = True
            while progress:  # one at a time, until nothing can go: 1-minimal in flags
                progress = False
                for flag in sorted(self.removable(), key=lambda f: (self.likely(f), f)):
                    if self.accept(self.best.without(flag), f"remove {flag}"):
                        progress = True
            if not self.singles():
                return

    def singles(self) -> bool:
        """Try each flag of a 1-minimal set alone; True when one still fails the same way.

        Failing is not always monotone: ``--kv-cache-dtype fp4_mx_block16`` fails alone, yet
        with two attention backends set it is one of three flags none of which can go alone.
        Free for two flags or fewer (each single is the other's removal, already evaluated).
        """
        flags = sorted(self.removable(), key=self.rank)
        for flag in flags if len(flags) > 1 else []:
            if self.accept(self.best.without(*[f for f in flags if f != flag]), f"keep only {flag}"):
                return True
        return False

    def simpler_values(self, flag: str, value: Value) -> list[Value]:
        """Values of ``flag`` simpler than ``value``, simplest first (ABSENT excluded: that is removal).

        Only ordered domains (numbers) have simpler values; for a categorical flag
        (``--quantization awq`` vs ``fp8``) the only simpler value is leaving it unset.
        """
        spec = self.space.spec(flag) if self.space is not None else None
        if spec is None or not spec.ordered:
            return []
        position = spec.index(value)
        return [v for v in spec.values[1:position] if v is not None]

    def simplify_values(self) -> None:
        for flag, value in list(self.best.items):
            for simpler in self.simpler_values(flag, value):
                if self.accept(self.best.with_(flag, simpler), f"{flag} {' '.join(simpler)}"):
                    break

    def prove(self) -> list[ProofStep]:
        """The evaluations that show 1-minimality (all cached by now, except in odd cases)."""
        proof = []
        for flag, value in self.best.items:
            if flag not in self.protected:
                candidate = self.best.without(flag)
                proof.append(ProofStep(f"remove {flag}", candidate, self._describe(candidate)))
            for simpler in self.simpler_values(flag, value):
                candidate = self.best.with_(flag, simpler)
                proof.append(ProofStep(f"{flag} {' '.join(simpler) or '(on)'}", candidate, self._describe(candidate)))
        return proof

    def _describe(self, config: Config) -> str:
        signature = self.outcome(config)
        assert signature != self.target, "a 1-minimal reproducer cannot have a simpler failing neighbour"
        return "passed" if signature is None else signature.id


def shrink(config: Config, test: Predicate, **kwargs: Any) -> ShrinkResult:
    """Shrink ``config`` against ``test``; see :class:`Shrinker` for the keyword arguments."""
    return Shrinker(config, test, **kwargs).run()


"""What changed between two sides' outcomes of the same configurations, grouped (``bisect-spec diff``).

Design notes:

- The input is one outcome per configuration on each side (an older SGLang and a newer one), for
  the same configurations. The comparison is pure: no processes, no I/O.
- Failures are matched by cross-release key (:attr:`~bisect_spec.model.signature.Signature.cross_release_key`:
  exception type, failing statement, message without values or release numbers), as the nightly
  matrix compares them, so a failure whose line, function or file moved is *moved*, not
  fixed-plus-new.
- A group is one change, with every configuration it holds (simplest first, "simpler" as
  :func:`bisect_spec.search.space.simplicity_key` defines it) and one example configuration with its
  outcome on both sides. The groups, in the order a reader meets them:

  ``new``       a failure only the new side raises: a regression
  ``wider``     a failure both sides raise, on configurations the old side passed: the check catches more
  ``defaults``  both sides pass with the same flags and a resolved value differs: a silently changed default
  ``fixed``     a failure only the old side raises
  ``narrower``  a failure both sides raise, on configurations the new side passes
  ``moved``     one configuration fails the same way on both sides, from another file, function or line
  ``message``   one configuration fails the same way at the same place, and the message's words differ
  ``replaced``  a configuration fails on both sides in two ways both sides know (neither new nor fixed)

  ``new``, ``wider`` and ``defaults`` are what a gate refuses (:data:`GATED`), unless allowed.
- A configuration that is a usage error, crashed, timed out or a fault of bisect-spec's own emulation
  on either side is not compared: a flag only one side has is the common case, and a fault of ours
  is never a change of SGLang's. They are counted by reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import STAGE_ORDER, Outcome, Status
from bisect_spec.model.verdict_kinds import GATED, KINDS
from bisect_spec.search.space import simplicity_key


def place(outcome: Outcome) -> str:
    """``file:line in function`` of a failure (what *moved* compares), or ``""``."""
    frame = outcome.frame
    return f"{frame.get('file')}:{frame.get('line')} in {frame.get('function')}" if frame else ""


def _comparable(outcome: Outcome, side: str) -> str | None:
    """Why an outcome cannot be compared (naming the side, and SGLang's words for a usage error), or None."""
    if outcome.tool_fault is not None:
        return f"{side}: a fault of bisect-spec's emulation ({outcome.tool_fault})"
    if outcome.status is Status.USAGE:
        message = str(outcome.exception.get("message") or "").split("(choose from", 1)[0].strip()
        return f"{side} refuses a flag or value: {message[:100]}"
    if outcome.status in (Status.CRASHED, Status.TIMEOUT, Status.FLAKY):
        return f"{side}: {outcome.status}"
    return None


def _stages(outcome: Outcome) -> list[str]:
    return [*outcome.record.get("stages_passed", []), *([outcome.record["stage"]] if outcome.record.get("stage") else [])]


def _unchecked(failed: Outcome, other: Outcome, side: str, other_side: str) -> str | None:
    """Why a failure cannot be compared: it is of a stage the other side's release does not run, though that side
    went past where it would (0.5.14+ do not size the memory pool yet): there it was not checked, not fixed. None
    where the other side ran the stage, or stopped before it."""
    stage = failed.record.get("stage") if failed.status is Status.FAILED else None
    if stage not in STAGE_ORDER:
        return None
    seen = _stages(other)
    beyond = [s for s in seen if s in STAGE_ORDER and STAGE_ORDER.index(s) > STAGE_ORDER.index(stage)]
    if stage in seen or not beyond:
        return None
    return f"{side} failed in stage {stage}, which {other_side}'s release does not run"


@dataclass
class Group:
    """One change: its kind, what identifies it, the configurations it holds, one example on both sides."""

    kind: str
    key: str  # the failure's cross-release key, or the resolved field for a default
    configs: list[Config]
    old: Outcome  # the example configuration's outcome on the old side
    new: Outcome  # ... and on the new side
    detail: dict[str, Any] = field(default_factory=dict)
    #: filled by the workflow: the minimal reproducer and its verdict on the other side
    reproducer: dict[str, Any] | None = None

    @property
    def example(self) -> Config:
        return self.configs[0]

    @property
    def failing(self) -> Outcome | None:
        """The example's failing outcome that identifies the group (the new side's, except for fixed/narrower)."""
        if self.kind == "defaults":
            return None
        return self.old if self.kind in ("fixed", "narrower") else self.new  # replaced: what it fails with now

    @property
    def names(self) -> set[str]:
        """What ``--allow`` may name to accept this change: the signature id and key, or the field."""
        if self.kind == "defaults":
            return {str(self.detail["field"])}
        failing = self.failing
        signature = failing.signature if failing is not None else None
        return {self.key, *([signature.id] if signature else [])}

    def to_dict(self) -> dict[str, Any]:
        def side(outcome: Outcome) -> dict[str, Any]:
            entry: dict[str, Any] = {"status": outcome.status.value, "headline": outcome.headline,
                                     "reached": outcome.reached}
            if outcome.signature is not None:
                frame = outcome.frame
                entry.update(signature=outcome.signature.id, place=place(outcome),
                             statement=frame.get("statement"), context=frame.get("context"),
                             exception=outcome.exception)
            return entry

        return {"kind": self.kind, "key": self.key, "count": len(self.configs), "example": self.example.argv(),
                "configs": [c.argv() for c in self.configs[:20]], "old": side(self.old), "new": side(self.new),
                "detail": self.detail, "reproducer": self.reproducer}


@dataclass
class Changes:
    """Every group, and what was compared and what not."""

    groups: list[Group]
    compared: int
    not_compared: dict[str, int]

    def of(self, kind: str) -> list[Group]:
        return [g for g in self.groups if g.kind == kind]

    def counts(self) -> dict[str, int]:
        return {kind: len(self.of(kind)) for kind in KINDS}

    def gating(self, allow: Iterable[str] = ()) -> list[Group]:
        """The groups a gate refuses: new, wider and defaults, less those ``allow`` names."""
        allowed = set(allow)
        return [g for g in self.groups if g.kind in GATED and not (g.names & allowed)]


def _simplest(configs: Iterable[Config]) -> list[Config]:
    return sorted(set(configs), key=simplicity_key)


def compare(old: Mapping[str, Outcome], new: Mapping[str, Outcome]) -> Changes:
    """The changes between ``old`` and ``new`` (outcomes by configuration key) over the keys both hold."""
    not_compared: dict[str, int] = defaultdict(int)
    pairs: list[tuple[Outcome, Outcome]] = []
    for key in sorted(old.keys() & new.keys()):
        a, b = old[key], new[key]
        reason = _comparable(a, "old") or _comparable(b, "new") or _unchecked(a, b, "old", "new") or _unchecked(
            b, a, "new", "old")
        if reason:
            not_compared[reason] += 1
            continue
        pairs.append((a, b))

    old_keys = {a.signature.cross_release_key for a, _ in pairs if a.signature is not None}
    new_keys = {b.signature.cross_release_key for _, b in pairs if b.signature is not None}
    members: dict[tuple[str, str], list[tuple[Outcome, Outcome]]] = defaultdict(list)
    defaults: dict[str, list[tuple[Outcome, Outcome]]] = defaultdict(list)
    for a, b in pairs:
        ka = a.signature.cross_release_key if a.signature is not None else None
        kb = b.signature.cross_release_key if b.signature is not None else None
        if kb is not None and kb not in old_keys:
            members["new", kb].append((a, b))
        elif kb is not None and ka is None:  # a failure the old side has, here on a configuration it passed
            members["wider", kb].append((a, b))
        if ka is not None and ka not in new_keys:
            members["fixed", ka].append((a, b))
        elif ka is not None and kb is None:
            members["narrower", ka].append((a, b))
        if ka is not None and kb is not None and ka != kb and ka in new_keys and kb in old_keys:
            members["replaced", f"{ka}->{kb}"].append((a, b))  # both failures known on both sides: neither new nor fixed
        if ka is not None and ka == kb:
            if place(a) != place(b):
                members["moved", ka].append((a, b))
            elif a.exception.get("message") != b.exception.get("message"):
                members["message", ka].append((a, b))
        if a.passed and b.passed:
            for name in sorted(a.resolved.keys() & b.resolved.keys()):
                if a.resolved[name] != b.resolved[name]:
                    defaults[name].append((a, b))

    groups: list[Group] = []
    for (kind, key), found in members.items():
        configs = _simplest(a.config for a, _ in found)
        by_key = {a.config.key(): (a, b) for a, b in found}
        a, b = by_key[configs[0].key()]
        detail: dict[str, Any] = {}
        if kind == "moved":
            detail = {"old_place": place(a), "new_place": place(b)}
        elif kind == "message":
            detail = {"old_message": a.exception.get("message"), "new_message": b.exception.get("message")}
        groups.append(Group(kind, key, configs, a, b, detail))
    for name, found in defaults.items():
        configs = _simplest(a.config for a, _ in found)
        by_key = {a.config.key(): (a, b) for a, b in found}
        a, b = by_key[configs[0].key()]
        transitions: dict[tuple[str, str], list[Config]] = defaultdict(list)
        for x, y in found:
            transitions[repr(x.resolved[name]), repr(y.resolved[name])].append(x.config)
        groups.append(Group("defaults", name, configs, a, b, {
            "field": name, "old_value": a.resolved[name], "new_value": b.resolved[name],
            "transitions": [{"old": was, "new": now, "count": len(cs), "example": _simplest(cs)[0].argv()}
                            for (was, now), cs in sorted(transitions.items(), key=lambda t: -len(t[1]))]}))
    groups.sort(key=report_order)
    return Changes(groups, len(pairs), dict(not_compared))


def report_order(group: Group) -> tuple[int, int, str]:
    """Where a group stands in a report: by kind (:data:`KINDS`), then the most configurations first."""
    return KINDS.index(group.kind), -len(group.configs), group.key

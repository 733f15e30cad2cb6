"""The flag space of one release: which flags, which values, and what "simpler" means.

Built from the release's own parser (the flag table a worker reads), so a flag a
release lacks is simply absent from its space. Each flag's domain is ordered
simplest-first and always starts with :data:`ABSENT` (the flag not given); that order
is the single definition of "simpler" that shrinking uses (:func:`simplicity_key`).

Value domains: argparse choices where given; ints: unset plus boundary values
(1, 2, 0, 3, 4, 8, 16, 64, -1); floats: a few meaningful fractions and nonsense;
booleans: absent/present; the draft path: absent/present (``@draft``); another path a speculative
check tests (``--speculative-ngram-external-corpus-path``, ``--uno-lora-path``): absent/present
(``@path``, an empty file in evaluations: the checks before weight loading only ask whether it is given,
and without it ``--speculative-algorithm UNO`` stops at "UNO requires --uno-lora-path", masking every UNO
check after it).

**Data flow** (``@dataflow``, issue 12 item 3): the worker reads the release's speculative
checks (:mod:`bisect_spec.inside.data_flow`) and marks each flag whose field they test
(``speculative_read``) with the constants their branches compare it with
(``branch_values``). Those constants join the flag's default domain (a strategy's own value
list is kept as written): a free-text flag with branch values gets exactly those
(``--disaggregation-mode``'s ``decode``), ``--speculative-algorithm`` every name the release accepts (``DFLASH``,
``UNO``, … on 0.5.23; ``EAGLE`` and ``EAGLE3`` on 0.4.6). **Groups** (:data:`GROUPS`): a flag
that is only valid with others (``--enable-lora`` needs a rank and target modules, or
paths) is filled in with them wherever a row sets it.

Pure: no I/O, no processes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import MODEL_FLAGS, PATH_TOKEN, Config, Value

#: The flag is not given: SGLang's default applies.
ABSENT: Value | None = None
PRESENT: Value = ()

INT_VALUES = ("1", "2", "0", "3", "4", "8", "16", "64", "-1")
FLOAT_VALUES = ("0.85", "0.5", "0.95", "0", "1.5", "-1")
DRAFT_FLAG = "--speculative-draft-model-path"
#: Algorithms swept when a release's parser gives no choices for --speculative-algorithm.
ALGORITHMS = ("EAGLE3", "EAGLE", "NEXTN", "STANDALONE", "NGRAM")

#: Flags that other flags need in order to be valid, filled in as a group wherever a row sets the first
#: (``--enable-lora`` alone fails ``lora_hook``'s "specify both --max-lora-rank and --lora-target-modules").
GROUPS: dict[str, tuple[str, ...]] = {"--enable-lora": ("--max-lora-rank", "16", "--lora-target-modules", "all")}
#: Flags known to interact with speculative decoding (kept when the release has them).
INTERACTING = (
    "--tp-size", "--dp-size", "--pp-size", "--enable-dp-attention", "--page-size", "--attention-backend",
    "--prefill-attention-backend", "--decode-attention-backend", "--disable-cuda-graph", "--cuda-graph-max-bs",
    "--max-running-requests", "--mem-fraction-static", "--chunked-prefill-size", "--enable-mixed-chunk",
    "--grammar-backend", "--disable-overlap-schedule", "--kv-cache-dtype", "--quantization",
    "--enable-torch-compile", "--enable-lora", "--max-loras-per-batch", "--lora-backend", "--moe-a2a-backend",
)
#: The core speculative flags (higher coverage strength).
CORE = ("--speculative-algorithm", DRAFT_FLAG, "--speculative-num-steps", "--speculative-eagle-topk",
        "--speculative-num-draft-tokens")
#: Flags never swept: paths, hosts, free text without meaningful values.
_NEVER = ("--speculative-draft-model-revision", "--speculative-token-map", "--speculative-draft-load-format")


@dataclass(frozen=True)
class FlagSpec:
    """One flag and its domain, simplest value first (``values[0]`` is always ABSENT)."""

    flag: str
    values: tuple[Value | None, ...]
    kind: str = "value"

    @property
    def ordered(self) -> bool:
        """Numeric domains have an order worth simplifying along; categorical ones do not."""
        if self.kind in ("int", "float"):
            return True
        values = [v for v in self.values if v]
        return bool(values) and all(_is_number(" ".join(v)) for v in values)

    def index(self, value: Value | None) -> int:
        """Position of ``value`` in the domain; values outside it sort after all known ones."""
        try:
            return self.values.index(value)
        except ValueError:
            return len(self.values)


@dataclass(frozen=True)
class Branch:
    """A branch of SGLang's checks that runs only with ``switches`` on and the algorithm one of
    ``algorithms``, and tests ``reads`` (flags of the space); ``where`` names it (``function:line``)."""

    where: str
    algorithms: tuple[str, ...]
    switches: tuple[str, ...]
    reads: tuple[str, ...]


@dataclass(frozen=True)
class FlagSpace:
    """An ordered set of :class:`FlagSpec`; ``core`` flags get the higher coverage strength."""

    specs: tuple[FlagSpec, ...]
    core: tuple[str, ...] = ()
    fixed: Config = field(default_factory=Config)
    #: flag -> the flags it needs, filled in wherever a row sets it (:data:`GROUPS`)
    groups: Mapping[str, Config] = field(default_factory=dict)
    #: the branches a switch and an algorithm open together, over this space's flags
    #: (:func:`bisect_spec.inside.data_flow.branch_contexts`; rows: :mod:`bisect_spec.search.branches`)
    branches: tuple[Branch, ...] = ()
    #: what a row has where it sets none of these flags: the deployment shape (:mod:`bisect_spec.search.shape`)
    base: Config = field(default_factory=Config)

    def __post_init__(self) -> None:
        names = [s.flag for s in self.specs]
        if len(set(names)) != len(names):
            raise ValueError("duplicate flags in space")

    @property
    def flags(self) -> list[str]:
        return [s.flag for s in self.specs]

    def spec(self, flag: str) -> FlagSpec | None:
        for spec in self.specs:
            if spec.flag == flag:
                return spec
        return None

    def domains(self) -> list[int]:
        return [len(s.values) for s in self.specs]

    def config_of(self, row: Sequence[int]) -> Config:
        """The configuration a row of value indices stands for (plus the fixed flags and groups)."""
        mapping: dict[str, Value | None] = {}
        for spec, index in zip(self.specs, row, strict=True):
            value = spec.values[index]
            if value is not None:
                mapping[spec.flag] = value
        return self.complete(mapping)

    def complete(self, chosen: Mapping[str, Value | None]) -> Config:
        """The configuration of the swept flags ``chosen``: with the fixed flags, and each group's
        companions where its flag is set and they are not."""
        mapping: dict[str, Value | None] = dict(self.fixed.as_dict())
        mapping.update({flag: value for flag, value in chosen.items() if value is not None})
        for flag, value in self.base.items:
            mapping.setdefault(flag, value)
        for flag, companions in self.groups.items():
            if mapping.get(flag) is not None:
                for companion, value in companions.items:
                    mapping.setdefault(companion, value)
        return Config.of(mapping)

    def grid_size(self) -> int:
        size = 1
        for spec in self.specs:
            size *= len(spec.values)
        return size

    def describe(self) -> dict[str, Any]:
        return {"flags": {s.flag: [None if v is None else list(v) for v in s.values] for s in self.specs},
                "core": list(self.core), "fixed": self.fixed.argv(), **({"base": self.base.argv()} if self.base else {}),
                "groups": {flag: companions.argv() for flag, companions in self.groups.items()}}


def focused(space: FlagSpace, algorithms: Sequence[str]) -> FlagSpace:
    """``space`` with ``--speculative-algorithm`` swept over ``algorithms`` (the ones a draft serves) and the
    flag not given (the baseline without speculative decoding); the branches of other algorithms go with
    them. Names the release lacks are dropped; an empty ``algorithms`` keeps the space as it is."""
    spec = space.spec("--speculative-algorithm")
    if spec is None or not algorithms:
        return space
    wanted = {a.upper() for a in algorithms}
    values = tuple(v for v in spec.values if v is ABSENT or (v and v[0].upper() in wanted))
    specs = tuple(FlagSpec(s.flag, values, s.kind) if s is spec else s for s in space.specs)
    branches = tuple(b for b in space.branches if not b.algorithms or wanted & {a.upper() for a in b.algorithms})
    return replace(space, specs=specs, branches=branches)


def without_draft_path(space: FlagSpace) -> FlagSpace:
    """``space`` for a target without a draft path to give (no draft, or one with no model path of its own:
    DeepSeek's NEXTN/MTP layers, NGRAM's corpus): the draft path flag is not swept (a row naming ``@draft`` would
    name nothing), nor read by a branch's rows."""
    specs = tuple(s for s in space.specs if s.flag != DRAFT_FLAG)
    branches = tuple(replace(b, reads=tuple(r for r in b.reads if r != DRAFT_FLAG)) for b in space.branches)
    return replace(space, specs=specs, core=tuple(f for f in space.core if f != DRAFT_FLAG), branches=branches)


def simplicity_key(config: Config, space: FlagSpace | None = None) -> tuple[int, int, tuple[int, ...], str]:
    """The one definition of "simpler": fewer flags, then values earlier in their domains.

    Ties are broken by total value index, then the sorted index vector, then the canonical
    text, so the order is total and deterministic.
    """
    indices = []
    for flag, value in config.items:
        spec = space.spec(flag) if space is not None else None
        indices.append(spec.index(value) if spec is not None else _natural_index(value))
    return (len(config), sum(indices), tuple(sorted(indices, reverse=True)), config.key())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _natural_index(value: Value) -> int:
    """Simplicity of a value outside any domain: switches, then small numbers, then the rest."""
    if not value:
        return 0
    text = " ".join(value)
    try:
        number = float(text)
    except ValueError:
        return 20 + len(text)
    return 1 + min(int(abs(number)), 16) + (5 if number < 0 else 0)


def domain_for(entry: Mapping[str, Any], overrides: Mapping[str, Sequence[str | None]] | None = None) -> FlagSpec | None:
    """The domain of one flag from its parser entry (None when it has no meaningful values)."""
    flag = str(entry["option"])
    branch = [(str(v),) for v in entry.get("branch_values") or () if str(v).strip()]
    if overrides and flag in overrides:
        values: list[Value | None] = [ABSENT]
        for raw in overrides[flag]:
            if raw is None or raw == "":
                continue
            values.append(PRESENT if raw == "@on" else tuple(str(raw).split()))
        return FlagSpec(flag, tuple(values), str(entry.get("kind", "value")))  # as the strategy wrote it
    if entry.get("kind") == "env":
        # an environment variable: switched on and off when boolean, a few small values when int
        if entry.get("type") == "bool":
            return FlagSpec(flag, (ABSENT, ("1",), ("0",)), "env")
        if entry.get("type") == "int":
            return FlagSpec(flag, (ABSENT, ("0",), ("1",), ("2",), ("-1",)), "env")
        return None
    if DRAFT_FLAG in entry.get("aliases", (flag,)):
        return FlagSpec(flag, (ABSENT, ("@draft",)), "path")
    if _is_checked_path(entry, flag, branch):
        return FlagSpec(flag, (ABSENT, (PATH_TOKEN,)), "path")
    if entry.get("kind") == "bool" or entry.get("nargs") == 0:
        return FlagSpec(flag, (ABSENT, PRESENT), "bool")
    if entry.get("nargs") not in (None, "?", 1):
        return None
    if flag == "--speculative-algorithm" and not entry.get("choices"):
        # every name the release accepts (data flow), the usual ones first; the hand list without data flow
        known = [v[0] for v in branch] or list(ALGORITHMS)
        ordered = [a for a in ALGORITHMS if a in known] + [a for a in known if a not in ALGORITHMS]
        return FlagSpec(flag, (ABSENT, *[(a,) for a in ordered]), "choice")
    choices = entry.get("choices")
    if choices:
        return FlagSpec(flag, (ABSENT, *[(str(c),) for c in choices]), "choice")
    kind = entry.get("type")
    if kind == "int":
        return FlagSpec(flag, _with((ABSENT, *[(v,) for v in INT_VALUES]), _admissible(entry, branch)), "int")
    if kind == "float":
        return FlagSpec(flag, _with((ABSENT, *[(v,) for v in FLOAT_VALUES]), _admissible(entry, branch)), "float")
    if branch and kind in (None, "str"):
        # free text the speculative checks compare with constants: exactly those constants
        return FlagSpec(flag, (ABSENT, *branch), "value")
    return None


def _is_checked_path(entry: Mapping[str, Any], flag: str, branch: Sequence[Value]) -> bool:
    """A path a speculative check tests for being given (compared with nothing else), other than the model's."""
    return (bool(entry.get("speculative_read")) and flag.endswith("-path") and flag not in MODEL_FLAGS
            and entry.get("kind") == "value" and entry.get("nargs") is None and not entry.get("choices")
            and entry.get("type") in (None, "str") and not branch)


def _admissible(entry: Mapping[str, Any], branch: Sequence[Value]) -> list[Value]:
    """The branch values this flag's parser accepts (its choices, its number type)."""
    choices = entry.get("choices")
    kept = []
    for value in branch:
        text = value[0]
        if choices:
            if text in {str(c) for c in choices}:
                kept.append(value)
        elif entry.get("type") == "int":
            if text.lstrip("-").isdigit():
                kept.append(value)
        elif entry.get("type") == "float":
            if _is_number(text):
                kept.append(value)
        elif entry.get("kind") != "bool":
            kept.append(value)
    return kept


def _with(values: tuple[Value | None, ...], more: Sequence[Value]) -> tuple[Value | None, ...]:
    """``values`` and then those of ``more`` it lacks (a number compared as ``1.0`` is ``1``'s twin)."""
    seen = {_canonical_number(v) for v in values if v is not None}
    extra = []
    for value in more:
        if _canonical_number(value) not in seen:
            seen.add(_canonical_number(value))
            extra.append(value)
    return (*values, *extra)


def _canonical_number(value: Value) -> Value:
    text = " ".join(value)
    try:
        return (repr(float(text)),)
    except ValueError:
        return value


def build_space(table: Sequence[Mapping[str, Any]], *, include: Iterable[str], exclude: Iterable[str] = (),
                core: Iterable[str] = CORE, values: Mapping[str, Sequence[str | None]] | None = None,
                fixed: Config | None = None, require: Iterable[str] = (),
                groups: Mapping[str, Sequence[str]] | None = None) -> FlagSpace:
    """Select flags from a release's flag table and give each its domain.

    :param include: flag names or globs (``--speculative-*``); ``@interacting`` = :data:`INTERACTING`;
        ``@spec-env`` = the environment variables the release's speculative code reads; ``@dataflow`` =
        the flags whose fields the release's speculative checks test.
    :param groups: flag to the flags (and values) it needs, filled in together (default :data:`GROUPS`);
        a group is kept only where the release has all its flags.
    :param values: per-flag value lists replacing the default domain (``""`` = unset, ``"@on"`` = switch).
    :param require: flags that must exist in this release.
    :raises UsageError: a required flag is missing from this release.
    """
    by_option = {str(e["option"]): e for e in table}
    aliases = {alias: str(e["option"]) for e in table for alias in e["aliases"]}
    patterns: list[str] = []
    for item in include:
        if item == "@spec-env":
            patterns.extend(sorted(str(e["option"]) for e in table if e.get("kind") == "env"))
        elif item == "@dataflow":
            patterns.extend(sorted(str(e["option"]) for e in table if e.get("speculative_read")))
        else:
            patterns.extend(INTERACTING if item == "@interacting" else [item])
    # a fixed flag is in every row as given, so it is not swept (under any of its names)
    excluded = [*_NEVER, *exclude, *(aliases.get(f, f) for f in (fixed.flags() if fixed else ()))]
    chosen: list[str] = []
    for pattern in patterns:
        matches = [o for o in by_option if fnmatch.fnmatchcase(o, pattern)] if any(c in pattern for c in "*?[") \
            else ([aliases[pattern]] if pattern in aliases else [])
        for option in sorted(matches):
            if option not in chosen and not any(fnmatch.fnmatchcase(option, x) for x in excluded):
                chosen.append(option)
    for flag in require:
        if flag not in aliases:
            raise UsageError(f"this release has no flag {flag}, which the strategy requires")
    overrides = {aliases.get(k, k): v for k, v in (values or {}).items()}
    specs = [spec for option in chosen if (spec := domain_for(by_option[option], overrides)) is not None]
    core_flags = tuple(aliases[c] for c in core if c in aliases and aliases[c] in {s.flag for s in specs})
    # core flags first: the covering array gives them the higher strength
    specs.sort(key=lambda s: (s.flag not in core_flags, core_flags.index(s.flag) if s.flag in core_flags else 0))
    kept_groups = {}
    for flag, argv in (GROUPS if groups is None else groups).items():
        if flag in aliases:
            companions = Config.from_argv(list(argv))
            if all(companion in aliases for companion, _ in companions.items):
                kept_groups[aliases[flag]] = Config.of({aliases[c]: v for c, v in companions.items})
    return FlagSpace(tuple(specs), core_flags, fixed or Config(), kept_groups, _branches(table, specs))


def _branches(table: Sequence[Mapping[str, Any]], specs: Sequence[FlagSpec]) -> tuple[Branch, ...]:
    """The data flow's branch contexts (``branch_contexts`` of the algorithm's entry) whose algorithm,
    switches and at least one read are flags of the space, as flags. A switch is an on/off flag that is
    off by default (a ``store_false`` flag is on unless given: giving it closes the branch); a field
    two options share reads as each of them that is swept."""
    swept = {s.flag for s in specs}
    by_dest: dict[str, list[Mapping[str, Any]]] = {}
    for entry in table:
        if entry.get("dest"):
            by_dest.setdefault(str(entry["dest"]), []).append(entry)

    def swept_options(dest: str) -> list[str]:
        return [str(e["option"]) for e in by_dest.get(dest, ()) if str(e["option"]) in swept]

    def switch(dest: str) -> str | None:
        found = [str(e["option"]) for e in by_dest.get(dest, ())
                 if e.get("kind") == "bool" and not e.get("default") and str(e["option"]) in swept]
        return found[0] if found else None

    if not swept_options("speculative_algorithm"):
        return ()
    out = []
    for entry in table:
        for context in entry.get("branch_contexts") or ():
            switches = tuple(switch(d) or "" for d in context["switches"])
            reads = tuple(dict.fromkeys(option for d in context["reads"] for option in swept_options(d)
                                        if option not in switches))
            if reads and all(switches):
                out.append(Branch(f"{context['function']}:{context['line']}",
                                  tuple(str(a) for a in context["algorithms"]), switches, reads))
    return tuple(out)

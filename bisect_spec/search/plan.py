"""Sweep strategies (data files) and the plan they produce for a flag space.

A strategy is a TOML file in ``strategies/`` (``--strategy NAME``) or anywhere
(``--strategy path/to/file.toml``)::

    include = ["--speculative-*", "@dataflow"]      # flags (globs) to sweep; @dataflow: what the checks test
    exclude = []                                     # flags never to sweep
    strength = 2                                     # t-way coverage over all flags
    core = ["--speculative-algorithm", ...]          # flags with higher coverage
    core_strength = 3
    core_alone = true                                # the core flags' array again, no other flag given
    branches = true                                  # switch + algorithm + each read, alone (branches.py)
    random_budget = 300                              # Hypothesis search after the array
    seed = 0
    [values]                                         # per-flag domains ("" = unset)
    "--speculative-num-steps" = ["", "1", "0", "-1"]
    fit = true                                       # values unfit for the model/box: tested once (fit.py)
    rounds = 3                                       # masking-aware rounds after the array (masking.py)
    round_rows = 400                                 # rows per round at most
    peel = true                                      # failing rows peeled after the search (peel.py)
    peel_depth = 8                                   # levels of peeling at most
    peel_width = 0                                   # rows per signature and level at most (0: all)
    peel_remove = "one"                              # "one" flag of the reproducer, or every "non-core" one
    [forbid]                                         # more values tested once, never combined
    "--kv-cache-dtype" = ["fp4_e2m1"]
    [groups]                                         # flags filled in together (default: space.GROUPS)
    "--enable-lora" = "--max-lora-rank 16 --lora-target-modules all"

The plan is deterministic: the same space, strategy and seed give the same list of
configurations, in the same order. Pure: no I/O beyond reading the strategy file.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config
from bisect_spec.search.covering import covering_array
from bisect_spec.search.space import CORE, FlagSpace, build_space, focused

DEFAULT_STRATEGY = "default"
#: what peeling removes of a failure's reproducer (:func:`bisect_spec.search.peel.peel`'s ``remove``)
PEEL_REMOVE = ("one", "non-core")
_KEYS = {"description", "include", "exclude", "strength", "core", "core_strength", "random_budget", "seed", "values",
         "require", "forbid", "fit", "rounds", "round_rows",
         "peel", "peel_depth", "peel_width", "peel_remove", "groups", "core_alone", "branches"}


@dataclass(frozen=True)
class Strategy:
    """A named sweep definition."""

    name: str
    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    strength: int = 2
    core: tuple[str, ...] = CORE
    core_strength: int = 3
    random_budget: int = 200
    seed: int = 0
    values: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict)
    require: tuple[str, ...] = ()
    description: str = ""
    forbid: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fit: bool = True
    rounds: int = 0
    round_rows: int = 400
    peel: bool = False
    peel_depth: int = 8
    peel_width: int = 0
    peel_remove: str = "one"
    core_alone: bool = False
    branches: bool = False
    #: flag -> the flags it needs, filled in together; None: :data:`bisect_spec.search.space.GROUPS`
    groups: Mapping[str, tuple[str, ...]] | None = None
    #: flags every row has, as typed (``diff``'s ``-- FLAGS``): not swept
    fixed: tuple[str, ...] = ()
    #: the algorithms swept, besides none (``--algorithms``: the named draft's by default); empty: every one
    #: the release accepts
    algorithms: tuple[str, ...] = ()

    def space(self, table: Sequence[Mapping[str, Any]]) -> FlagSpace:
        """This strategy's flag space for a release (from that release's flag table)."""
        fixed = Config.from_argv(list(self.fixed))
        space = build_space(table, include=self.include, exclude=self.exclude, core=self.core,
                            values=self.values, require=self.require, groups=self.groups, fixed=fixed)
        return focused(space, self.algorithms)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "include": list(self.include), "exclude": list(self.exclude),
                "strength": self.strength, "core": list(self.core), "core_strength": self.core_strength,
                "random_budget": self.random_budget, "seed": self.seed,
                "values": {k: list(v) for k, v in self.values.items()}, "description": self.description,
                "forbid": {k: list(v) for k, v in self.forbid.items()}, "fit": self.fit, "rounds": self.rounds,
                "round_rows": self.round_rows, "peel": self.peel, "peel_depth": self.peel_depth,
                "peel_width": self.peel_width, "peel_remove": self.peel_remove, "core_alone": self.core_alone,
                "branches": self.branches, **({"fixed": list(self.fixed)} if self.fixed else {}),
                **({"algorithms": list(self.algorithms)} if self.algorithms else {}),
                **({} if self.groups is None else {"groups": {k: " ".join(v) for k, v in self.groups.items()}})}


def strategy_dir() -> Any:
    return resources.files("bisect_spec").joinpath("data", "strategies")


def strategy_names() -> list[str]:
    return sorted(p.name.removesuffix(".toml") for p in strategy_dir().iterdir() if p.name.endswith(".toml"))


def load_strategy(name: str, *, seed: int | None = None, random_budget: int | None = None) -> Strategy:
    """A shipped strategy by name, or a strategy file by path.

    :raises UsageError: unknown name (with the closest ones) or a malformed file (file, what, how to fix).
    """
    if name.endswith(".toml") or "/" in name:
        path: Any = Path(name)
        if not path.is_file():
            raise UsageError(f"strategy file {name} does not exist")
    else:
        names = strategy_names()
        if name not in names:
            close = difflib.get_close_matches(name, names, n=2, cutoff=0.4)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise UsageError(f"unknown strategy '{name}': {hint}choose one of {', '.join(names)}, or pass a .toml file")
        path = strategy_dir().joinpath(f"{name}.toml")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"strategy file {path}: {exc}") from exc
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise UsageError(f"strategy file {path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    if not data.get("include"):
        raise UsageError(f"strategy file {path}: 'include' must list at least one flag")
    for key in ("include", "exclude", "core", "require"):
        if key in data and not (isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])):
            raise UsageError(f"strategy file {path}: '{key}' must be a list of strings, e.g. {key} = [\"--page-size\"]")
    if "values" in data and not isinstance(data["values"], dict):
        raise UsageError(f"strategy file {path}: 'values' must be a table: [values] then \"--flag\" = [\"\", \"1\"]")
    if "forbid" in data and not (isinstance(data["forbid"], dict) and all(
            isinstance(v, list) and all(isinstance(x, str) and x for x in v) for v in data["forbid"].values())):
        raise UsageError(f"strategy file {path}: 'forbid' must be a table: [forbid] then \"--flag\" = [\"value\"]")
    if "groups" in data and not (isinstance(data["groups"], dict) and all(
            isinstance(v, str) and v.startswith("--") for v in data["groups"].values())):
        raise UsageError(f"strategy file {path}: 'groups' must be a table: [groups] then \"--enable-lora\" = "
                         f"\"--max-lora-rank 16 --lora-target-modules all\"")
    for key in ("fit", "peel", "core_alone", "branches"):
        if key in data and not isinstance(data[key], bool):
            raise UsageError(f"strategy file {path}: '{key}' must be true or false")
    for flag, listed in data.get("values", {}).items():
        if not isinstance(listed, list):
            raise UsageError(f"strategy file {path}: values for {flag} must be a list, e.g. \"{flag}\" = [\"\", \"1\"]")
    try:
        values = {str(k): tuple(None if v == "" else str(v) for v in vs) for k, vs in data.get("values", {}).items()}
        strategy = Strategy(
            name=str(name if "/" not in name else Path(name).stem), include=tuple(data["include"]),
            exclude=tuple(data.get("exclude", ())), strength=int(data.get("strength", 2)),
            core=tuple(data.get("core", CORE)), core_strength=int(data.get("core_strength", 3)),
            random_budget=int(data.get("random_budget", 200)), seed=int(data.get("seed", 0)), values=values,
            require=tuple(data.get("require", ())), description=str(data.get("description", "")),
            forbid={str(k): tuple(str(x) for x in v) for k, v in data.get("forbid", {}).items()},
            fit=bool(data.get("fit", True)), rounds=int(data.get("rounds", 0)),
            round_rows=int(data.get("round_rows", 400)), peel=bool(data.get("peel", False)),
            peel_depth=int(data.get("peel_depth", 8)), peel_width=int(data.get("peel_width", 0)),
            peel_remove=str(data.get("peel_remove", "one")),
            core_alone=bool(data.get("core_alone", False)), branches=bool(data.get("branches", False)),
            groups={str(k): tuple(str(v).split()) for k, v in data["groups"].items()} if "groups" in data else None)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"strategy file {path}: {exc}") from exc
    if not 1 <= strategy.strength <= 4 or not 1 <= strategy.core_strength <= 5:
        raise UsageError(f"strategy file {path}: strength must be 1-4 and core_strength 1-5")
    if strategy.peel_width < 0:
        raise UsageError(f"strategy file {path}: peel_width must be 0 (every row) or a number of rows, "
                         f"not {strategy.peel_width}")
    if strategy.peel_remove not in PEEL_REMOVE:
        raise UsageError(f"strategy file {path}: peel_remove must be one of {', '.join(PEEL_REMOVE)}, "
                         f"not {strategy.peel_remove!r}")
    if seed is not None or random_budget is not None:
        strategy = Strategy(**{**strategy.__dict__, "seed": strategy.seed if seed is None else seed,
                               "random_budget": strategy.random_budget if random_budget is None else random_budget})
    return strategy


def covering_plan(space: FlagSpace, strategy: Strategy) -> list[Config]:
    """The covering-array part of a plan: t-way over all flags, higher over the core flags."""
    domains = space.domains()
    core = [i for i, flag in enumerate(space.flags) if flag in space.core]
    subsets = [(core, strategy.core_strength)] if len(core) >= 2 else []
    rows = covering_array(domains, strategy.strength, subsets=subsets, seed=strategy.seed)
    if strategy.core_alone and len(core) >= 2:
        # the core flags' t-tuples again with no other flag given: no check of another flag masks them
        alone = covering_array([domains[i] for i in core], min(strategy.core_strength, len(core)), seed=strategy.seed)
        for short in alone:
            full = [0] * len(domains)
            for index, value in zip(core, short, strict=True):
                full[index] = value
            rows.append(tuple(full))
    seen: set[Config] = set()
    plan = []
    for row in [tuple(0 for _ in domains), *rows]:  # the baseline (no swept flag given) first
        config = space.config_of(row)
        if config not in seen:
            seen.add(config)
            plan.append(config)
    return plan


def fitted_plan(space: FlagSpace, strategy: Strategy, *, model_config: Mapping[str, Any],
                hardware: Mapping[str, Any] | None, will_not_start: Sequence[tuple[str, str, str]] = (),
                ) -> tuple[list[Config], FlagSpace, list[Any]]:
    """The covering plan over the values that fit this model and box, then one row per unfit value.

    :param will_not_start: ``(flag, value, why)`` of values evaluated to not start on the box (the deployment
        shape's widths that run out of memory): unfit too, tested once.

    :return: the plan, the fitted space (what the search draws from) and the unfit values
        (:class:`bisect_spec.search.fit.Unfit`).
    """
    from bisect_spec.search.fit import Unfit, fitted_space, once_rows, unfit_values

    forbid = {flag: tuple(tuple(v.split()) for v in values) for flag, values in strategy.forbid.items()}
    unfit = unfit_values(space, model_config=model_config, hardware=hardware, forbid=forbid, automatic=strategy.fit)
    unfit += [Unfit(flag, tuple(value.split()), f"will not start: {why}") for flag, value, why in will_not_start
              if (spec := space.spec(flag)) is not None and tuple(value.split()) in spec.values
              and not any(u.flag == flag and u.value == tuple(value.split()) for u in unfit)]
    fitted = fitted_space(space, unfit)
    plan = covering_plan(fitted, strategy)
    seen = set(plan)
    for row in once_rows(space, unfit):
        if row not in seen:
            seen.add(row)
            plan.append(row)
    return plan, fitted, unfit

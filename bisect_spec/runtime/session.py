"""An evaluation session: one release, one model, one draft, one hardware box.

It owns the worker pool for the release environment (local worker processes, or Ray
actors: see :mod:`bisect_spec.runtime.executor`), turns :class:`~bisect_spec.model.flags.Config`
objects into the argv ``prepare_server_args`` receives (``@model``/``@draft`` become the
materialised profile directories), validates flags against the release's own parser, and
wraps worker records into :class:`~bisect_spec.model.outcome.Outcome` objects.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisect_spec.errors import ArchitectureUnknown, NoWarmWorker, ReleaseError, UsageError, WarmWorkerError, WorkerError
from bisect_spec.model.flags import DRAFT_FLAGS, PATH_TOKEN, Config, is_env
from bisect_spec.model.outcome import Outcome
from bisect_spec.runtime import environments, sources
from bisect_spec.runtime.executor import LOCAL, EvaluationPool, make_pool
from bisect_spec.runtime.profiles import DraftProfile, HardwareProfile, ModelProfile
from bisect_spec.runtime.warm import WarmPool, idle_limit
from bisect_spec.runtime.warm import everywhere as warm_everywhere

log = logging.getLogger(__name__)

MODEL = "@model"
DRAFT = "@draft"
#: Algorithms that take no draft model, and those that cannot run without one.
DRAFTLESS_ALGORITHMS = frozenset({"NGRAM"})
NEEDS_DRAFT = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "DFLASH", "DSPARK"})


#: SGLang's option naming a YAML file of options (0.5.3 and newer)
CONFIG_FLAG = "--config"


def placeholder_file() -> Path:
    """The empty file ``@path`` stands for in evaluations (created on first use)."""
    path = environments.home() / "placeholders" / "empty-file"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return path


@dataclass(frozen=True)
class Target:
    """What configurations are evaluated against."""

    release: str
    model: ModelProfile
    draft: DraftProfile | None
    hardware: HardwareProfile
    #: environment variables every evaluation gets (the caller's ``SGLANG_*`` and ``--env``)
    env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> dict[str, Any]:
        return {
            **({"env": dict(self.env)} if self.env else {}),
            "release": self.release,
            "model": self.model.name,
            "model_architecture": self.model.architecture,
            "draft": self.draft.name if self.draft else None,
            "draft_algorithm": self.draft.algorithm if self.draft else None,
            "hardware": self.hardware.label,
        }


#: the algorithms SGLang serves from an MTP model's own layers when no draft path is given
MTP_ALGORITHMS = frozenset({"EAGLE", "NEXTN", "MTP"})


def _mtp_layers(config: dict[str, Any]) -> int:
    """``num_nextn_predict_layers`` of a model's config (top level, or its text config)."""
    for node in (config, config.get("text_config") or {}):
        value = node.get("num_nextn_predict_layers") if isinstance(node, dict) else None
        if isinstance(value, int):
            return value
    return 0


class Session:
    """Workers for one :class:`Target`; use as a context manager.

    :param jobs: parallel workers (each imports SGLang once); ``None`` = as many as the executor has CPUs.
    :param timeout: seconds one evaluation may take before the worker is killed.
    :param executor: ``local`` (worker processes here) or ``ray`` (Ray actors; ``address`` says which cluster).
    :param warm: ``start`` or ``reuse`` a warm worker (:mod:`bisect_spec.runtime.warm`) that outlives this
        session, instead of workers of its own: ``reuse`` only takes one that already runs; ``own``
        workers of its own whatever the settings; ``None``: own. With ``BISECT_SPEC_WARM=all``, ``None`` and ``reuse``
        are ``start``.
        Off when ``BISECT_SPEC_WORKER_IDLE=0``; local executor only.
    :param notify: told at once, in a line, when a worker has to be started (SGLang loading).
    """

    def __init__(self, target: Target, *, jobs: int | None = 1, timeout: float = 60.0, log_dir: Path | None = None,
                 extra_env: tuple[tuple[str, str], ...] = (), executor: str = LOCAL, address: str | None = None,
                 environment: environments.Environment | None = None, warm: str | None = None,
                 notify: Callable[[str], None] | None = None) -> None:
        self.target = target
        self.notify = notify
        #: the release's own environment, unless one is given (a commit's tree over a chosen release)
        self.environment = environment or sources.environment_for(target.release)
        log_path = str(log_dir / f"worker-{target.release}.log") if log_dir else None
        spec = self.environment.worker_spec(hardware=target.hardware.record, gpus=target.hardware.gpus,
                                            log_path=log_path, extra_env=extra_env)
        self.pool: EvaluationPool = make_pool(spec, jobs=jobs, timeout=timeout, executor=executor, address=address)
        if warm in (None, "reuse") and executor == LOCAL and warm_everywhere():
            warm = "start"  # every command on warm workers: a bisection's too (its releases' workers stay for the next)
        if warm in ("start", "reuse") and executor == LOCAL and idle_limit() > 0:
            self.pool = WarmPool(spec, jobs=self.pool.jobs, timeout=timeout, label=self.label, start=warm == "start",
                                 notify=notify, daemon_label=f"SGLang {target.release} on {target.hardware.name}")
        self.info: dict[str, Any] = {}
        self._flags: list[dict[str, Any]] | None = None

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> dict[str, Any]:
        """Start the workers (idempotent).

        :raises ReleaseError: SGLang does not import in this environment, naming the fix.
        """
        if self.info:
            return self.info
        if self.notify and not isinstance(self.pool, WarmPool):
            self.notify(f"starting an evaluation worker for {self.label}: importing SGLang")
        try:
            try:
                self.info = self.pool.start()
            except NoWarmWorker:  # told to reuse one, and none runs (or it just stopped): a worker of our own
                assert isinstance(self.pool, WarmPool)
                self.pool = make_pool(self.pool.spec, jobs=self.pool.jobs, timeout=self.pool.timeout)
                if self.notify:
                    self.notify(f"starting an evaluation worker for {self.label}: importing SGLang")
                self.info = self.pool.start()
        except WarmWorkerError:
            raise  # its own fix; nothing wrong with the release
        except WorkerError as exc:
            fix = ("reinstall it: bisect-spec env remove {r} && bisect-spec env install {r}"
                   if self.target.release != environments.CURRENT
                   else f"install sglang into {self.environment.python}, or pick an installed release with --sglang")
            if "+" in self.target.release:  # a source tree's label: its code, not the release, does not import
                fix = f"this tree does not import over SGLang {self.target.release.split('+')[0]}'s environment"
            raise ReleaseError(f"{exc}; {fix.format(r=self.target.release)}") from exc
        if self.target.release == environments.CURRENT:
            self.target = Target(self.info["sglang_version"], self.target.model, self.target.draft, self.target.hardware)
        self._check_architecture()
        return self.info

    def _check_architecture(self) -> None:
        """Refuse at once a model whose architecture the release has no class for.

        Without this, an old release fails every configuration obscurely (an unknown
        ``model_type`` deep in transformers); with it, the user reads which release first
        knows the architecture.

        :raises ArchitectureUnknown: naming the first release known to have it.
        """
        architecture = self.target.model.architecture
        if architecture in ("", "?"):
            return
        answer = self.pool.request({"op": "architecture", "architecture": architecture})
        if answer.get("known", True):
            return
        self.close()
        self.info = {}
        raise ArchitectureUnknown(self.target.release, architecture, self.target.model.name,
                                  environments.first_release_knowing(architecture))

    def close(self) -> None:
        self.pool.close()

    @property
    def label(self) -> str:
        """What its workers load, in words: ``SGLang 0.5.23 on rtx-pro-6000 (8 GPUs)``."""
        return f"SGLang {self.target.release} on {self.target.hardware.label}"

    @property
    def hardware_label(self) -> str:
        return str(self.info.get("hardware", self.target.hardware.label))

    # -- flags -----------------------------------------------------------------

    def flags(self) -> list[dict[str, Any]]:
        """The release's flag table, read from its parser once and cached on disk."""
        if self._flags is None:
            cache = self.environment.path / environments.flags_cache_name() if self.environment.path else None
            if cache is not None and cache.is_file():
                self._flags = json.loads(cache.read_text())
            else:
                if not self.info:
                    self.start()
                self._flags = self.pool.request({"op": "flags"})["flags"]
                if cache is not None:
                    environments.record_flag_table(cache.parent, self._flags)
        assert self._flags is not None
        return self._flags

    def option_table(self) -> dict[str, dict[str, Any]]:
        return {alias: flag for flag in self.flags() for alias in flag["aliases"]}

    def canonical_flag(self, flag: str) -> str:
        """This release's own spelling of ``flag`` (``--tp-size`` is ``--tensor-parallel-size`` in 0.5.9); ``flag``
        itself where the release has no such flag."""
        entry = self.option_table().get(flag)
        return str(entry["option"]) if entry is not None else flag

    def canonical(self, config: Config) -> Config:
        """Spell every flag the way this release names it (aliases and argparse prefixes resolved).

        ``--tp 8`` becomes ``--tp-size 8``: argparse accepts unique prefixes, and one
        spelling per flag keeps cache keys and reproducers stable.
        :raises UsageError: unknown flag (with the closest names and the installed releases
            that have it) or an ambiguous prefix.
        """
        table = self.option_table()
        mapping: dict[str, tuple[str, ...]] = {}
        for flag, value in config.items:
            if is_env(flag):
                mapping[flag] = value
                continue
            entry = table.get(flag)
            if entry is None:
                matches = {table[o]["option"]: table[o] for o in table if o.startswith(flag)}
                if len(matches) == 1:
                    entry = next(iter(matches.values()))
                elif len(matches) > 1:
                    others = environments.releases_with_flag(flag, exclude=self.target.release)
                    where = f"; as an exact flag it exists in {environments.spans(others)}" if others else ""
                    raise UsageError(f"flag {flag} is ambiguous in SGLang {self.target.release}: "
                                     f"it could be {', '.join(sorted(matches)[:4])}{where}")
            if entry is None and flag == CONFIG_FLAG:
                others = environments.releases_with_flag(flag, exclude=self.target.release)
                where = f"{environments.spans(others)} do" if others else "no installed release does"
                raise UsageError(f"SGLang {self.target.release} does not read config files: {CONFIG_FLAG} is new "
                                 f"({where}); write the file's options as flags instead")
            if entry is None:
                close = difflib.get_close_matches(flag, list(table), n=2, cutoff=0.75)
                hint = f"did you mean {' or '.join(close)}? " if close else ""
                others = environments.releases_with_flag(flag, exclude=self.target.release)
                where = f"it exists in {environments.spans(others)}" if others else "no installed release has it"
                raise UsageError(f"SGLang {self.target.release} has no flag {flag}: {hint}{where}")
            mapping[entry["option"]] = value
        return Config(tuple(mapping.items()))

    def merge_config_file(self, config: Config) -> Config:
        """``config`` with ``--config FILE`` replaced by the file's options, merged as this release's
        ``prepare_server_args`` merges them (the command line wins), in canonical spelling.

        The release's own code reads the file (in the worker), so YAML keys, booleans and lists
        mean what they mean to that release; the result is explicit flags, which is what is
        evaluated, shrunk and written into reproducers. Needs a started session.
        :raises UsageError: the file is not on this machine, or the release refuses it (one line).
        """
        value = config.get(CONFIG_FLAG)
        if value is None:
            return config
        if len(value) != 1:
            raise UsageError(f"{CONFIG_FLAG} takes one file: {CONFIG_FLAG} FILE")
        path = Path(value[0]).expanduser().absolute()  # the worker's working directory may differ
        if not path.is_file():
            raise UsageError(f"{CONFIG_FLAG} {value[0]}: no such file here: give the path of the YAML file the command reads")
        argv = [*config.without(CONFIG_FLAG).flag_argv(), CONFIG_FLAG, str(path)]
        reply = self.pool.request({"op": "merged_argv", "argv": argv})
        if "error" in reply:
            raise UsageError(f"SGLang {self.target.release} cannot read {CONFIG_FLAG} {value[0]}: {reply['error']}")
        merged: dict[str, tuple[str, ...]] = dict(item for item in config.items if is_env(item[0]))
        flag = None
        for token in reply["argv"]:  # argparse's reading: a flag repeated later wins
            if token.startswith("--"):
                flag, eq, inline = token.partition("=")
                merged.pop(flag, None)
                merged[flag] = (inline,) if eq else ()
                flag = None if eq else flag
            elif flag is not None:
                merged[flag] = (*merged[flag], token)
        return self.canonical(Config(tuple(merged.items())))

    # -- evaluation ------------------------------------------------------------

    def with_draft(self, config: Config) -> Config:
        """Add ``--speculative-draft-model-path @draft`` when speculation is asked for without one,
        for an algorithm that takes a draft model (never for NGRAM, which has none)."""
        draft = self.target.draft
        if draft is None or draft.path is None or "--speculative-algorithm" not in config.flags():
            return config
        if (config.get("--speculative-algorithm") or ("",))[0].upper() in DRAFTLESS_ALGORITHMS:
            return config
        if any(flag in config.flags() for flag in DRAFT_FLAGS):
            return config
        return config.with_("--speculative-draft-model-path", DRAFT)

    @staticmethod
    def missing_draft(config: Config, model_config: dict[str, Any] | None = None) -> str | None:
        """Why a launch of ``config`` would fail for want of a draft model, or None. ``model_config``: the target's
        ``config.json``; a model that carries its own MTP layers (``num_nextn_predict_layers`` > 0: DeepSeek-V3)
        needs no draft for EAGLE/NEXTN/MTP, SGLang fills the draft path from the model itself."""
        algorithm = (config.get("--speculative-algorithm") or ("",))[0].upper()
        if algorithm in MTP_ALGORITHMS and _mtp_layers(model_config or {}) > 0:
            return None
        if algorithm in NEEDS_DRAFT and not any(flag in config.flags() for flag in DRAFT_FLAGS):
            return (f"{algorithm} needs a draft model and none is given: a real launch would load the target "
                    "checkpoint as its draft and fail; add --speculative-draft-model-path (or --draft NAME)")
        return None

    def env(self, config: Config) -> dict[str, str]:
        """The environment of an evaluation: the target's, then the configuration's own (which wins)."""
        return {**dict(self.target.env), **config.env()}

    def argv(self, config: Config) -> list[str]:
        """What a worker receives for ``config``: ``VAR=value`` assignments, then SGLang's argv."""
        return [f"{name}={value}" for name, value in sorted(self.env(config).items())] + self.server_argv(config)

    def server_argv(self, config: Config) -> list[str]:
        """The argv SGLang receives for ``config`` (profiles substituted; no environment)."""
        draft_path = str(self.target.draft.path) if self.target.draft and self.target.draft.path else None
        out = ["--model-path", str(self.target.model.path), *self.target.model.extra_args]
        for token in config.flag_argv():
            if token == MODEL:
                out.append(str(self.target.model.path))
            elif token == DRAFT:
                if draft_path is None:
                    raise UsageError(f"draft '{self.target.draft.name if self.target.draft else 'none'}' has no draft "
                                     "model path; pick --draft eagle3/eagle/standalone or --draft-path DIR")
                out.append(draft_path)
            elif token == PATH_TOKEN:
                out.append(str(placeholder_file()))
            else:
                out.append(token)
        return out

    def outcome(self, config: Config, record: dict[str, Any]) -> Outcome:
        return Outcome.from_record(config, record, release=self.target.release,
                                   python=str(self.info.get("python", "?")), hardware=self.hardware_label)

    def evaluate(self, config: Config) -> Outcome:
        """Resolve one configuration."""
        return self.outcome(config, self.pool.evaluate(self.argv(config)))

    def evaluate_many(self, configs: Iterable[Config]) -> Generator[Outcome, None, None]:
        """Resolve many configurations in parallel; outcomes arrive in completion order. Close the generator
        to stop early: the connections it opened close with it."""
        pairs = ((config, self.argv(config)) for config in configs)
        for config, record in self.pool.imap_unordered(pairs):
            yield self.outcome(config, record)

    def source_of(self, file: str, function: str) -> dict[str, Any]:
        return self.pool.request({"op": "source", "file": file, "function": function})


def target_record(target: Target) -> dict[str, Any]:
    """Everything besides the flags that determines an outcome (the cache key's input)."""
    return {"release": target.release, "model": target.model.config,
            "model_args": list(target.model.extra_args),
            "draft": (json.loads((target.draft.path / "config.json").read_text())
                      if target.draft and target.draft.path else None),
            "draft_kind": target.draft.kind if target.draft else None,
            "hardware": target.hardware.record, "gpus": target.hardware.gpus,
            "env": dict(target.env)}

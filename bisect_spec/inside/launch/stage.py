"""What a stage of the launch path is (:class:`Stage`), what the stages share while a launch runs (:class:`Launch`),
and how far an evaluation got (:class:`Progress`); the two ways a stage ends that are not SGLang's verdict on the
flags' values (:data:`NotLoaded`) or are (:class:`WillNotStart`).

A stage is a record in the module of the SGLang component it mirrors (``memory_pool.MEMORY_POOL``). The list of
stages, in the order outcomes report them and with whether each runs after the weights load, is the data file
``bisect_spec/data/stages.json`` (:data:`STAGE_NAMES`), which the orchestrator reads too (``model/outcome.py``):
a stage's record must be listed there. :mod:`.order` says which stages a release runs, and in which order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from .siblings import model_classes

_T = TypeVar("_T")



def _stage_list() -> list[dict[str, Any]]:
    """``bisect_spec/data/stages.json``'s stages: ``name`` and ``after_weights``, in the order outcomes report them.
    Read by its path beside this package (``repro.py`` loads the package by its path too)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "data", "stages.json")
    with open(path, encoding="utf-8") as handle:
        return list(json.load(handle)["stages"])


_STAGE_LIST = _stage_list()
#: Every stage's name, in the order outcomes report them (the orchestrator's ``model.outcome.STAGE_ORDER``).
STAGE_NAMES: tuple[str, ...] = tuple(str(entry["name"]) for entry in _STAGE_LIST)
#: The stages a real launch runs only after the target's weights load.
_AFTER_WEIGHTS = frozenset(str(entry["name"]) for entry in _STAGE_LIST if entry["after_weights"])

#: The stage every evaluation begins in (``server_args.PARSE``).
FIRST_STAGE = STAGE_NAMES[0]

#: Every stage by name, as its module declared it (a stage declared twice, for two releases' ways of doing it,
#: says the same of itself both times).
_DECLARED: dict[str, Stage] = {}


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step of SGLang's launch path, as this emulation runs it.

    ``name``: what an outcome records (``stage``, ``stages_passed``); ``words``: the stage in the words a verdict
    uses ("PASSED up to ...", "FAILED in ..."); ``mirrors``: the SGLang function (and file) it mirrors;
    ``after_weights`` (from ``data/stages.json``): a real launch runs it only after the target's weights load (it
    runs up to the first device step: :func:`.order.run_after_resolution`); ``emulated``: its set-up (the runtime
    context, a bare object) is this emulation's, not SGLang's (:func:`.faults.tool_fault`).

    ``run(launch)`` runs it, and returns SGLang's refusal where the stage found one without raising it (the
    stages on the sized memory pool), else None. A stage that holds a *window* instead (``window(launch)``, a
    context manager: the memory pool, sized) runs the stages of ``on_it`` inside it, as the order lists them,
    where the window says so. ``run`` is None for the stages the evaluator runs itself (parsing, resolution).
    """

    name: str
    words: str
    mirrors: str
    run: Callable[[Launch], BaseException | None] | None = None
    window: Callable[[Launch], AbstractContextManager[bool]] | None = None
    on_it: tuple[Stage, ...] = ()
    emulated: bool = False

    def __post_init__(self) -> None:
        if self.name not in STAGE_NAMES:
            raise ValueError(f"stage {self.name} is not listed in bisect_spec/data/stages.json")
        known = _DECLARED.setdefault(self.name, self)
        if (known.words, known.emulated) != (self.words, self.emulated):
            raise ValueError(f"stage {self.name} declared twice, differently")

    @property
    def after_weights(self) -> bool:
        """A real launch runs this stage only after the target's weights load (``data/stages.json`` says)."""
        return self.name in _AFTER_WEIGHTS


def declared(name: str) -> Stage | None:
    """The stage called ``name``, or None."""
    return _DECLARED.get(name)


#: A read of what only a loaded server has (the target's memory pool, its model): ends a stage.
_NotLoaded = NotLoaded = model_classes.NotLoaded


class Progress:
    """How far along the launch path an evaluation got."""

    def __init__(self) -> None:
        self.stage = FIRST_STAGE
        self.passed: list[str] = []
        self.after_weights = False
        #: ids of the objects this emulation built by hand (a bare ``TokenizerManager``): an
        #: attribute one of them lacks is the emulation's fault, not SGLang's
        self.built: dict[int, str] = {}
        #: the attention backends SGLang chose to build (class names), once that stage ran
        self.attention_backends: list[str] | None = None
        #: the draft worker class SGLang chose, once that stage ran, and its draft runner's backends
        self.draft_worker: str | None = None
        self.draft_attention_backends: list[str] | None = None
        #: stages after the weights that met a device call only a GPU answers, and the call
        #: (the stage's checks up to it passed; those after it did not run)
        self.needs_gpu: dict[str, str] = {}
        #: the model classes SGLang's registry serves (``{"target": ..., "draft": ...}``), once resolved
        self.model_classes: dict[str, str] = {}
        #: the roles whose class was read from its source (its module does not import on this machine)
        self.classes_from_source: list[str] = []
        #: the target's memory pool as SGLang sized it (``memory_pool`` stage): bytes, tokens, requests
        self.memory_pool: dict[str, Any] | None = None
        #: the batch sizes the target's CUDA graphs would be captured for (``cuda_graph_sizes``), or disabled
        self.cuda_graphs: dict[str, Any] | None = None
        #: objects a later stage takes from an earlier one (the draft's model config, the worker class);
        #: not recorded
        self.held: dict[str, Any] = {}

    def enter(self, stage: str) -> None:
        if self.stage != stage:
            self.passed.append(self.stage)
        self.stage = stage
        known = declared(stage)
        self.after_weights = known is not None and known.after_weights

    def back_to(self, stage: str) -> None:
        """The failure belongs to an earlier stage than the one entered (argparse inside ``resolve``)."""
        while self.passed and self.passed[-1] == stage:
            self.passed.pop()
        self.stage = stage

    def to_record(self, *, passed: bool = False) -> dict[str, Any]:
        """The record's fields; ``passed``: the evaluation passed, so ``reached`` says the last stage that ran
        to its end (where the last one entered stopped early at a device step: the one before it, and that)."""
        reached = _words(self.stage)
        whole = [stage for stage in self.passed if stage not in self.needs_gpu]
        if passed and self.stage in self.needs_gpu and whole:
            reached = f"{_words(whole[-1])} (then {self.stage}, stopped early)"
        record: dict[str, Any] = {"stage": self.stage, "reached": reached, "stages_passed": list(self.passed)}
        if self.after_weights:
            record["after_weights"] = True
        if self.attention_backends is not None:
            record["attention_backends"] = list(self.attention_backends)
        if self.draft_worker is not None:
            record["draft_worker"] = self.draft_worker
        if self.draft_attention_backends is not None:
            record["draft_attention_backends"] = list(self.draft_attention_backends)
        if self.needs_gpu:
            record["needs_gpu"] = dict(self.needs_gpu)
        if self.model_classes:
            record["model_classes"] = dict(self.model_classes)
        if self.classes_from_source:
            record["model_classes_from_source"] = list(self.classes_from_source)
        if self.memory_pool is not None:
            record["memory_pool"] = dict(self.memory_pool)
        if self.cuda_graphs is not None:
            record["cuda_graphs"] = dict(self.cuda_graphs)
        return record

@dataclasses.dataclass
class Launch:
    """What the stages of one launch share: the server arguments and the progress, the release's model-config
    class, and what earlier stages built (the runtime context's ``publish``, the target's model config, the
    runner; the refusals the memory pool's window gathers). ``keep`` enters a context that stays until the launch
    path ends (the process state put back, the parallel groups stood in for), as SGLang's state stays set."""

    args: Any
    progress: Progress
    kept: contextlib.ExitStack[bool | None] = dataclasses.field(default_factory=contextlib.ExitStack)
    model_config_cls: Any = None
    from_server_args: Any = None
    publish: Callable[..., None] | None = None
    target: Any = None
    runner: Any = None
    refusals: list[BaseException] = dataclasses.field(default_factory=list)

    def keep(self, manager: AbstractContextManager[_T]) -> _T:
        return self.kept.enter_context(manager)


def _words(name: str) -> str:
    known = declared(name)
    return known.words if known is not None else name


class WillNotStart(Exception):
    """The configuration cannot start on the box, by what SGLang itself built on ``meta``: its weights outgrow a
    GPU's memory (``cause="weights"``), or its parallel layout needs more GPUs than the box has
    (``cause="gpus"``). A verdict of its own ("will not start"), never one of SGLang's checks: a real launch
    ends in torch's ``CUDA out of memory`` or an invalid device ordinal, after minutes of loading.

    ``needed``/``available``: bytes per GPU (weights) or GPUs (gpus)."""

    def __init__(self, cause: str, words: str, *, needed: float, available: float, **figures: Any) -> None:
        super().__init__(words)
        self.cause = cause
        self.words = words
        self.figures = {"cause": cause, "needed": needed, "available": available, **figures}

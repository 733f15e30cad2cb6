"""The launch path's record of how far an evaluation got (:class:`Progress`), and the two ways a stage ends
that are not SGLang's verdict on the flags' values (:data:`NotLoaded`) or are (:class:`WillNotStart`).
"""

from __future__ import annotations

from typing import Any

from .siblings import model_classes

#: Stages in launch order. A failure records the stage it failed in; a PASSED outcome the last
#: stage it ran (``STAGE_WORDS`` says it in words: "PASSED up to attention-backend selection").
STAGES = ("parse", "resolve", "check_server_args", "auto_parsers", "tokenizer_manager", "target_model_config",
          "draft_model_config", "model_runner", "memory_pool", "cuda_graph_sizes", "target_worker", "target_model",
          "attention_backend", "draft_worker_model_config", "draft_worker", "draft_model")



#: Stages that a real launch runs only after the target's weights are loaded.
AFTER_WEIGHTS = frozenset({"memory_pool", "cuda_graph_sizes", "target_worker", "target_model", "attention_backend",
                           "draft_worker_model_config", "draft_worker", "draft_model"})



#: Each stage in the words a verdict uses ("PASSED up to ...", "FAILED in ...").
STAGE_WORDS = {"parse": "argument parsing", "resolve": "argument resolution",
               "check_server_args": "check_server_args", "auto_parsers": "parser detection",
               "tokenizer_manager": "the tokenizer manager's model config",
               "target_model_config": "the target's model config", "draft_model_config": "the draft's model config",
               "model_runner": "the model runner, before the weights load",
               "memory_pool": "the target's memory pool, sized against the simulated box's memory",
               "cuda_graph_sizes": "the batch sizes of the target's CUDA graphs, chosen against its request pool",
               "target_worker": "the target worker's checks on its built runner",
               "target_model": "the target model's class and the speculative calls on it, after the weights load",
               "attention_backend": "attention-backend selection, after the weights load",
               "draft_worker_model_config": "the draft worker's model config, after the weights load",
               "draft_worker": "the draft worker's construction, after the weights load",
               "draft_model": "the draft model's class and the embedding/head it shares, after the weights load"}



class Progress:
    """How far along the launch path an evaluation got."""

    def __init__(self) -> None:
        self.stage = STAGES[0]
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
        self.after_weights = stage in AFTER_WEIGHTS

    def back_to(self, stage: str) -> None:
        """The failure belongs to an earlier stage than the one entered (argparse inside ``resolve``)."""
        while self.passed and self.passed[-1] == stage:
            self.passed.pop()
        self.stage = stage

    def to_record(self, *, passed: bool = False) -> dict[str, Any]:
        """The record's fields; ``passed``: the evaluation passed, so ``reached`` says the last stage that ran
        to its end (where the last one entered stopped early at a device step: the one before it, and that)."""
        reached = STAGE_WORDS.get(self.stage, self.stage)
        whole = [stage for stage in self.passed if stage not in self.needs_gpu]
        if passed and self.stage in self.needs_gpu and whole:
            reached = f"{STAGE_WORDS.get(whole[-1], whole[-1])} (then {self.stage}, stopped early)"
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



#: A read of what only a loaded server has (the target's memory pool, its model): ends a stage.
_NotLoaded = NotLoaded = model_classes.NotLoaded



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

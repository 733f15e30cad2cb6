"""The launch order: which stages a release runs, and in which order. The only place release families switch;
how a stage does its work on a release is found by feature in its own module.

:data:`STAGES` is the order outcomes are reported in: the launch order of the releases up to 0.5.13, listed in
``bisect_spec/data/stages.json`` with whether each stage runs after the weights (the orchestrator's
``model/outcome.py`` reads the same file).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from .attention import ATTENTION_BACKEND
from .cuda_graphs import CUDA_GRAPH_SIZES, DECODE_GRAPH_SIZES
from .device_stops import (
    _device_step,
    _import_retried_first,
    _kernel_choices_declined,
    _meta_value,
    _set_in_a_later_step,
    _unregistered_here,
    _unwritten_context,
)
from .draft_model import DRAFT_MODEL
from .draft_worker import DRAFT_WORKER, DRAFT_WORKER_MODEL_CONFIG
from .memory_pool import MEMORY_POOL
from .model_config import DRAFT_MODEL_CONFIG, TARGET_MODEL_CONFIG
from .model_registry import _registry_importing
from .model_runner import MODEL_RUNNER
from .runner_checks import RUNNER_CHECKS
from .scheduler import AUTO_PARSERS, TOKENIZER_MANAGER
from .server_args import CHECK_SERVER_ARGS
from .sglang_lookup import _attribute
from .siblings import meta_device, model_classes
from .stage import STAGE_NAMES, Launch, Progress, Stage, WillNotStart, _NotLoaded, declared
from .target_model import TARGET_MODEL
from .target_worker import TARGET_WORKER


def _every_stage() -> tuple[Stage, ...]:
    """The records of the stages ``data/stages.json`` lists, in its order (every component module is imported
    above, so each has declared its stages; a stage declared nowhere is refused here, one not listed by
    :class:`Stage` itself)."""
    missing = [name for name in STAGE_NAMES if declared(name) is None]
    if missing:
        raise ValueError(f"bisect_spec/data/stages.json lists stages no module declares: {', '.join(missing)}")
    return tuple(stage for name in STAGE_NAMES if (stage := declared(name)) is not None)


#: Every stage, in the order outcomes report them. A failure records the stage it failed in; a PASSED outcome
#: the last stage it ran (``STAGE_WORDS`` says it in words: "PASSED up to attention-backend selection").
ALL_STAGES: tuple[Stage, ...] = _every_stage()
STAGES = STAGE_NAMES
#: Stages that a real launch runs only after the target's weights are loaded.
AFTER_WEIGHTS = frozenset(stage.name for stage in ALL_STAGES if stage.after_weights)
#: Each stage in the words a verdict uses ("PASSED up to ...", "FAILED in ...").
STAGE_WORDS = {stage.name: stage.words for stage in ALL_STAGES}


def launch_order(launch: Launch) -> Iterator[Stage]:
    """The stages after resolution this release runs, in its launch order. A generator: what decides the order
    is read as the launch reaches it (the runner's class, once the runner stage built it).

    Up to 0.5.13 the runner sizes its pool right after its load, then builds its backends; the draft is built
    afterwards. 0.5.14+'s scheduler builds the target, then the draft worker, then sizes every pool, then builds
    the target's and the draft's backends: there the pool runs after the draft (a draft that fails is what a
    launch meets first). The target's backends keep their place before the draft worker, whose stage also
    chooses the draft's backends, as a launch chooses the target's first; a configuration that fails both the
    pool and a backend choice is shown the backend's refusal, where a 0.5.14+ launch meets the pool's first.
    On the sized pool, a launch next chooses the CUDA graphs' batch sizes, runs the runner's own checks after its
    load and the target worker's checks (0.5.14+: the runner's checks, the worker's, then the decode graphs' sizes).
    """
    if getattr(launch.args, "check_server_args", None) is not None:
        yield CHECK_SERVER_ARGS
    yield AUTO_PARSERS
    launch.model_config_cls = _attribute(("sglang.srt.configs.model_config",), "ModelConfig")
    launch.from_server_args = getattr(launch.model_config_cls, "from_server_args", None)
    yield TOKENIZER_MANAGER
    if launch.model_config_cls is None:
        return
    yield TARGET_MODEL_CONFIG
    if launch.from_server_args is not None:
        yield DRAFT_MODEL_CONFIG
    yield MODEL_RUNNER
    runner_cls = type(launch.runner).__mro__[1] if launch.runner is not None else None
    apart = runner_cls is not None and model_classes.pools_sized_apart(runner_cls)
    pool = dataclasses.replace(MEMORY_POOL, on_it=(RUNNER_CHECKS, TARGET_WORKER, DECODE_GRAPH_SIZES) if apart
                               else (CUDA_GRAPH_SIZES, RUNNER_CHECKS, TARGET_WORKER))
    if runner_cls is not None:
        stages = [TARGET_MODEL, ATTENTION_BACKEND]
        statements = model_classes.aux_capture_statements(runner_cls)
        if statements is not None and model_classes.after_attention_backends(statements, runner_cls):
            stages.reverse()  # the release's own order: the first failure is the one a launch meets
        if not apart:
            stages.insert(0, pool)
        yield from stages
    if launch.from_server_args is not None:
        yield DRAFT_WORKER_MODEL_CONFIG
    if runner_cls is not None:
        yield DRAFT_WORKER
        yield DRAFT_MODEL
        if apart:
            yield pool


def run_after_resolution(args: Any, progress: Progress) -> None:
    """Run the launch path's checks after resolution on ``args``; raise what SGLang raises.

    When a stage after the weights reaches a device call that only a GPU can answer, that stage ends
    there (``progress.needs_gpu`` names the call: its checks before the call passed) and the next runs.
    What a stage keeps for the stages after it (``Launch.keep``) is put back when the last one ends.
    """
    launch = Launch(args, progress)
    with launch.kept:
        for stage in launch_order(launch):
            if stage.after_weights:
                _up_to_the_device(progress, stage, launch)
            else:
                _run(stage, launch)


def _run(stage: Stage, launch: Launch) -> None:
    """``stage``, and where it holds a window (the sized pool), the stages on it, in the order's order; a refusal a
    stage returns is raised inside the window, as SGLang raises it there."""
    if stage.window is not None:
        with stage.window(launch) as open_:
            for inner in stage.on_it if open_ else ():
                _run(inner, launch)
        return
    assert stage.run is not None, f"stage {stage.name} is run by the evaluator"
    refusal = stage.run(launch)
    if refusal is not None:
        raise refusal


def _up_to_the_device(progress: Progress, stage: Stage, launch: Launch) -> None:
    """Run a stage after the weights; a device call only a GPU answers ends it, and is recorded, as is
    a read of what only a loaded server has (:class:`_NotLoaded`)."""
    _registry_importing()
    try:
        with meta_device.cuda_on_meta(), _kernel_choices_declined():
            _run(stage, launch)
    except _NotLoaded as stop:
        progress.needs_gpu[progress.stage] = str(stop)
    except WillNotStart:
        raise
    except Exception as exc:
        where = (_device_step(exc) or _meta_value(exc) or _unwritten_context(exc)
                 or _set_in_a_later_step(exc, progress) or _unregistered_here(exc)) if progress.after_weights else None
        if where is None or _import_retried_first(exc):
            raise
        progress.needs_gpu[progress.stage] = where


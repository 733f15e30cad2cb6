"""The launch order: which stages run, in which order, and what surrounds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .attention import _attention_backend
from .device_stops import (
    _device_step,
    _import_retried_first,
    _kernel_choices_declined,
    _meta_value,
    _set_in_a_later_step,
    _unregistered_here,
    _unwritten_context,
)
from .draft_model import _draft_model
from .draft_worker import _draft_worker, _draft_worker_config
from .memory_pool import _memory_pool
from .model_config import _draft_model_config, _explicit_model_config
from .model_registry import _registry_importing
from .model_runner import _model_runner
from .parallel_groups import _dp_attention_initialized, _groups_built
from .process_state import _architectures_kept, _runner_globals_kept, _runtime_context
from .scheduler import _auto_parsers, _moe_config_initialized, _publish_scheduler, _tokenizer_manager
from .server_args import _gpus_checked
from .sglang_lookup import _attribute
from .siblings import meta_device, model_classes
from .stage import Progress, WillNotStart, _NotLoaded
from .target_model import _target_model


def run_after_resolution(args: Any, progress: Progress) -> None:
    """Run the launch path's checks after resolution on ``args``; raise what SGLang raises.

    When a stage after the weights reaches a device call that only a GPU can answer, that stage ends
    there (``progress.needs_gpu`` names the call: its checks before the call passed) and the next runs.
    """
    check = getattr(args, "check_server_args", None)
    if check is not None:
        progress.enter("check_server_args")
        check()
    _auto_parsers(args, progress)
    model_config_cls = _attribute(("sglang.srt.configs.model_config",), "ModelConfig")
    from_server_args = getattr(model_config_cls, "from_server_args", None)
    with _runtime_context() as publish, _runner_globals_kept():
        _tokenizer_manager(args, publish, progress)
        if publish is not None:
            _publish_scheduler(publish, args)
        if model_config_cls is None:
            return
        progress.enter("target_model_config")
        # 0.4.6 has no from_server_args: the scheduler's ModelConfig(...) with explicit arguments
        target = (from_server_args(args) if from_server_args is not None
                  else _explicit_model_config(model_config_cls, args))
        with _architectures_kept(target, progress):
            _after_the_target_config(args, target, model_config_cls, from_server_args, progress)



def _after_the_target_config(args: Any, target: Any, model_config_cls: Any, from_server_args: Any,
                             progress: Progress) -> None:
    if from_server_args is not None:
        _draft_model_config(args, target, progress)
    with _moe_config_initialized(args):
        runner = _model_runner(args, target, progress)
        _gpus_checked(args)  # the device step sets each rank's GPU next
        with _groups_built(args), _dp_attention_initialized(args, target):
            _after_the_device_step(args, target, runner, model_config_cls, from_server_args, progress)



def _after_the_device_step(args: Any, target: Any, runner: Any, model_config_cls: Any, from_server_args: Any,
                           progress: Progress) -> None:
    # Up to 0.5.13 the runner sizes its pool right after its load, then builds its backends; the draft is built
    # afterwards. 0.5.14+'s scheduler builds the target, then the draft worker, then sizes every pool, then builds
    # the target's and the draft's backends: there the pool runs after the draft (a draft that fails is what a
    # launch meets first). The target's backends keep their place before the draft worker, whose stage also
    # chooses the draft's backends, as a launch chooses the target's first; a configuration that fails both the
    # pool and a backend choice is shown the backend's refusal, where a 0.5.14+ launch meets the pool's first.
    apart = runner is not None and model_classes.pools_sized_apart(type(runner).__mro__[1])
    if runner is not None:
        stages: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
            (_target_model, (args, runner, progress)), (_attention_backend, (runner, progress))]
        statements = model_classes.aux_capture_statements(type(runner).__mro__[1])
        if statements is not None and model_classes.after_attention_backends(statements, type(runner).__mro__[1]):
            stages.reverse()  # the release's own order: the first failure is the one a launch meets
        if not apart:
            stages.insert(0, (_memory_pool, (args, target, runner, progress)))
        for stage, stage_args in stages:
            _up_to_the_device(progress, stage, *stage_args)
    if from_server_args is not None:
        _up_to_the_device(progress, _draft_worker_config, args, target, model_config_cls, progress)
    if runner is not None:
        _up_to_the_device(progress, _draft_worker, args, target, runner, progress)
        _up_to_the_device(progress, _draft_model, args, target, progress)
        if apart:
            _up_to_the_device(progress, _memory_pool, args, target, runner, progress)



def _up_to_the_device(progress: Progress, stage: Callable[..., None], *args: Any) -> None:
    """Run a stage after the weights; a device call only a GPU answers ends it, and is recorded, as is
    a read of what only a loaded server has (:class:`_NotLoaded`)."""
    _registry_importing()
    try:
        with meta_device.cuda_on_meta(), _kernel_choices_declined():
            stage(*args)
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

"""What the launcher and the scheduler run before the model runner (mirrors ``managers/``):
``resolve_auto_parsers``, the tokenizer manager's model config, ``publish(role="scheduler")``,
``initialize_moe_config``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .process_state import _runner_globals_kept, _runtime_context
from .sglang_lookup import _accepted, _attribute, _call, _view
from .stage import Launch, Progress, Stage


def _publish_scheduler(publish: Callable[..., None], args: Any) -> None:
    """``publish(role="scheduler")`` as ``run_scheduler_process`` does for TP rank 0."""
    spawn_ranks = _attribute(("sglang.srt.runtime_context",), "SpawnRanks")
    world_rank = _attribute(("sglang.srt.runtime_context",), "spawn_world_rank")
    kwargs: dict[str, Any] = {"role": "scheduler"}
    if spawn_ranks is not None:
        rank = world_rank(args, tp_rank=0, pp_rank=0) if world_rank is not None else 0
        kwargs["ranks"] = _call(spawn_ranks, world_rank=rank, dp_rank=None,
                                gpu_id=getattr(_view(args), "base_gpu_id", 0))
    _call(publish, args, **kwargs)


@contextlib.contextmanager
def _moe_config_initialized(args: Any) -> Iterator[None]:
    """SGLang's own ``initialize_moe_config(server_args)``, as the scheduler runs it before it builds its worker
    (0.5.3 … 0.5.18): the MoE all-to-all and runner backends, DeepEP's mode, two-batch overlap, as module globals
    of ``layers/moe/utils`` that building a MoE model and the CUDA graphs' batch sizes read
    (``require_gathered_buffer``: ``--moe-a2a-backend deepep`` gathers the attention-TP group's tokens). Without
    it they read the defaults (no all-to-all backend). The module's globals are put back afterwards. 0.5.19+ take
    no arguments and read the runtime context: there it is not run, as before."""
    initialize = _attribute(("sglang.srt.layers.moe.utils", "sglang.srt.layers.moe"), "initialize_moe_config")
    module = sys.modules.get(getattr(initialize, "__module__", "") or "")
    if initialize is None or module is None or "server_args" not in (_accepted(initialize) or set()):
        yield
        return
    saved = dict(vars(module))
    try:
        with contextlib.suppress(Exception):
            initialize(args)
        yield
    finally:
        for name in set(vars(module)) - set(saved):
            delattr(module, name)
        for name, value in saved.items():
            if vars(module).get(name, saved) is not value:
                setattr(module, name, value)


def _tokenizer_manager(args: Any, publish: Callable[..., None] | None, progress: Progress) -> None:
    """The launcher's ``TokenizerManager.init_model_config``, on an instance with nothing else built."""
    manager = _attribute(("sglang.srt.managers.tokenizer_manager",), "TokenizerManager")
    init_model_config = getattr(manager, "init_model_config", None)
    if init_model_config is None:
        return
    if publish is not None:
        _call(publish, args, role="tokenizer")
    progress.enter(TOKENIZER_MANAGER.name)
    bare = manager.__new__(manager)
    bare.server_args = args
    progress.built[id(bare)] = "a TokenizerManager built with server_args alone"
    init_model_config(bare)


def _auto_parsers(args: Any, progress: Progress) -> None:
    resolve = _attribute(("sglang.srt.parser.template_detection", "sglang.srt.managers.template_detection"),
                         "resolve_auto_parsers")
    if resolve is None:
        return
    view = _view(args)
    unconditional = "_architecture_parser_defaults" in getattr(resolve, "__globals__", {})
    if unconditional or "auto" in (getattr(view, "reasoning_parser", None), getattr(view, "tool_call_parser", None)):
        progress.enter(AUTO_PARSERS.name)
        resolve(args)


def _run_tokenizer_manager(launch: Launch) -> None:
    """The launcher's tokenizer manager, inside the runtime context (put back when the launch path ends); then the
    scheduler process's ``publish(role="scheduler")``."""
    publish = launch.publish = launch.keep(_runtime_context())
    launch.keep(_runner_globals_kept())
    _tokenizer_manager(launch.args, publish, launch.progress)
    if publish is not None:
        _publish_scheduler(publish, launch.args)


AUTO_PARSERS = Stage("auto_parsers", "parser detection", "resolve_auto_parsers (0.5.12+, entrypoints/engine.py)",
                     run=lambda launch: _auto_parsers(launch.args, launch.progress))
TOKENIZER_MANAGER = Stage("tokenizer_manager", "the tokenizer manager's model config",
                          "TokenizerManager.init_model_config (managers/tokenizer_manager.py), on a bare instance",
                          run=_run_tokenizer_manager, emulated=True)

"""The model configs the scheduler and the target runner build (mirrors ``configs/model_config.py``):
the target's (``target_model_config``) and the draft's pre-device one (``draft_model_config``).
"""

from __future__ import annotations

from typing import Any

from .process_state import _architectures_kept
from .sglang_lookup import _attribute, _call, _view
from .stage import Launch, Progress, Stage


def _explicit_model_config(model_config_cls: Any, args: Any) -> Any:
    """The target's ``ModelConfig`` as releases without ``from_server_args`` build it (0.4.6
    ``scheduler.py`` and ``tp_worker.py``: the path, then the server arguments by name)."""
    view = _view(args)
    return _call(model_config_cls, view.model_path, trust_remote_code=view.trust_remote_code,
                 revision=getattr(view, "revision", None), context_length=view.context_length,
                 model_override_args=getattr(view, "json_model_override_args", "{}"),
                 is_embedding=getattr(view, "is_embedding", False),
                 enable_multimodal=getattr(view, "enable_multimodal", None), dtype=view.dtype,
                 quantization=view.quantization)


def _draft_model_config(args: Any, target: Any, progress: Progress) -> None:
    """The target ModelRunner's speculative pre-device step, where the release has it as a free function."""
    algorithm = getattr(_view(args), "speculative_algorithm", None)
    resolve_aux = _attribute(("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state",),
                             "resolve_spec_aux_hidden_state_config")
    speculative_algorithm = _attribute(("sglang.srt.speculative.spec_info",), "SpeculativeAlgorithm")
    if not algorithm or resolve_aux is None or speculative_algorithm is None:
        return
    progress.enter(DRAFT_MODEL_CONFIG.name)
    _call(resolve_aux, server_args=args, model_config=target,
          spec_algorithm=speculative_algorithm.from_string(algorithm), is_draft_worker=False)


def _target_model_config(launch: Launch) -> None:
    """The scheduler's ``ModelConfig.from_server_args(server_args)``; the target's architectures are held for
    the model-class stages and put back when the launch path ends."""
    launch.progress.enter(TARGET_MODEL_CONFIG.name)
    # 0.4.6 has no from_server_args: the scheduler's ModelConfig(...) with explicit arguments
    target = launch.target = (launch.from_server_args(launch.args) if launch.from_server_args is not None
                              else _explicit_model_config(launch.model_config_cls, launch.args))
    launch.keep(_architectures_kept(target, launch.progress))


TARGET_MODEL_CONFIG = Stage("target_model_config", "the target's model config",
                            "the scheduler's ModelConfig.from_server_args (configs/model_config.py)",
                            run=_target_model_config, emulated=True)
DRAFT_MODEL_CONFIG = Stage("draft_model_config", "the draft's model config",
                           "resolve_spec_aux_hidden_state_config, the target runner's pre-device step (model_runner.py)",
                           run=lambda launch: _draft_model_config(launch.args, launch.target, launch.progress),
                           emulated=True)

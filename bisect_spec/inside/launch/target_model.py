"""The target model's class as SGLang's registry serves it, and the runner's speculative calls on it
(``target_model`` stage; mirrors ``model_runner``'s ``set_eagle3_layers_to_capture``).
"""

from __future__ import annotations

from typing import Any

from .sglang_lookup import _view
from .siblings import model_classes
from .stage import Progress, Stage
from .standins import _BuiltRunner


def _architectures(model_config: Any) -> list[str]:
    return list(getattr(getattr(model_config, "hf_config", None), "architectures", None) or [])


def _target_architectures(progress: Progress, target: Any) -> list[str]:
    """The target's architectures as its ModelConfig read them (:func:`_architectures_kept`)."""
    held: list[str] = progress.held.get("target_architectures") or []
    return held or _architectures(target)


def _target_model(args: Any, runner: Any, progress: Progress) -> None:
    """The target's model class, as SGLang's registry serves it, and the runner's own call that asks it to
    capture auxiliary hidden states (EAGLE3, DFLASH: ``set_eagle3_layers_to_capture``), run on a stand-in of
    the built model (:mod:`model_classes`). Speculative configurations only."""
    if not getattr(_view(args), "speculative_algorithm", None):
        return
    progress.enter(TARGET_MODEL.name)
    architectures = _target_architectures(progress, runner.model_config)
    cls = model_classes.model_class(architectures)
    if cls is None:
        progress.needs_gpu[TARGET_MODEL.name] = ("no module of sglang.srt.models defines "
                                              f"{', '.join(architectures) or 'the architecture'}")
        return
    progress.model_classes["target"] = cls.__name__
    _note_source(progress, "target", cls)
    runner_cls: Any = type(runner).__mro__[1]
    statements = model_classes.aux_capture_statements(runner_cls)
    if statements is None:
        return
    if not hasattr(runner, "spec_aux_config") and callable(getattr(runner_cls, "init_spec_aux_hidden_state", None)):
        runner.init_spec_aux_hidden_state()  # SGLang's own method; 0.5.18+ run it in initialize()
    runner.model = model_classes.stand_in(cls, getattr(runner.model_config, "hf_config", None))
    try:
        model_classes.run(statements, self=_BuiltRunner(runner), server_args=runner.server_args)
    finally:
        del runner.model


def _note_source(progress: Progress, role: str, cls: type) -> None:
    """Record a class read from its source (its module does not import on this machine)."""
    if model_classes.FROM_SOURCE in vars(cls) and role not in progress.classes_from_source:
        progress.classes_from_source.append(role)


TARGET_MODEL = Stage("target_model",
                     "the target model's class and the speculative calls on it, after the weights load",
                     "the registry's model class and set_eagle3_layers_to_capture (model_runner.py, models/)",
                     run=lambda launch: _target_model(launch.args, launch.runner, launch.progress),
                     emulated=True)

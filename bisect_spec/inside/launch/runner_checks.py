"""The target runner's own checks once its weights are loaded (``runner_checks`` stage; mirrors
``ModelRunner.__init__`` after its ``initialize()``, ``model_executor/model_runner.py``).

``ModelRunner.__init__`` goes on after ``initialize()`` with checks that read only the configuration and the built
model's class: ``check_quantized_moe_compatibility()`` (0.5.9+: the MoE's intermediate size against the tp and ep
widths and the quantisation's weight block: "moe_intermediate_size ... must be divisible by ...") and, with
``--pp-size`` > 1, "Pipeline Parallel is not compatible with this model" where the model's ``forward`` takes no
``pp_proxy_tensors``. The launch path used to stop ``__init__`` at its device step and never reach them
(``scripts/stage_cuts.py`` lists what each cut leaves unrun); they run here on the built model, inside the sized
pool's window: up to 0.5.13 after the CUDA graphs' sizes (``initialize()`` chose them), from 0.5.14 first in the
window (the runner checks right after its load, before the draft is built; the order here runs them after the draft
stages, so a configuration that fails both shows the draft's refusal where a launch meets this one first).
"""

from __future__ import annotations

import contextlib
from typing import Any

from .faults import _refused_in, sglang_verdict
from .siblings import model_classes
from .stage import Launch, Progress, Stage, _NotLoaded


def _statements(runner: Any) -> model_classes.Statements | None:
    """The checks to run on ``runner`` (:func:`model_classes.checks_after_initialize`), or None where it holds no
    built model or its release has none."""
    if runner is None or vars(runner).get("model") is None:
        return None
    return model_classes.checks_after_initialize(type(runner).__mro__[1])


def _refusal(statements: model_classes.Statements, runner: Any) -> BaseException | None:
    """SGLang's ``statements`` on ``runner``, which holds the built model: their refusal (SGLang's verdict), or None
    where they pass. What else they raise (a device step) is raised."""
    try:
        model_classes.run(statements, self=runner)
    except (AssertionError, ValueError, NotImplementedError) as exc:
        if not (_refused_in(exc, statements.filename) or sglang_verdict(exc)):
            raise
        return exc
    return None


def _runner_checks(launch: Launch) -> BaseException | None:
    """The stage, on the sized pool: the refusal is returned (and listed in ``launch.refusals``)."""
    statements = _statements(launch.runner)
    if statements is None:
        return None
    launch.progress.enter(RUNNER_CHECKS.name)
    refusal = _refusal(statements, launch.runner)
    if refusal is not None:
        launch.refusals.append(refusal)
    return refusal


def on_a_stopped_pool(runner: Any, progress: Progress, refusals: list[BaseException]) -> None:
    """Where the pool stopped after the load at what only a device answers (the sizing's collective over the
    pipeline ranks, ``--pp-size`` > 1; a post-load processing not run), a GPU goes on to these checks: their
    refusal is SGLang's verdict and is raised here, in this stage (a pass says nothing: the stop stands)."""
    statements = _statements(runner)
    refusal = None
    with contextlib.suppress(Exception, _NotLoaded):  # a check that stops here too leaves the pool's stop standing
        refusal = _refusal(statements, runner) if statements is not None else None
    if refusal is not None:
        progress.enter(RUNNER_CHECKS.name)
        refusals.append(refusal)
        raise refusal


RUNNER_CHECKS = Stage("runner_checks", "the model runner's own checks after its load (quantised MoE, pipeline support)",
                      "ModelRunner.__init__ after initialize(): check_quantized_moe_compatibility and the "
                      "pipeline-parallel assert (model_executor/model_runner.py)",
                      run=_runner_checks, emulated=False)

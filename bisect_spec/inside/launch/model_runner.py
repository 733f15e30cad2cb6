"""The target ``ModelRunner`` up to its first device step (``model_runner`` stage; mirrors
``model_executor/model_runner.py``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import textwrap
from typing import Any

from .parallel_groups import _dp_attention_initialized, _groups_built, _parallel_state
from .scheduler import _moe_config_initialized
from .server_args import _gpus_checked
from .sglang_lookup import _call, _imported, _view
from .stage import Launch, Progress, Stage
from .standins import _DeviceReached


def _model_runner(args: Any, target: Any, progress: Progress) -> Any:
    """The target ``ModelRunner``, built by SGLang's own ``__init__`` up to its first device step
    (``init_torch_distributed``), on the scheduler's own arguments (the runner adjusts them in place, as
    in a real launch, where the draft worker then sees the adjusted ones; the resolved values an outcome
    reports were read before, and stay SGLang's resolution; 0.5.23's runner refuses any other object
    than the one published for the scheduler). ``model_specific_adjustment()`` runs on the way: up to
    0.5.6 it refuses an explicit attention backend an MLA model cannot use ("Invalid attention backend
    for MLA"), and a dual-chunk model's other backends. None where the release has no such runner.
    """
    # imported, not looked up: an ImportError (a CUDA-only dependency) must reach the evaluator, which
    # imports the module on the CPU and evaluates again, as for every lazy import of SGLang's
    module = _imported("sglang.srt.model_executor.model_runner")
    if module is None:
        return None
    runner_cls = getattr(module, "ModelRunner", None)
    if runner_cls is None or not callable(getattr(runner_cls, "init_torch_distributed", None)):
        return None
    progress.enter(MODEL_RUNNER.name)
    view = _view(args)

    def stop(runner: Any, *_args: Any, **_kwargs: Any) -> None:
        raise _DeviceReached

    stopping: Any = type("ModelRunner", (runner_cls,), {"init_torch_distributed": stop})
    runner = stopping.__new__(stopping)
    progress.built[id(runner)] = "a ModelRunner built up to its first device step"
    try:
        _call(functools.partial(runner_cls.__init__, runner), model_config=target, ps=_parallel_state(view),
              mem_fraction_static=getattr(view, "mem_fraction_static", None) or 0.8,
              gpu_id=getattr(view, "base_gpu_id", 0) or 0, tp_rank=0, tp_size=getattr(view, "tp_size", 1),
              pp_rank=0, pp_size=getattr(view, "pp_size", 1), moe_ep_rank=0, moe_ep_size=getattr(view, "ep_size", 1),
              dp_rank=None, nccl_port=0, server_args=args, is_draft_worker=False,
              req_to_token_pool=None, token_to_kv_pool_allocator=None)
    except _DeviceReached:
        _set_plain_attributes_after_device(runner, runner_cls)
        return runner
    raise RuntimeError("ModelRunner.__init__ returned without calling init_torch_distributed()")


@functools.cache
def _plain_assignments_after_device(runner_cls: type) -> tuple[tuple[str, Any], ...]:
    """``self.x = <constant or module name>`` statements of ``__init__`` after its device step: what a real
    ``__init__`` still sets without the device before ``initialize()`` (0.5.13's ``_linear_attn_registry_cache
    = _UNSET``, which the backend choice reads), as (attribute, compiled value), read once per class."""
    import ast

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(runner_cls.__init__)))  # type: ignore[misc]
    except (OSError, TypeError, SyntaxError):
        return ()
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    found: list[tuple[str, Any]] = []
    after = False
    for statement in body:
        if not after:
            after = any(isinstance(n, ast.Attribute) and n.attr == "init_torch_distributed" for n in ast.walk(statement))
            continue
        target = statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else (
            statement.target if isinstance(statement, ast.AnnAssign) else None)
        value = getattr(statement, "value", None)
        if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
                and isinstance(value, (ast.Constant, ast.Name))):
            found.append((target.attr, compile(ast.Expression(value), "<runner>", "eval")))
    return tuple(found)


def _set_plain_attributes_after_device(runner: Any, runner_cls: type) -> None:
    namespace = vars(sys.modules[runner_cls.__module__])
    for name, code in _plain_assignments_after_device(runner_cls):
        if name not in vars(runner):
            with contextlib.suppress(Exception):
                setattr(runner, name, eval(code, namespace))  # SGLang's own constant or module name


def _run_model_runner(launch: Launch) -> None:
    """The scheduler's ``initialize_moe_config``, then the runner up to its device step; then what the device
    step would have built, for the stages after it: each rank's GPU checked, the parallel groups stood in for
    (kept until the launch path ends)."""
    launch.keep(_moe_config_initialized(launch.args))
    launch.runner = _model_runner(launch.args, launch.target, launch.progress)
    _gpus_checked(launch.args)  # the device step sets each rank's GPU next
    launch.keep(_groups_built(launch.args))
    launch.keep(_dp_attention_initialized(launch.args, launch.target))


MODEL_RUNNER = Stage("model_runner", "the model runner, before the weights load",
                     "ModelRunner.__init__ up to model_specific_adjustment() (model_executor/model_runner.py)",
                     run=_run_model_runner, emulated=True)

"""The speculative worker (mirrors ``speculative/*_worker*.py``): its draft ``ModelConfig``
(``draft_worker_model_config``) and its construction up to its draft runner (``draft_worker``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
from typing import Any

from .attention import _choose_backends
from .draft_levels import DraftLevel, draft_levels
from .faults import _REFUSALS, _refused_in, sglang_verdict
from .model_runner import _set_plain_attributes_after_device
from .parallel_groups import _parallel_state
from .process_state import _speculative_classes_kept
from .sglang_lookup import _accepted, _attribute, _call, _replaced, _view
from .siblings import model_classes
from .stage import Progress, Stage, _NotLoaded
from .standins import _DeviceReached, _DraftRunnerReached, _LoadedTarget

#: Algorithms whose draft worker builds a draft ``ModelConfig`` (EAGLE family and STANDALONE).
_DRAFT_MODEL_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE"})


def _draft_worker(args: Any, target: Any, runner: Any, progress: Progress) -> BaseException | None:
    """The draft worker the scheduler builds once the target is up (``maybe_init_draft_worker``).

    SGLang's own choice of its class (``SpeculativeAlgorithm.create_worker``, 0.5.8+: it refuses, say,
    DFLASH with overlap scheduling), then, for the algorithms whose worker builds a draft model (EAGLE,
    EAGLE3, NEXTN, STANDALONE; the others' classes are chosen, not built), the class's own constructor,
    through the draft's model worker (its model config) to the draft's ``ModelRunner``, built by SGLang's
    own ``__init__`` up to its first device step, then the draft runner's own attention-backend choice
    (sglang#23490: a draft that inherits an MLA-only backend); the draft's weights load next. The target worker it is handed
    has the target's model config and runner; a read of anything only a loaded server has (the memory
    pool, the model) ends the stage, recorded in ``needs_gpu`` with what was read. Where a constructor on the way
    to the draft runner checks after it (0.5.18+'s ``StandaloneWorkerV2``: the draft's vocabulary against the
    target's), SGLang's statements after the runner run on the objects built (:func:`_checks_after_the_draft_runner`).
    Releases without ``create_worker`` build the worker inline in the scheduler: the stage does not run there.
    """
    algorithm = getattr(_view(args), "speculative_algorithm", None)
    speculative_algorithm = _attribute(("sglang.srt.speculative.spec_info",), "SpeculativeAlgorithm")
    if not algorithm or speculative_algorithm is None:
        return None
    spec = speculative_algorithm.from_string(algorithm)
    create = getattr(spec, "create_worker", None)
    if create is None or (callable(getattr(spec, "is_none", None)) and spec.is_none()):
        return None
    progress.enter(DRAFT_WORKER.name)
    worker_cls = create(args)
    if worker_cls is None:
        return None
    progress.held["worker_cls"] = worker_cls
    progress.draft_worker = getattr(worker_cls, "__name__", str(worker_cls))
    if str(algorithm).upper() not in _DRAFT_MODEL_ALGORITHMS:
        return None  # NGRAM builds its corpus (native code) and DFLASH-like workers their own kernels: not run
    runner_cls: Any = type(runner).__mro__[1]
    real_init = runner_cls.__init__

    def stop(*_args: Any, **_kwargs: Any) -> None:
        raise _DeviceReached

    drafts: list[Any] = []

    def draft_runner(draft: Any, *init_args: Any, **init_kwargs: Any) -> None:
        # the draft's model worker builds its runner: SGLang's own __init__ up to the device, then the
        # draft's own backend choice; its weights load next
        progress.built[id(draft)] = "the draft's ModelRunner built up to its first device step"
        drafts.append(draft)
        progress.held["draft_model_config"] = getattr(draft, "model_config", None) or init_kwargs.get("model_config")
        with contextlib.suppress(_DeviceReached):
            real_init(draft, *init_args, **init_kwargs)
        _set_plain_attributes_after_device(draft, runner_cls)
        progress.draft_attention_backends = _choose_backends(draft)
        raise _DraftRunnerReached

    view = _view(args)
    kwargs = {"server_args": args, "gpu_id": getattr(view, "base_gpu_id", 0) or 0, "tp_rank": 0, "pp_rank": 0,
              "dp_rank": None, "moe_ep_rank": 0, "attn_cp_rank": 0, "moe_dp_rank": 0, "nccl_port": 0,
              "ps": _parallel_state(view), "target_worker": _LoadedTarget(runner, target, args)}
    # where a constructor on the way checks after the draft runner, each one's object and arguments are kept
    levels = draft_levels(worker_cls)
    made: dict[type, tuple[Any, dict[str, Any]]] = {}
    with contextlib.ExitStack() as kept:
        for level in levels if any(level.checks for level in levels) else ():
            kept.enter_context(_replaced(level.owner, "__init__", _keeping(level.owner, made)))
        with _speculative_classes_kept(), _replaced(runner_cls, "init_torch_distributed", stop), \
                _replaced(runner_cls, "__init__", draft_runner):
            try:
                _call(worker_cls, **kwargs)
            except _DraftRunnerReached:
                pass
            else:
                return None
            # outside the handler: a refusal of SGLang's is raised unchained, as on a real box
            return _checks_after_the_draft_runner(levels, made, drafts[0], progress) if made else None
    return None


def _keeping(owner: type, made: dict[type, tuple[Any, dict[str, Any]]]) -> Any:
    """``owner.__init__``, keeping the object it builds and the arguments it is called with in ``made``."""
    real = vars(owner)["__init__"]

    @functools.wraps(real)  # the arguments it accepts stay SGLang's (``_call`` passes only those)
    def init(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = inspect.signature(real).bind(self, *args, **kwargs)
            bound.apply_defaults()
            arguments = dict(list(bound.arguments.items())[1:])
        except TypeError:
            arguments = {}
        made[owner] = (self, arguments)
        return real(self, *args, **kwargs)

    return init


def _checks_after_the_draft_runner(levels: tuple[DraftLevel, ...],
                                   made: dict[type, tuple[Any, dict[str, Any]]], draft: Any,
                                   progress: Progress) -> BaseException | None:
    """What each constructor on the way to the draft runner does after the statement that builds the next
    (:func:`.draft_levels.draft_levels`), innermost first, as each returns on a real box: the statement's result
    stored where SGLang stores it (the draft runner built up to its device step, then each object built), then
    SGLang's own statements after it that a CPU runs: plain assignments and their checks (0.5.18+'s
    ``StandaloneWorkerV2``: ``_validate_vocab_compatibility``, the draft's vocabulary against the target's). A
    refusal is returned (SGLang's verdict); a check that reads what this machine does not have ends the stage,
    named in ``needs_gpu`` as not checked."""
    built = draft
    for level in reversed(levels):
        found = made.get(level.owner)
        if found is None or built is None:
            return None
        obj, arguments = found
        if level.stores is not None:
            setattr(obj, level.stores, built)
        built = obj
    for level in reversed(levels):
        statements = level.after
        if statements is None:
            continue
        obj, arguments = made[level.owner]
        names = {name: value for name, value in arguments.items() if name in statements.parameters}
        try:
            model_classes.run(statements, self=obj, **names)
        except _REFUSALS as exc:
            if _refused_in(exc, statements.filename) or sglang_verdict(exc):
                return exc
            progress.needs_gpu[DRAFT_WORKER.name] = _not_checked(statements, exc)
            return None
        except (Exception, _NotLoaded) as exc:
            progress.needs_gpu[DRAFT_WORKER.name] = _not_checked(statements, exc)
            return None
    return None


def _not_checked(statements: model_classes.Statements, exc: BaseException) -> str:
    return (f"not checked: {statements.owner}.__init__'s checks after the draft runner ({statements.where}): "
            f"{type(exc).__name__}: {str(exc)[:160]}")


def _draft_worker_config(args: Any, target: Any, model_config_cls: Any, progress: Progress) -> None:
    view = _view(args)
    algorithm = getattr(view, "speculative_algorithm", None)
    if algorithm and str(algorithm).upper() in _DRAFT_MODEL_ALGORITHMS:
        # The draft worker: ``TpModelWorker(is_draft_worker=True)`` with the target's context
        # length, passed as an argument (0.5.19+) or written into ``server_args.context_length``
        # first (``eagle_worker.py``: ``server_args.context_length = target ... context_len``).
        draft_path = getattr(view, "speculative_draft_model_path", None) or getattr(view, "model_path", None)
        progress.enter("draft_worker_model_config")
        from_server_args = model_config_cls.from_server_args
        accepted = _accepted(from_server_args, model_config_cls.__init__) or set()
        kwargs: dict[str, Any] = {"model_path": draft_path, "is_draft_model": True}
        if "model_revision" in accepted:
            kwargs["model_revision"] = getattr(view, "speculative_draft_model_revision", None)
        context_len = getattr(target, "context_len", None)
        if "context_length" in inspect.signature(from_server_args).parameters:
            kwargs["context_length"] = context_len
        else:
            args = copy.copy(args)
            args.context_length = context_len
        progress.held["draft_model_config"] = _call(from_server_args, args, forwards_to=model_config_cls.__init__,
                                                    **kwargs)


DRAFT_WORKER_MODEL_CONFIG = Stage(
    "draft_worker_model_config", "the draft worker's model config, after the weights load",
    "the draft worker's ModelConfig with the target's context length (speculative/eagle_worker*.py, "
    "standalone_worker*.py)",
    run=lambda launch: _draft_worker_config(launch.args, launch.target, launch.model_config_cls, launch.progress),
    emulated=True)
DRAFT_WORKER = Stage("draft_worker", "the draft worker's construction, after the weights load",
                     "the speculative worker's __init__ up to its draft runner, then each constructor's own "
                     "statements after it (speculative/*_worker*.py)",
                     run=lambda launch: _draft_worker(launch.args, launch.target, launch.runner, launch.progress),
                     emulated=True)

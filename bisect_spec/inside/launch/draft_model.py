"""The draft model's class and the embedding/head the draft worker shares with the target (``draft_model``
stage; mirrors the EAGLE workers' ``get_embed_and_head``/``set_embed_and_head``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .device_stops import _stop_words
from .draft_memory import DRAFT_WEIGHTS, check_draft_fits, draft_weights_bytes
from .faults import _refused_by_the_model, sglang_verdict
from .model_build import _platform_flags_of_the_box
from .sglang_lookup import _accepted, _attribute, _call, _replaced, _view
from .siblings import model_classes, version_shims
from .stage import Progress, Stage, _NotLoaded
from .standins import _Shell
from .target_model import _architectures, _note_source, _target_architectures

#: Algorithms whose worker shares the target's embedding and head with the draft (the EAGLE family).
_EMBED_SHARING_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "MTP"})


def _worker_class(algorithm: str, progress: Progress) -> Any:
    """The draft worker's class: SGLang's own choice where it ran (0.5.8+), else the EAGLE worker the
    scheduler builds inline for the EAGLE family."""
    chosen = progress.held.get("worker_cls")
    if chosen is not None or algorithm not in _EMBED_SHARING_ALGORITHMS:
        return chosen
    name = "sglang.srt.speculative.eagle_worker"
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return getattr(model_classes.import_module(name), "EAGLEWorker", None)
    except _NotLoaded:  # its module does not import here (<= 0.5.3): its statements are still in its source
        return model_classes.source_reference(name, "EAGLEWorker")


class _StepRunners:
    """Multi-layer EAGLE's draft runners, one per step (``draft_runner_list``): step 0's is the stage's draft runner,
    the others stood in for when SGLang's loop reaches them, as many as the worker builds (its step count)."""

    def __init__(self, first: Any, make: Callable[[int], Any], steps: int) -> None:
        self._made: dict[int, Any] = {0: first}
        self._make, self._steps = make, steps

    def __len__(self) -> int:
        return self._steps

    def __getitem__(self, index: int) -> Any:
        if not isinstance(index, int) or not -self._steps <= index < self._steps:
            raise IndexError("list index out of range")  # as the worker's own list would
        index %= self._steps
        if index not in self._made:
            self._made[index] = self._make(index)
        return self._made[index]

    def __iter__(self) -> Iterator[Any]:
        return (self[index] for index in range(self._steps))


def _draft_model(args: Any, target: Any, progress: Progress) -> None:
    """The draft model's class, as SGLang's registry serves it for the draft's config, and the draft
    worker's own statements that share the target's embedding and head with it (``get_embed_and_head``
    on the target, ``set_embed_and_head`` or ``set_embed`` on the draft), run on stand-ins of both built
    models (:mod:`model_classes`). The EAGLE family (EAGLE, EAGLE3, NEXTN) only: their workers share them."""
    view = _view(args)
    algorithm = str(getattr(view, "speculative_algorithm", None) or "").upper()
    draft_config = progress.held.get("draft_model_config")
    if algorithm not in _EMBED_SHARING_ALGORITHMS or draft_config is None:
        return
    progress.enter(DRAFT_MODEL.name)
    worker_cls = _worker_class(algorithm, progress)
    target_architectures = _target_architectures(progress, target)
    target_cls = model_classes.model_class(target_architectures)
    draft_cls = model_classes.model_class(_architectures(draft_config))
    if draft_cls is not None:
        progress.model_classes["draft"] = draft_cls.__name__
        _note_source(progress, "draft", draft_cls)
    if worker_cls is None or target_cls is None or draft_cls is None:
        missing = [a for cls, names in ((target_cls, target_architectures), (draft_cls, _architectures(draft_config)))
                   if cls is None for a in names[:1]]
        if missing:
            progress.needs_gpu[DRAFT_MODEL.name] = f"no module of sglang.srt.models defines {', '.join(missing)}"
        return
    built = _draft_built(draft_config, draft_cls, progress)
    if built is not None:  # its weights, as the draft runner loads them; up to 0.5.13 its pool next, on top
        progress.held[DRAFT_WEIGHTS] = draft_weights_bytes(built)
        if progress.memory_pool is not None:  # the target's pool was sized before the draft (up to 0.5.13)
            check_draft_fits(args, target, draft_config, progress.held[DRAFT_WEIGHTS], progress)
    statements = model_classes.lm_head_statements(worker_cls)
    if statements is None:
        return
    speculative_algorithm = _attribute(("sglang.srt.speculative.spec_info",), "SpeculativeAlgorithm")
    draft_model = model_classes.stand_in(draft_cls, getattr(draft_config, "hf_config", None))
    target_model = model_classes.stand_in(target_cls, getattr(target, "hf_config", None))
    draft_runner = _Shell("the draft runner", model=draft_model, server_args=args, model_config=draft_config)
    steps = getattr(view, "speculative_num_steps", None)
    # multi-layer EAGLE: one draft runner per step, each with its own built draft model (step 0's is the one above)
    runners = _StepRunners(draft_runner, lambda step: _Shell(
        f"the draft runner of step {step}", server_args=args, model_config=draft_config,
        model=model_classes.stand_in(draft_cls, getattr(draft_config, "hf_config", None))),
        steps if isinstance(steps, int) and steps > 0 else 1)
    target_runner = _Shell("the target runner", model=target_model, model_config=target, server_args=args,
                           load_config=model_classes.Opaque("the target runner's load config"))
    token_map = getattr(view, "speculative_token_map", None)
    # the worker as far as the statements need it, with its class's own methods (``self._helper()``)
    worker: Any = type(statements.owner or "DraftWorker", (_Shell,), model_classes.owner_methods(statements))
    shell = worker(f"the {statements.owner or 'draft worker'}", server_args=args,
                   target_worker=_Shell("the target worker", model_runner=target_runner, model_config=target),
                   draft_model_runner=draft_runner, draft_runner=draft_runner, draft_runner_list=runners,
                   model_runner_list=runners,  # 0.5.8.post1's multi-layer worker: its own per-step runners
                   # what the worker's __init__ copies from the server arguments before its runners are built
                   speculative_num_steps=steps, topk=getattr(view, "speculative_eagle_topk", None),
                   speculative_num_draft_tokens=getattr(view, "speculative_num_draft_tokens", None),
                   speculative_algorithm=speculative_algorithm.from_string(algorithm),
                   hot_token_id=model_classes.Opaque("the hot token ids") if token_map else None)
    progress.built[id(shell)] = f"a {statements.owner or 'draft worker'} built by bisect-spec"
    model_classes.run(statements, self=shell)


def _draft_built(draft_config: Any, draft_cls: type, progress: Progress) -> Any:
    """The draft model built as the draft worker's loader builds it, on ``meta``: SGLang's own
    ``_initialize_model`` (the class's ``__init__`` with the draft's real config and quantization), serving the
    class :mod:`model_classes` found (the registry may have skipped its module on this CPU). A refusal the
    model's own module raises (``raise``/``assert`` in ``sglang/srt/models``: "EAGLE3 currently only supports 1
    layer" for a two-layer EAGLE3 head, 0.4.6 … 0.5.9) is SGLang's verdict; any other failure of the build (a
    layer's CPU-only branch, a kernel only a GPU has) stops it, recorded, and the stage goes on with stand-ins.
    The built model, or None where it was not built."""
    loader = _attribute(("sglang.srt.model_loader.loader",), "_initialize_model")
    load_config_cls = _attribute(("sglang.srt.configs.load_config",), "LoadConfig")
    default_dtype = _attribute(("sglang.srt.model_loader.utils", "sglang.srt.model_loader.loader"),
                               "set_default_torch_dtype")
    if loader is None or load_config_cls is None or default_dtype is None or model_classes.FROM_SOURCE in vars(draft_cls):
        return None
    import torch

    module = sys.modules[loader.__module__]
    served = (lambda *_args, **_kwargs: (draft_cls, draft_cls.__name__))  # noqa: E731 - the registry's answer
    try:
        load_config = _call(load_config_cls, load_format="dummy")
        with _replaced(module, "get_model_architecture", served), default_dtype(draft_config.dtype), \
                torch.device("meta"), version_shims.import_window(["vllm._custom_ops"]), \
                _platform_flags_of_the_box(torch)():
            quantization = getattr(module, "_get_quantization_config", None)
            extra = ({"quant_config": _call(quantization, draft_config, load_config)}
                     if quantization is not None and "quant_config" in (_accepted(loader) or ()) else {})
            return _call(loader, draft_config, load_config, **extra)
    except _NotLoaded as stop:
        progress.needs_gpu[DRAFT_MODEL.name] = f"building {draft_cls.__name__} on meta: {stop}"
    except Exception as exc:
        if _refused_by_the_model(exc, draft_cls) or sglang_verdict(exc):
            raise
        progress.needs_gpu[DRAFT_MODEL.name] = f"building {draft_cls.__name__} on meta stopped at {_stop_words(exc)}"
    return None


DRAFT_MODEL = Stage("draft_model", "the draft model's class and the embedding/head it shares, after the weights load",
                    "the registry's draft class, get_embed_and_head/set_embed_and_head (speculative/eagle_worker*.py)",
                    run=lambda launch: _draft_model(launch.args, launch.target, launch.progress),
                    emulated=True)

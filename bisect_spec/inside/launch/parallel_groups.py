"""The parallel groups ``init_torch_distributed`` builds, stood in for with their widths and this rank's
place (mirrors ``distributed/parallel_state.py`` and ``layers/dp_attention.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from typing import Any

from .process_state import _saved_state
from .sglang_lookup import _accepted, _attribute, _call, _view
from .stage import _NotLoaded
from .standins import _Unloaded

#: The runner's attributes for its parallel groups that ``init_torch_distributed`` sets from what building the
#: process group returned (0.5.18's ``self.pp_group = result.pp_group``), by the ``parallel_state`` global whose
#: stand-in they are given (:data:`_GROUPS`).
_RUNNER_GROUPS = {"tp_group": "_TP", "pp_group": "_PP", "attention_tp_group": "_ATTN_TP"}


def _groups_on_runner(runner: Any, runner_cls: type) -> None:
    """The group attributes the runner's device step sets (:data:`_RUNNER_GROUPS`, where its source sets them and
    :func:`model_classes.device_step_assignments` did not), given the groups' stand-ins (:func:`_groups_built`)."""
    state = sys.modules.get("sglang.srt.distributed.parallel_state")
    try:
        source = inspect.getsource(runner_cls.init_torch_distributed)  # type: ignore[attr-defined]
    except (OSError, TypeError, AttributeError):
        return
    for name, global_name in _RUNNER_GROUPS.items():
        group = vars(state).get(global_name) if state is not None else None
        if f"self.{name} =" in source and name not in vars(runner) and group is not None:
            setattr(runner, name, group)


class _GroupStandIn:
    """A parallel group as TP rank 0 holds it once ``init_torch_distributed`` has built it: its width and
    this rank's place in it (what layers and workers read while they are built), and its process groups
    as handles a layer may keep. Anything else (a collective, a use of a handle, a message queue) ends the
    stage: only a GPU box has it."""

    def __init__(self, name: str, size: int) -> None:
        ranks = list(range(size))
        vars(self).update(unique_name=name, world_size=size, rank_in_group=0, rank=0, local_rank=0, ranks=ranks,
                          first_rank=ranks[0], last_rank=ranks[-1], is_first_rank=True, is_last_rank=size == 1,
                          next_rank=ranks[1 % size], prev_rank=ranks[-1],
                          # handles a layer may keep while it is built; any use of one ends the stage
                          cpu_group=_Unloaded(f"the {name} group's CPU process group"),
                          device_group=_Unloaded(f"the {name} group's device process group"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)  # copy, pickle and introspection: an ordinary object
        raise _NotLoaded(f"uses the {vars(self)['unique_name']} group's {name} (built by init_torch_distributed on a "
                         "GPU box: not here)")

    def __repr__(self) -> str:
        return f"<stand-in {vars(self)['unique_name']} group of {vars(self)['world_size']}>"


#: SGLang's parallel groups (``parallel_state``'s module globals) a stand-in is given for, with the group's
#: name in the runtime context (0.5.21+) and its width's name there (``_SELF_PP``, the draft's pipeline group
#: of one: "one"). ``_PDMUX_PREFILL_TP_GROUP`` is left unbuilt: a read of it ends the stage, as before.
_GROUPS = (("_WORLD", "world_group", "world_size", "world"), ("_TP", "tp_group", "tp_size", "tp"),
           ("_PP", "pp_group", "pp_size", "pp"), ("_ATTN_TP", "attn_tp_group", "attn_tp_size", "attention_tp"),
           ("_ATTN_CP", "attn_cp_group", "attn_cp_size", "attention_cp"), ("_DCP", "dcp_group", "dcp_size", "dcp"),
           ("_MOE_EP", "moe_ep_group", "moe_ep_size", "moe_ep"), ("_MOE_TP", "moe_tp_group", "moe_tp_size", "moe_tp"),
           ("_MOE_DP", "moe_dp_group", "moe_dp_size", "moe_dp"),
           ("_SHARED_EXPERTS_TP", "shared_experts_tp_group", "shared_experts_tp_size", "shared_experts_tp"),
           ("_SELF_PP", "self_pp_group", "one", "self_pp"))


def _group_widths(args: Any) -> dict[str, int]:
    """Each group's width on TP rank 0, by the width's name: the runtime context's where it has one
    (0.5.17+), else from the arguments as ``initialize_model_parallel`` and ``compute_dp_attention_world_info``
    compute them."""
    view = _view(args)
    tp, pp = getattr(view, "tp_size", 1) or 1, getattr(view, "pp_size", 1) or 1
    ep, moe_dp = getattr(view, "ep_size", 1) or 1, getattr(view, "moe_dp_size", 1) or 1
    attn_cp = getattr(view, "attn_cp_size", 1) or 1
    attn_tp = _attention_world(view)[1]
    widths = {"world_size": tp * pp, "tp_size": tp, "pp_size": pp, "attn_tp_size": attn_tp, "attn_cp_size": attn_cp,
              "dcp_size": getattr(view, "dcp_size", 1) or 1, "moe_ep_size": ep, "moe_dp_size": moe_dp,
              "moe_tp_size": max(1, tp // (ep * moe_dp)), "shared_experts_tp_size": attn_tp, "one": 1}
    get_parallel = _attribute(("sglang.srt.runtime_context",), "get_parallel")
    if get_parallel is not None:
        for name in set(widths) - {"one"}:
            with contextlib.suppress(Exception):
                value = getattr(get_parallel(), name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    widths[name] = value
    return widths


@contextlib.contextmanager
def _groups_built(args: Any) -> Iterator[None]:
    """The parallel groups the target runner's ``init_torch_distributed`` builds on a real box, stood in
    for the stages after it (:class:`_GroupStandIn`), and put back afterwards.

    Written where the release keeps them: ``parallel_state``'s module globals (every release; 0.5.17 …
    0.5.20's runtime context reads them there) and, where the runtime context declares the groups as
    names of its own (0.5.21+), with SGLang's own ``get_parallel().override`` (which checks each width
    against the configured one). A group already built is left as it is; one whose width is unknown
    stays unbuilt, and a read of it ends the stage as before.
    """
    state = sys.modules.get("sglang.srt.distributed.parallel_state")
    if state is None:
        with contextlib.suppress(Exception):
            state = importlib.import_module("sglang.srt.distributed.parallel_state")
    if state is None:
        yield
        return
    widths = _group_widths(args)
    written: list[str] = []
    context_groups: dict[str, _GroupStandIn] = {}
    fields = _attribute(("sglang.srt.runtime_context",), "_parallel_fields")
    declared = fields() if fields is not None else frozenset()
    for module_name, context_name, width_name, unique in _GROUPS:
        if width_name not in widths:
            continue
        group = _GroupStandIn(unique, widths[width_name])
        if hasattr(state, module_name) and getattr(state, module_name) is None:
            setattr(state, module_name, group)
            written.append(module_name)
        if context_name in declared:
            context_groups[context_name] = group
    try:
        with _parallel_override(context_groups):
            yield
    finally:
        for module_name in written:
            setattr(state, module_name, None)


#: A module's plain global constants (``_ATTN_DP_SIZE``), put back after a stage wrote them.
_PLAIN_GLOBAL = re.compile(r"^_[A-Z][A-Z0-9_]*$")


@contextlib.contextmanager
def _dp_attention_initialized(args: Any, target: Any) -> Iterator[None]:
    """SGLang's own ``initialize_dp_attention``, as ``init_torch_distributed`` runs it once the groups exist:
    0.5.9 … 0.5.20 keep the attention-DP ranks and sizes as module globals whose getters assert ("dp attention
    not initialized!"), which building a model reads. The module's plain globals and its gathered-buffer
    metadata are put back afterwards, and so is what 0.5.20's writes into the runtime context for good
    (``get_parallel().override_permanently``: its ``_derived`` widths). 0.5.1 … 0.5.8 run it until it builds an
    attention-TP group of its own (a device step), which ends it half-way; what it set is put back afterwards too.
    0.4.x take other arguments and 0.5.21+ derive it from the published context: there it is not run."""
    module = sys.modules.get("sglang.srt.layers.dp_attention")
    initialize = getattr(module, "initialize_dp_attention", None)
    if initialize is None or not {"server_args", "model_config"} <= (_accepted(initialize) or set()):
        yield  # 0.5.21+ derive it from the published context (and write it there for good): left alone
        return
    saved = {name: value for name, value in vars(module).items()
             if _PLAIN_GLOBAL.match(name) and isinstance(value, (type(None), int, bool, float, str))}
    wrapper = getattr(module, "_DpGatheredBufferWrapper", None)
    wrapper_saved = dict(vars(wrapper)) if isinstance(wrapper, type) else {}
    flags = _attribute(("sglang.srt.runtime_context",), "get_flags")
    parallel = _attribute(("sglang.srt.runtime_context",), "get_parallel")
    dp_flags = derived = None
    with contextlib.suppress(Exception):
        dp_flags = flags().dp if flags is not None else None  # 0.5.17+ write the DP flags there too
    with contextlib.suppress(Exception):
        derived = getattr(parallel(), "_derived", None) if parallel is not None else None
    derived_saved = dict(derived) if isinstance(derived, dict) else None
    try:
        with _saved_state(dp_flags):
            with contextlib.suppress(Exception, _NotLoaded):
                _call(initialize, server_args=args, model_config=target)
            yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
        if isinstance(derived, dict) and derived_saved is not None:
            derived.clear()
            derived.update(derived_saved)
        if isinstance(wrapper, type):
            for name in set(vars(wrapper)) - set(wrapper_saved):
                delattr(wrapper, name)
            for name, value in wrapper_saved.items():
                if not name.startswith("__") and vars(wrapper).get(name) is not value:
                    setattr(wrapper, name, value)


@contextlib.contextmanager
def _parallel_override(groups: dict[str, Any]) -> Iterator[None]:
    """SGLang's ``get_parallel().override(**groups)`` for the groups it accepts (those whose width it agrees with)."""
    get_parallel = _attribute(("sglang.srt.runtime_context",), "get_parallel")
    override = getattr(get_parallel(), "override", None) if get_parallel is not None and groups else None
    if override is None:
        yield
        return
    accepted: dict[str, Any] = {}
    for name, group in groups.items():
        try:
            with override(**accepted, **{name: group}):
                accepted[name] = group
        except (Exception, _NotLoaded):  # a width SGLang does not agree with: that group stays unbuilt
            continue
    with override(**accepted):
        yield


def _attention_world(view: Any) -> tuple[int, int, int, int]:
    """TP rank 0's ``(attn_tp_rank, attn_tp_size, attn_dp_rank, attn_dp_size)``, by SGLang's own
    ``compute_dp_attention_world_info`` where the release has it: its arguments changed by 0.5.23 (the
    attention-DP width instead of ``enable_dp_attention`` and ``dp_size``), and up to 0.5.12 it returns
    three values (the attention-DP width is then ``dp_size`` with DP attention, else 1)."""
    tp, dp = getattr(view, "tp_size", 1) or 1, getattr(view, "dp_size", 1) or 1
    cp, enabled = getattr(view, "attn_cp_size", 1) or 1, bool(getattr(view, "enable_dp_attention", False))
    attn_dp = dp if enabled else 1
    world_info = _attribute(("sglang.srt.layers.dp_attention",), "compute_dp_attention_world_info")
    try:
        found = tuple(_call(world_info, enable_dp_attention=enabled, tp_rank=0, tp_size=tp, dp_size=dp,
                            attn_dp_size=attn_dp, attn_cp_size=cp)) if world_info is not None else ()
    except ZeroDivisionError:  # widths the launch path refuses later in its own words (initialize_dp_attention)
        found = ()
    if len(found) < 3:
        return 0, max(1, tp // attn_dp // cp), 0, attn_dp
    rank, width, dp_rank = (int(v) for v in found[:3])
    return rank, width, dp_rank, int(found[3]) if len(found) > 3 else attn_dp


def _parallel_state(view: Any) -> Any:
    """TP rank 0's ``ParallelState``, as the scheduler builds it (0.5.16+: the runner takes ``ps``); None
    where the release has none."""
    state_cls = _attribute(("sglang.srt.distributed.parallel_state_wrapper",), "ParallelState")
    if state_cls is None:
        return None
    tp_size, dp_size = getattr(view, "tp_size", 1) or 1, getattr(view, "dp_size", 1) or 1
    attn_cp_size = getattr(view, "attn_cp_size", 1) or 1
    attn_tp_rank, attn_tp_size, attn_dp_rank, attn_dp_size = _attention_world(view)
    values = {"tp_rank": 0, "tp_size": tp_size, "pp_rank": 0, "pp_size": getattr(view, "pp_size", 1) or 1,
              "dp_rank": None, "dp_size": dp_size, "attn_tp_rank": attn_tp_rank, "attn_tp_size": attn_tp_size,
              "attn_cp_rank": 0, "attn_cp_size": attn_cp_size, "attn_dcp_rank": 0,
              "attn_dcp_size": getattr(view, "dcp_size", 1) or 1, "attn_dp_rank": attn_dp_rank,
              "attn_dp_size": attn_dp_size, "moe_ep_rank": 0, "moe_ep_size": getattr(view, "ep_size", 1) or 1,
              "moe_dp_rank": 0, "moe_dp_size": getattr(view, "moe_dp_size", 1) or 1,
              "gpu_id": getattr(view, "base_gpu_id", 0) or 0}
    accepted = _accepted(state_cls) or set(values)
    for name in accepted - set(values):  # a field of another release: a size from the arguments, a rank 0
        values[name] = (getattr(view, name, None) or 1) if name.endswith("_size") else 0
    return state_cls(**{k: v for k, v in values.items() if k in accepted})

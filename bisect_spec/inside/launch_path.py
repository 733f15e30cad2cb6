"""What ``launch_server`` does after argument resolution, up to the first step that needs a GPU.

Runs inside an evaluation worker, right after ``prepare_server_args`` (+ ``resolve_once``),
on the same ``ServerArgs``. A configuration is PASSED only when every step below passes:
then a real launch would go on to load weights. Each step is found **by feature** (the
function or module exists in the release), never by version string, so a release newer
than any we know runs the steps it has. Read from the sources of every release family
(``shared/facts/sglang-launch-path.md``); the README lists, per family, which steps run.

Stages, in launch order (``Progress.stage`` records how far an evaluation got, or where it
failed):

``parse``
    argparse inside ``prepare_server_args`` (a usage error).
``resolve``
    ``ServerArgs.__post_init__`` and, where it exists, ``resolve_once()``.
``check_server_args``
    ``server_args.check_server_args()``, which ``Engine._launch_subprocesses`` calls in every
    release 0.4.9 … 0.5.23 before it spawns anything (pipeline-parallel × speculative, LoRA,
    tp × pp against nnodes, chunked prefill against page size, …).
``auto_parsers``
    ``resolve_auto_parsers`` (0.5.12+): always from the release that calls it
    unconditionally (it then also declares architecture defaults), else only for an
    ``auto`` parser, as the engine's own guard says. Never raises on a configuration.
``tokenizer_manager``
    ``TokenizerManager.init_model_config`` in the launcher (after ``publish(role="tokenizer")``
    where the release has a runtime context), called on a bare instance: the model config
    again, and the output slots reserved for draft tokens
    (``max(topk * steps, num_draft_tokens)``: a ``TypeError`` when resolution left one unset).
    Only this method runs: the tokenizer itself is not loaded.
``target_model_config``
    the scheduler's ``ModelConfig.from_server_args(server_args)`` (after the scheduler's
    ``publish(role="scheduler")`` where the release has a runtime context): dtype,
    quantization against the checkpoint, context length.
``draft_model_config``
    the target ``ModelRunner``'s speculative pre-device step where the release has it as a
    free function (``resolve_spec_aux_hidden_state_config``: builds the draft's
    ``ModelConfig`` in draft mode).
``model_runner``
    the target ``ModelRunner.__init__`` up to and including ``model_specific_adjustment()``,
    where that method raises (0.4.6 … 0.5.6): an explicit attention backend an MLA model
    cannot use, a dual-chunk model's other backends.
``target_model``
    the target's model class, as SGLang's registry serves it for the architecture, and the runner's
    own call that asks the built model to capture auxiliary hidden states for EAGLE3/DFLASH
    (``set_eagle3_layers_to_capture``: a class without it fails), on a stand-in of the built model
    (:mod:`model_classes`). After the target's attention backends where the release asks for the
    capture after them (0.5.9), before them elsewhere. Speculative configurations only.
``draft_worker_model_config``
    the draft worker's ``ModelConfig`` with the target's context length, which every release
    builds for EAGLE/EAGLE3/NEXTN/STANDALONE (``eagle_worker*.py``, ``standalone_worker*.py``).
    It runs after the target's weights load on a real box: the outcome says so with
    ``after_weights``.
``draft_model``
    the draft's model class (the registry's, for the draft's config) and the draft worker's own
    statements that share the target's embedding and head with it (``get_embed_and_head``,
    ``set_embed_and_head``/``set_embed``), on stand-ins of both built models: the EAGLE family.
``weights``
    reached: a real launch would now set the device and load weights. The stage of every
    PASSED outcome.

Left out, on purpose: ``_set_envs_and_config`` (signal handlers, ``spawn`` start method,
ulimit; its package-version asserts pass on a real install, which a simulated box is),
``PortArgs.init_new`` (port probing), the tokenizer (profiles ship none; it does not depend
on the flags), ``model_specific_adjustment`` where it raises nothing (0.5.8+: it cannot change
a verdict) and everything after ``set_device``.

What the device step would have built, for the stages after it (a real box has them by then):
the parallel groups ``init_torch_distributed`` creates, stood in for with their widths and this
rank's place (:func:`_groups_built`: ``parallel_state``'s globals and, 0.5.21+, the runtime
context's own names, through SGLang's ``get_parallel().override``); a collective or a use of a
process-group handle ends the stage. And tensors placed on a GPU are made on ``meta``
(:mod:`meta_device`): shapes without values; reading a value ends the stage.

Process state: ``publish`` writes SGLang's process-wide runtime context; it is snapshotted
before and restored after (by SGLang's ``snapshot_context`` where it has one, else by saving
the context object's state in place: 0.5.18's ``get_parallel()`` is the same object as its
context's ``parallel``), so evaluations stay independent.

Faults of this emulation (:func:`tool_fault`) are never verdicts: the evaluator records them
as ``crashed`` with ``tool_fault``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import re
import sys
import textwrap
import traceback
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def _sibling(name: str) -> types.ModuleType:
    """This package's module ``name`` loaded from beside this file (``repro.py`` loads this file alone)."""
    spec = importlib.util.spec_from_file_location(f"bisect_spec_{name}",
                                                  os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclass-like lookups of the module by name
    spec.loader.exec_module(module)
    return module


try:
    from bisect_spec.inside import meta_device, model_classes, version_shims
except ImportError:  # repro.py: this file without its package
    model_classes = _sibling("model_classes")
    meta_device = _sibling("meta_device")
    version_shims = _sibling("version_shims")

#: Stages in launch order. A failure records the stage it failed in; a PASSED outcome the last
#: stage it ran (``STAGE_WORDS`` says it in words: "PASSED up to attention-backend selection").
STAGES = ("parse", "resolve", "check_server_args", "auto_parsers", "tokenizer_manager", "target_model_config",
          "draft_model_config", "model_runner", "memory_pool", "cuda_graph_sizes", "target_worker", "target_model",
          "attention_backend", "draft_worker_model_config", "draft_worker", "draft_model")
#: Stages that a real launch runs only after the target's weights are loaded.
AFTER_WEIGHTS = frozenset({"memory_pool", "cuda_graph_sizes", "target_worker", "target_model", "attention_backend",
                           "draft_worker_model_config", "draft_worker", "draft_model"})
#: Each stage in the words a verdict uses ("PASSED up to ...", "FAILED in ...").
STAGE_WORDS = {"parse": "argument parsing", "resolve": "argument resolution",
               "check_server_args": "check_server_args", "auto_parsers": "parser detection",
               "tokenizer_manager": "the tokenizer manager's model config",
               "target_model_config": "the target's model config", "draft_model_config": "the draft's model config",
               "model_runner": "the model runner, before the weights load",
               "memory_pool": "the target's memory pool, sized against the simulated box's memory",
               "cuda_graph_sizes": "the batch sizes of the target's CUDA graphs, chosen against its request pool",
               "target_worker": "the target worker's checks on its built runner",
               "target_model": "the target model's class and the speculative calls on it, after the weights load",
               "attention_backend": "attention-backend selection, after the weights load",
               "draft_worker_model_config": "the draft worker's model config, after the weights load",
               "draft_worker": "the draft worker's construction, after the weights load",
               "draft_model": "the draft model's class and the embedding/head it shares, after the weights load"}

_ENV_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.S)

#: Algorithms whose draft worker builds a draft ``ModelConfig`` (EAGLE family and STANDALONE).
_DRAFT_MODEL_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE"})
#: Algorithms whose worker shares the target's embedding and head with the draft (the EAGLE family).
_EMBED_SHARING_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "MTP"})


def split_env(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``VAR=value`` tokens (an environment prefix) and the flags after them."""
    env: dict[str, str] = {}
    index = 0
    while index < len(argv):
        match = _ENV_ASSIGNMENT.match(argv[index])
        if match is None or argv[index].startswith("-"):
            break
        env[match["name"]] = match["value"]
        index += 1
    return env, argv[index:]


class Progress:
    """How far along the launch path an evaluation got."""

    def __init__(self) -> None:
        self.stage = STAGES[0]
        self.passed: list[str] = []
        self.after_weights = False
        #: ids of the objects this emulation built by hand (a bare ``TokenizerManager``): an
        #: attribute one of them lacks is the emulation's fault, not SGLang's
        self.built: dict[int, str] = {}
        #: the attention backends SGLang chose to build (class names), once that stage ran
        self.attention_backends: list[str] | None = None
        #: the draft worker class SGLang chose, once that stage ran, and its draft runner's backends
        self.draft_worker: str | None = None
        self.draft_attention_backends: list[str] | None = None
        #: stages after the weights that met a device call only a GPU answers, and the call
        #: (the stage's checks up to it passed; those after it did not run)
        self.needs_gpu: dict[str, str] = {}
        #: the model classes SGLang's registry serves (``{"target": ..., "draft": ...}``), once resolved
        self.model_classes: dict[str, str] = {}
        #: the roles whose class was read from its source (its module does not import on this machine)
        self.classes_from_source: list[str] = []
        #: the target's memory pool as SGLang sized it (``memory_pool`` stage): bytes, tokens, requests
        self.memory_pool: dict[str, Any] | None = None
        #: the batch sizes the target's CUDA graphs would be captured for (``cuda_graph_sizes``), or disabled
        self.cuda_graphs: dict[str, Any] | None = None
        #: objects a later stage takes from an earlier one (the draft's model config, the worker class);
        #: not recorded
        self.held: dict[str, Any] = {}

    def enter(self, stage: str) -> None:
        if self.stage != stage:
            self.passed.append(self.stage)
        self.stage = stage
        self.after_weights = stage in AFTER_WEIGHTS

    def back_to(self, stage: str) -> None:
        """The failure belongs to an earlier stage than the one entered (argparse inside ``resolve``)."""
        while self.passed and self.passed[-1] == stage:
            self.passed.pop()
        self.stage = stage

    def to_record(self, *, passed: bool = False) -> dict[str, Any]:
        """The record's fields; ``passed``: the evaluation passed, so ``reached`` says the last stage that ran
        to its end (where the last one entered stopped early at a device step: the one before it, and that)."""
        reached = STAGE_WORDS.get(self.stage, self.stage)
        whole = [stage for stage in self.passed if stage not in self.needs_gpu]
        if passed and self.stage in self.needs_gpu and whole:
            reached = f"{STAGE_WORDS.get(whole[-1], whole[-1])} (then {self.stage}, stopped early)"
        record: dict[str, Any] = {"stage": self.stage, "reached": reached, "stages_passed": list(self.passed)}
        if self.after_weights:
            record["after_weights"] = True
        if self.attention_backends is not None:
            record["attention_backends"] = list(self.attention_backends)
        if self.draft_worker is not None:
            record["draft_worker"] = self.draft_worker
        if self.draft_attention_backends is not None:
            record["draft_attention_backends"] = list(self.draft_attention_backends)
        if self.needs_gpu:
            record["needs_gpu"] = dict(self.needs_gpu)
        if self.model_classes:
            record["model_classes"] = dict(self.model_classes)
        if self.classes_from_source:
            record["model_classes_from_source"] = list(self.classes_from_source)
        if self.memory_pool is not None:
            record["memory_pool"] = dict(self.memory_pool)
        if self.cuda_graphs is not None:
            record["cuda_graphs"] = dict(self.cuda_graphs)
        return record


#: Modules the release does not have (``ModuleNotFoundError`` naming the module or a package above it): asked
#: again thousands of times per evaluation (:func:`_view`, once per quantised layer), each failed import a search
#: of ``sys.path``. A module that exists but fails to import is tried again every time.
_ABSENT: set[str] = set()


def _attribute(modules: tuple[str, ...], name: str) -> Any:
    """``name`` from the first of ``modules`` that has it, or None (the feature is absent)."""
    for module_name in modules:
        module = sys.modules.get(module_name)
        if module is None:
            if module_name in _ABSENT:
                continue
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
                    _ABSENT.add(module_name)
                continue
            except ImportError:
                continue
        found = getattr(module, name, None)
        if found is not None:
            return found
    return None


def _view(args: Any) -> Any:
    resolving_view = _attribute(("sglang.srt.arg_groups.overrides",), "resolving_view")
    return resolving_view(args) if resolving_view is not None else args


def _accepted(function: Callable[..., Any], also: Callable[..., Any] | None = None) -> set[str] | None:
    """Keyword names ``function`` accepts; None when it takes any (``**kwargs`` and no ``also``).

    ``also``: where ``function`` forwards its ``**kwargs`` (``ModelConfig.from_server_args``
    passes them on to ``ModelConfig``), whose names then count too.
    """
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return None
    names = {name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        if also is None:
            return None
        forwarded = _accepted(also)
        if forwarded is None:
            return None
        names |= forwarded
    return names


def _call(function: Callable[..., Any], *args: Any, forwards_to: Callable[..., Any] | None = None,
          **kwargs: Any) -> Any:
    """Call with the keyword arguments this release's signature accepts."""
    accepted = _accepted(function, forwards_to)
    if accepted is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    return function(*args, **kwargs)


@contextlib.contextmanager
def _runtime_context() -> Iterator[Callable[..., None] | None]:
    """SGLang's ``publish`` (where the release has a runtime context), with the process-wide
    context put back afterwards.

    Found by feature: ``publish`` alone decides (0.5.18 has it without 0.5.19's
    ``snapshot_context``/``restore_context``; not publishing there made every configuration
    fail with "config namespace 'spec' not published"). Without SGLang's own snapshot the
    context object's state is saved and put back by :func:`_saved_state`. With it, the parallel context's
    contents are put back too: SGLang's snapshot holds its ``_overrides`` dict by reference, and
    ``patch_tensor_parallel_group`` (the draft's attention-TP scope under DP attention, 0.5.19 … 0.5.20) updates
    that dict in place before it swaps in a saved copy, so the restore would bring back the draft's
    ``tp_size`` for every later evaluation (measured on 0.5.20: Llama at tp 1 sized as at tp 4).
    """
    publish = _attribute(("sglang.srt.runtime_context",), "publish")
    if publish is None:
        yield None
        return
    snapshot = _attribute(("sglang.srt.runtime_context",), "snapshot_context")
    restore = _attribute(("sglang.srt.runtime_context",), "restore_context")
    get_context = _attribute(("sglang.srt.runtime_context",), "get_context")
    context = get_context() if get_context is not None else None
    if snapshot is not None and restore is not None:
        with _saved_state(getattr(context, "parallel", None)):
            saved = snapshot()
            try:
                yield publish
            finally:
                restore(saved)
        return
    with _saved_state(context), _saved_state(getattr(context, "parallel", None)):
        yield publish


def _state_names(target: Any) -> list[str]:
    names: list[str] = []
    for klass in type(target).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    names += list(getattr(target, "__dict__", {}))
    return [n for n in dict.fromkeys(names) if n not in ("__dict__", "__weakref__")]


@contextlib.contextmanager
def _saved_state(target: Any) -> Iterator[None]:
    """Put ``target``'s attributes (slots and ``__dict__``) back as they were, so what ``publish`` or a check
    changed does not reach the next evaluation: the same objects (SGLang holds some under a second name:
    0.5.18's ``_PARALLEL`` is its context's ``parallel``), with their contents put back from copies."""
    if target is None:
        yield
        return
    saved: dict[str, tuple[Any, Any]] = {}
    for name in _state_names(target):
        try:
            value = getattr(target, name)
        except AttributeError:
            continue
        try:
            saved[name] = (value, copy.deepcopy(value))
        except Exception:
            saved[name] = (value, value)
    try:
        yield
    finally:
        for name in _state_names(target):
            if name not in saved:
                with contextlib.suppress(AttributeError):
                    delattr(target, name)
        for name, (value, contents) in saved.items():
            _put_back_contents(value, contents)
            with contextlib.suppress(AttributeError, TypeError):
                setattr(target, name, value)


def _put_back_contents(value: Any, contents: Any) -> None:
    """``value``'s contents as its copy ``contents`` holds them (a dict's items, a list's elements, an
    object's attributes, one level deep); nothing for an immutable value or one that could not be copied."""
    if contents is value or isinstance(value, _SIMPLE):
        return
    if isinstance(value, dict):
        value.clear()
        value.update(contents)
    elif isinstance(value, list):
        value[:] = contents
    elif not isinstance(value, (type, types.ModuleType, types.FunctionType)):
        for name in _state_names(contents):
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(value, name, getattr(contents, name))


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


@contextlib.contextmanager
def _architectures_kept(target: Any, progress: Progress) -> Iterator[None]:
    """The target's architectures as its ``ModelConfig`` read them, held for the model-class stages and put
    back afterwards. SGLang's config cache hands the same ``hf_config`` to every ``ModelConfig`` of a path,
    and a draft ``ModelConfig`` of the target's own path (NEXTN) renames ``architectures[0]`` in place
    (``DeepseekV3ForCausalLM`` -> ``...NextN``): on a real box after the target is built; here the draft's
    config is read earlier, and the next evaluation of the same worker would meet the renamed list."""
    hf_config = getattr(target, "hf_config", None)
    architectures = getattr(hf_config, "architectures", None)
    saved = list(architectures) if isinstance(architectures, list) else None
    progress.held["target_architectures"] = list(saved or [])
    try:
        yield
    finally:
        if saved is not None and isinstance(architectures, list) and architectures != saved:
            architectures[:] = saved
        if saved is not None and hf_config is not None and getattr(hf_config, "architectures", None) is not architectures:
            with contextlib.suppress(AttributeError):
                hf_config.architectures = architectures


def _after_the_target_config(args: Any, target: Any, model_config_cls: Any, from_server_args: Any,
                             progress: Progress) -> None:
    if from_server_args is not None:
        _draft_model_config(args, target, progress)
    with _moe_config_initialized(args):
        runner = _model_runner(args, target, progress)
        _gpus_checked(args)  # the device step sets each rank's GPU next
        with _groups_built(args), _dp_attention_initialized(args, target):
            _after_the_device_step(args, target, runner, model_config_cls, from_server_args, progress)


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


class _ImportingModels(dict):  # type: ignore[type-arg]
    """SGLang's model registry (``ModelRegistry.models``) answering for every architecture whose module imports on
    this machine *now*, not only for those that imported when the registry was built.

    The registry imports every module of ``sglang.srt.models`` once, when its module is first imported, and keeps
    out for good each one that failed: a module that imports a GPU package only imports here once the evaluator
    has imported that package's users on the CPU (:func:`model_classes.import_module`). Which evaluation built the
    registry then decided the verdict of every later one: a worker whose first evaluation was Llama's lacked
    ``DeepseekV3ForCausalLMNextN`` for good, and DeepSeek-V3's MTP stopped early there while a fresh worker
    passed it (``scripts/history_check.py``). A missing architecture is looked up as a GPU box's registry would
    hold it: its module imported (on the CPU where it must be), its ``EntryClass`` kept; one that imports only
    from its source stays missing, as before."""

    def _importable(self, architecture: object) -> Any:
        if not isinstance(architecture, str):
            return None
        try:
            cls = model_classes.model_class([architecture])
        except (Exception, _NotLoaded):
            return None
        if cls is None or model_classes.FROM_SOURCE in vars(cls):
            return None
        dict.__setitem__(self, architecture, cls)
        return cls

    def __missing__(self, architecture: object) -> Any:
        cls = self._importable(architecture)
        if cls is None:
            raise KeyError(architecture)
        return cls

    def __contains__(self, architecture: object) -> bool:
        return dict.__contains__(self, architecture) or self._importable(architecture) is not None

    def get(self, architecture: object, default: Any = None) -> Any:
        return self[architecture] if architecture in self else default  # noqa: SIM401 - self.get is this method


_REGISTRY_MODULE = "sglang.srt.models.registry"


def _importing_registry(module: Any) -> None:
    """``module``'s ``ModelRegistry.models`` made to answer as :class:`_ImportingModels` says."""
    registry: Any = getattr(module, "ModelRegistry", None)
    models = getattr(registry, "models", None)
    if isinstance(models, dict) and not isinstance(models, _ImportingModels):
        registry.models = _ImportingModels(models)


class _RegistryImported(importlib.abc.MetaPathFinder):
    """Wraps SGLang's model registry the moment its module has been executed (whichever stage imports it first), so
    no stage consults the registry as its first import left it; the import itself is not moved (it costs seconds:
    every model module)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _REGISTRY_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            _importing_registry(module)

        loader.exec_module = exec_module
        return spec


def _registry_importing() -> None:
    """SGLang's model registry answering as :class:`_ImportingModels` says: wrapped now where it is imported, else
    as soon as its module runs (:class:`_RegistryImported`); once per worker."""
    module = sys.modules.get(_REGISTRY_MODULE)
    if module is not None:
        _importing_registry(module)
    elif not any(isinstance(finder, _RegistryImported) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegistryImported())


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


def _no_fused_kernel(_original: Callable[..., Any], *_args: Any, **_kwargs: Any) -> None:
    """A layer's fused-kernel choice, declined: SGLang's own answer where the kernel is not used (None)."""
    return None


def _kv_copy_up_to_the_device(original: Callable[..., Any], pool: Any) -> None:
    """The KV pool's copy-kernel set-up, SGLang's own, up to its first device value, then declined as SGLang's own
    NPU pool declines it (``MHATokenToKVPool._init_kv_copy_and_warmup`` there: ``self._kv_copy_config = None``).
    Its checks before that run (0.5.22+: ``assert buf.is_contiguous()`` on the pool's buffers, a property of
    their layout, which ``meta`` keeps) and refuse in SGLang's words; the tiling read back from the device and
    the warm-up launch after it are what is declined: only a read of a device value or a device call ends it
    quietly (every release 0.5.3.post1 … 0.5.23 stops at ``self.data_strides[0].item()``)."""
    try:
        original(pool)
    except Exception as exc:
        if not (meta_device.reads_a_value(exc) or _device_step(exc)):
            raise  # SGLang's own refusal (0.5.22+'s assert), or anything else: not declined silently
        pool._kv_copy_config = None


#: Device work on the way to the sizes that sizes nothing: (module, class, method, what runs instead, called with
#: SGLang's own method first).
#:
#: * a layer's choice of a fused kernel, made while the model is built (0.5.23's ``DualGemm._select_mode``): on a
#:   GPU install it imports the kernel's GPU libraries (CuTe DSL, ``cuda.bindings``), which this machine lacks; it
#:   sizes no tensor (a dispatch at run time), so it is declined, as a box without the kernel declines it;
#: * the KV pool's copy kernel for speculative decoding (``_init_kv_copy_and_warmup``: a tiling chosen from the
#:   buffers' strides read back from the device, then a kernel launch): every speculative configuration on an MHA
#:   pool meets it while the pools are built (0.5.3.post1+); it sizes nothing, and SGLang's NPU pool declines it.
_KERNEL_CHOICES: tuple[tuple[str, str, str, Callable[..., None]], ...] = (
    ("sglang.srt.layers.dual_gemm", "DualGemm", "_select_mode", _no_fused_kernel),
    ("sglang.srt.mem_cache.memory_pool", "MHATokenToKVPool", "_init_kv_copy_and_warmup", _kv_copy_up_to_the_device))


def _instead_of(instead: Callable[..., None], original: Any) -> Callable[..., None]:
    """A method that calls ``instead(original, *args)`` (``args`` with the instance first, as a method gets them)."""

    def method(*args: Any, **kwargs: Any) -> None:
        return instead(original, *args, **kwargs)

    return method


@contextlib.contextmanager
def _kernel_choices_declined() -> Iterator[None]:
    """Each of :data:`_KERNEL_CHOICES` the release has runs its stand-in while it lasts."""
    with contextlib.ExitStack() as stack:
        for module_name, class_name, method, instead in _KERNEL_CHOICES:
            owner = _attribute((module_name,), class_name)  # imported now if need be: a model's import of it comes later
            if isinstance(owner, type) and method in vars(owner):
                stack.enter_context(_replaced(owner, method, _instead_of(instead, vars(owner)[method])))
        yield


#: SGLang modules whose import failed on GPU code once: the evaluator then imports each on the CPU
#: (GPU hidden, as at start-up) and evaluates again; a second failure is a stop, not a retry.
_IMPORTS_RETRIED: set[str] = set()


def _import_retried_first(exc: BaseException) -> bool:
    """True the first time a module-level import of SGLang's fails on GPU code: raise it, so the evaluator
    imports that module on the CPU and evaluates again (as for every lazy import of SGLang's)."""
    if not isinstance(exc, ImportError):
        return False
    modules = [f.filename for f in traceback.extract_tb(exc.__traceback__)
               if f.name == "<module>" and "/sglang/" in f.filename.replace(os.sep, "/")]
    if not modules or modules[0] in _IMPORTS_RETRIED:
        return False
    _IMPORTS_RETRIED.add(modules[0])
    return True


_UNWRITTEN = re.compile(r"has not been written|not published|not been built|is not initialized", re.I)
#: SGLang's modules that hold what ``init_torch_distributed`` builds (the parallel groups).
_DEVICE_STATE_FILES = ("runtime_context.py", "parallel_state.py")


def _unwritten_context(exc: BaseException) -> str | None:
    """A read of process state the device steps would have built (the parallel groups
    ``init_torch_distributed`` creates), refused by SGLang's module that holds it; or None."""
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        if frames and os.path.basename(frames[-1].filename) in _DEVICE_STATE_FILES and _UNWRITTEN.search(str(link)):
            return f"reads what the device steps build ({str(link)[:160]})"
    return None


def _set_in_a_later_step(exc: BaseException, progress: Progress) -> str | None:
    """A read of an attribute that an object this module built by hand (the target's runner) lacks only
    because SGLang sets it in a step not run here (``init_memory_pool``'s ``token_to_kv_pool``, after the
    weights): the stage stops there, naming that step; or None."""
    for link in _chain(exc):
        owner, name = getattr(link, "obj", None), getattr(link, "name", None)
        if not isinstance(link, AttributeError) or owner is None or not name or id(owner) not in progress.built:
            continue
        owner_type: type = type(owner)
        method = model_classes.assigning_method(owner_type, str(name))
        if method is not None:
            return f"reads {owner_type.__name__}.{name}, which {method}() sets on a real box: not run here"
    return None


#: A read of what only a loaded server has (the target's memory pool, its model): ends a stage.
_NotLoaded = NotLoaded = model_classes.NotLoaded


class WillNotStart(Exception):
    """The configuration cannot start on the box, by what SGLang itself built on ``meta``: its weights outgrow a
    GPU's memory (``cause="weights"``), or its parallel layout needs more GPUs than the box has
    (``cause="gpus"``). A verdict of its own ("will not start"), never one of SGLang's checks: a real launch
    ends in torch's ``CUDA out of memory`` or an invalid device ordinal, after minutes of loading.

    ``needed``/``available``: bytes per GPU (weights) or GPUs (gpus)."""

    def __init__(self, cause: str, words: str, *, needed: float, available: float, **figures: Any) -> None:
        super().__init__(words)
        self.cause = cause
        self.words = words
        self.figures = {"cause": cause, "needed": needed, "available": available, **figures}


def gpus_needed(view: Any) -> int:
    """GPUs one node gives the launch: ``tp × pp`` ranks per node (times ``dp`` without DP attention, whose replicas
    each hold their own), placed from ``--base-gpu-id`` every ``--gpu-id-step`` as SGLang's scheduler places them
    (``gpu_id = base_gpu_id + rank * gpu_id_step``): the highest GPU id used, plus one."""
    nnodes = max(int(getattr(view, "nnodes", 1) or 1), 1)
    ranks = int(getattr(view, "tp_size", 1) or 1) * int(getattr(view, "pp_size", 1) or 1)
    if not getattr(view, "enable_dp_attention", False):
        ranks *= int(getattr(view, "dp_size", 1) or 1)
    per_node = max(ranks // nnodes, 1)
    base = int(getattr(view, "base_gpu_id", 0) or 0)
    step = int(getattr(view, "gpu_id_step", 1) or 1)
    return base + (per_node - 1) * step + 1


def _gpus_checked(args: Any) -> None:
    """The box has the GPUs the parallel layout places its ranks on (:func:`gpus_needed`), else it will not start."""
    import torch

    view = _view(args)
    have = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    need = gpus_needed(view)
    if have and need > have:
        layout = ", ".join(f"{name} {getattr(view, name, 1)}" for name in ("tp_size", "pp_size", "dp_size", "nnodes")
                           if int(getattr(view, name, 1) or 1) > 1)
        raise WillNotStart("gpus", f"the parallel layout ({layout}) places ranks on {need} GPUs per node; the box has "
                           f"{have}: a real launch cannot set the device of the ranks past GPU {have - 1}",
                           needed=need, available=have)


class _DraftRunnerReached(BaseException):
    """The draft worker builds its draft model worker: the draft's weights load next."""


class _Unloaded:
    """Something of the loaded target the draft worker is handed (a memory pool): any use of it ends the stage."""

    def __init__(self, what: str) -> None:
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name: str) -> Any:
        raise _NotLoaded(f"reads {self._what}.{name} (only a loaded server has it)")

    def __setattr__(self, name: str, value: Any) -> None:
        raise _NotLoaded(f"writes {self._what}.{name} (only a loaded server has it)")

    def __bool__(self) -> bool:
        raise _NotLoaded(f"asks whether {self._what} is set (only a loaded server has it)")


class _LoadedTarget:
    """The scheduler's target ``TpModelWorker`` as the draft worker meets it: its model config and
    its runner (built up to the first device step) are real; anything else only a loaded server has."""

    def __init__(self, runner: Any, model_config: Any, args: Any) -> None:
        self.model_runner = _BuiltRunner(runner)
        self.model_config = model_config
        # TpModelWorker's seed: rank 0's own, which the broadcast hands every rank
        seed = getattr(_view(args), "random_seed", None)
        if seed is not None:
            self.random_seed = seed

    def get_memory_pool(self) -> tuple[Any, Any]:
        return _Unloaded("the target's request-to-token pool"), _Unloaded("the target's KV-cache allocator")

    def __getattr__(self, name: str) -> Any:
        raise _NotLoaded(f"reads the loaded target worker's {name}")


class _BuiltRunner:
    """The target runner as far as it was built; what its weights and memory pool would add ends the stage."""

    def __init__(self, runner: Any) -> None:
        object.__setattr__(self, "_runner", runner)

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._runner, name)
        except AttributeError:
            raise _NotLoaded(f"reads the loaded target runner's {name}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._runner, name, value)


#: Modules whose classes the draft workers write class attributes of (``EagleDraftInput.ALLOC_LEN_PER_DECODE``).
_SPECULATIVE_PACKAGE = "sglang.srt.speculative."


_SIMPLE = (int, float, str, bool, type(None), tuple, frozenset)
_CLASSES: dict[str, Any] = {"modules": -1, "classes": []}


def _speculative_classes() -> list[type]:
    """SGLang's speculative classes (found again only when modules were imported since the last call)."""
    if _CLASSES["modules"] != len(sys.modules):
        classes = []
        for name in [n for n in sys.modules if n.startswith(_SPECULATIVE_PACKAGE)]:
            module = sys.modules.get(name)
            classes += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name] \
                if module is not None else []
        _CLASSES.update(modules=len(sys.modules), classes=classes)
    found: list[type] = _CLASSES["classes"]
    return found


@contextlib.contextmanager
def _speculative_classes_kept() -> Iterator[None]:
    """The plain class attributes (numbers, strings, tuples) of SGLang's speculative classes, put back."""
    saved = [(klass, {k: v for k, v in vars(klass).items() if isinstance(v, _SIMPLE) and not k.startswith("__")})
             for klass in _speculative_classes()]
    try:
        yield
    finally:
        for klass, attributes in saved:
            for key, value in attributes.items():
                if vars(klass).get(key, value) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(klass, key, value)


def _draft_worker(args: Any, target: Any, runner: Any, progress: Progress) -> None:
    """The draft worker the scheduler builds once the target is up (``maybe_init_draft_worker``).

    SGLang's own choice of its class (``SpeculativeAlgorithm.create_worker``, 0.5.8+: it refuses, say,
    DFLASH with overlap scheduling), then, for the algorithms whose worker builds a draft model (EAGLE,
    EAGLE3, NEXTN, STANDALONE; the others' classes are chosen, not built), the class's own constructor,
    through the draft's model worker (its model config) to the draft's ``ModelRunner``, built by SGLang's
    own ``__init__`` up to its first device step, then the draft runner's own attention-backend choice
    (sglang#23490: a draft that inherits an MLA-only backend); the draft's weights load next. The target worker it is handed
    has the target's model config and runner; a read of anything only a loaded server has (the memory
    pool, the model) ends the stage, recorded in ``needs_gpu`` with what was read. Releases without
    ``create_worker`` build the worker inline in the scheduler: the stage does not run there.
    """
    algorithm = getattr(_view(args), "speculative_algorithm", None)
    speculative_algorithm = _attribute(("sglang.srt.speculative.spec_info",), "SpeculativeAlgorithm")
    if not algorithm or speculative_algorithm is None:
        return
    spec = speculative_algorithm.from_string(algorithm)
    create = getattr(spec, "create_worker", None)
    if create is None or (callable(getattr(spec, "is_none", None)) and spec.is_none()):
        return
    progress.enter("draft_worker")
    worker_cls = create(args)
    if worker_cls is None:
        return
    progress.held["worker_cls"] = worker_cls
    progress.draft_worker = getattr(worker_cls, "__name__", str(worker_cls))
    if str(algorithm).upper() not in _DRAFT_MODEL_ALGORITHMS:
        return  # NGRAM builds its corpus (native code) and DFLASH-like workers their own kernels: not run
    runner_cls: Any = type(runner).__mro__[1]
    real_init = runner_cls.__init__

    def stop(*_args: Any, **_kwargs: Any) -> None:
        raise _DeviceReached

    def draft_runner(draft: Any, *init_args: Any, **init_kwargs: Any) -> None:
        # the draft's model worker builds its runner: SGLang's own __init__ up to the device, then the
        # draft's own backend choice; its weights load next
        progress.built[id(draft)] = "the draft's ModelRunner built up to its first device step"
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
    with _speculative_classes_kept(), _replaced(runner_cls, "init_torch_distributed", stop), \
            _replaced(runner_cls, "__init__", draft_runner):
        try:
            _call(worker_cls, **kwargs)
        except _DraftRunnerReached:
            return


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
    progress.enter("target_model")
    architectures = _target_architectures(progress, runner.model_config)
    cls = model_classes.model_class(architectures)
    if cls is None:
        progress.needs_gpu["target_model"] = ("no module of sglang.srt.models defines "
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


#: Bytes in a GiB, as SGLang's ``get_available_gpu_memory`` counts them.
_GIB = 1 << 30


def _memory_pool(args: Any, target: Any, runner: Any, progress: Progress) -> None:
    """The target's memory pool, sized by SGLang's own runner code against the simulated box's memory, where the
    runner sizes it in the method that loads the weights (0.4.6 … 0.5.13: :func:`model_classes.memory_pool_statements`).

    SGLang's statements of ``initialize`` from ``self.load_model()`` to ``self.init_memory_pool(...)`` run as
    written on the runner, with these stood in for:

    * the weights: ``--load-format dummy``, SGLang's own dummy loader, builds the class on ``meta`` (real shapes
      and dtypes, no storage). Its random values are not drawn. The model's ``post_load_weights`` is not run (it
      derives tensors from the weights' values: DeepSeek's absorbed MLA matrices, FP8 requantisation; minutes of
      decomposed arithmetic on ``meta``); it only adds bytes. A quantisation method's post-load processing that
      reads values is skipped and named (:func:`_with_tolerant_processing`). The barrier after the load returns;
    * the registry's answer: the class :mod:`model_classes` found, as the draft build does;
    * the device's free memory: ``get_available_gpu_memory`` answers the simulated GPU's whole memory less the
      bytes of the built model's tensors, and ``initialize``'s ``min_per_gpu_memory`` is the whole memory.

    A failure of the load is SGLang's verdict only where the model class or ``load_model`` itself refuses
    (:func:`_loaded_on_meta`); else the stage stops, named. Sound in one direction only: a real box has less
    free memory (the CUDA context, communication buffers, what ``post_load_weights`` adds), so what the
    simulation leaves for the KV cache is an upper bound, and SGLang's "Not enough memory" here means not enough
    there. A pool sized here is not a promise; the outcome records the figures (``memory_pool``). Where SGLang
    sized it (also where building the pools stopped after the sizing, at a value only the device holds), two
    stages read the sizes as a launch does next: the CUDA graphs' batch sizes (:func:`_capture_sizes`) and the
    target worker's check on its runner (:func:`_requests_refusal`). The runner's
    own attributes are put back afterwards, so the stages after it see the runner they saw before; what the
    sizing wrote into the server arguments (the draft's cache size) stays, as on a real box.
    """
    runner_cls: Any = type(runner).__mro__[1]
    statements = model_classes.memory_pool_statements(runner_cls)
    if statements is None:
        return
    progress.enter("memory_pool")
    architectures = _target_architectures(progress, target)
    cls = model_classes.model_class(architectures)
    view = _view(args)
    unsimulated = _unsimulated_memory(view)
    if unsimulated is not None:
        progress.needs_gpu["memory_pool"] = unsimulated
        return
    if cls is None or model_classes.FROM_SOURCE in vars(cls):
        what = "does not import here" if cls is not None else "defines none of them"
        progress.needs_gpu["memory_pool"] = (f"building {', '.join(architectures) or 'the target'} on meta: its "
                                             f"module of sglang.srt.models {what}")
        return
    import torch

    total = int(torch.cuda.get_device_properties(getattr(runner, "gpu_id", 0) or 0).total_memory)

    def available(*_args: Any, **_kwargs: Any) -> float:  # the simulated GPU's free memory, in GiB, now
        return (total - _device_bytes(vars(runner).get("model"))) / _GIB

    apart = model_classes.pools_sized_apart(runner_cls)
    if apart:  # what the device step sets that the sizing reads: the memory free before the load, the groups
        vars(runner).setdefault("pre_model_load_memory", total / _GIB)
        device_step = model_classes.device_step_assignments(runner_cls)
        if device_step is not None:  # from the parallel state, whose groups are stood in for (:func:`_groups_built`)
            model_classes.run(device_step, self=runner)
        _groups_on_runner(runner, runner_cls)
        vars(runner).setdefault("forward_stream", _Unloaded("the runner's forward stream (a CUDA stream)"))
    loader = sys.modules.get("sglang.srt.model_loader.loader")
    served = (lambda *_args, **_kwargs: (cls, cls.__name__))  # noqa: E731 - the registry's answer
    saved = dict(vars(runner))
    skipped: list[tuple[str, bool]] = []  # quantisation methods whose post-load processing read values (not run)
    post_load: list[str] = []  # the model's own post_load_weights, not run
    refusals: list[BaseException] = []  # the load's failures that are SGLang's verdict (:func:`_loaded_on_meta`)
    runner.load_model = functools.partial(_loaded_on_meta, runner, runner_cls, cls, refusals, total,
                                          _platform_flags_of_the_box(torch))
    verdict = True
    try:
        with contextlib.ExitStack() as stack:
            for module in [m for name, m in list(sys.modules.items()) if m is not None and name.startswith(
                    ("sglang.srt.model_executor", "sglang.srt.mem_cache"))]:
                stack.enter_context(_replaced(module, "get_available_gpu_memory", available))
            stack.enter_context(_replaced(loader, "get_model_architecture", served))
            stack.enter_context(_replaced(loader, "initialize_dummy_weights", _no_values))
            for name in ("post_load_weights", "_post_load_weights"):  # the loader's call of the model's own (0.5.12+: _)
                stack.enter_context(_replaced(loader, name, functools.partial(_post_load_not_run, post_load)))
            initialize = getattr(loader, "_initialize_model", None)
            if initialize is not None:
                stack.enter_context(_replaced(loader, "_initialize_model",
                                              functools.partial(_with_tolerant_processing, initialize, skipped)))
            derived: list[Any] = []  # the pool sizes SGLang derived (0.5.16+'s KVCacheConfigurator), as they come
            stack.enter_context(_derived_sizes_kept(derived))
            for barrier in ("barrier", "monitored_barrier"):  # every simulated rank finishes its load
                stack.enter_context(_replaced(torch.distributed, barrier, _no_values))
            stack.enter_context(_replaced(_batch_invariant_ops(view), "enable_batch_invariant_mode", _no_values))
            if not getattr(view, "torchao_config", None):  # SGLang's answer without one, past its import
                stack.enter_context(_replaced(sys.modules.get(runner_cls.__module__), "apply_torchao_config_to_model",
                                              _model_unchanged))
            stack.enter_context(_dummy_load_format(args))
            stack.enter_context(_process_state_kept(torch))
            stack.enter_context(version_shims.import_window(["vllm._custom_ops"]))
            failure: Exception | None = None
            try:
                model_classes.run(statements, self=runner, **{p: total / _GIB for p in statements.parameters})
                if apart:  # what the target worker's alloc_memory_pool asks its runner, after the draft's load
                    runner_cls.alloc_memory_pool(runner)
            except _NotLoaded:
                verdict = False  # a stop: nothing SGLang sized is recorded
                raise
            except Exception as exc:
                if any(link is exc for link in refusals):
                    raise
                failure = exc
            unsized = sorted({name for name, neutral in skipped if not neutral})
            in_sizing = failure is not None and not unsized and _sized_by_sglang(failure, statements)
            device = (_device_step(failure) or _meta_value(failure)) if failure is not None else None
            if failure is not None and not (in_sizing and device):
                # SGLang's refusal or crash on the way (not its sizing's, on bytes not known to be its own)
                if in_sizing or (sglang_verdict(failure) and not (unsized and _sized_by_sglang(failure, statements))):
                    raise failure  # SGLang's own refusal in the sizing ("Not enough memory"), or on the way to it
                verdict = False
                if unsized:  # the weights' bytes are not the ones SGLang would have counted: not a verdict
                    raise _NotLoaded(f"sizing with the post-load processing of {', '.join(unsized)} not run (it "
                                     "reads the weights' values)") from None
                raise _NotLoaded(f"the statements after the load stopped at {_stop_words(failure)}") from None
            if device:  # building the pools stopped past the sizing, at what only the device holds: a GPU goes on
                progress.needs_gpu["memory_pool"] = device
                _sizes_on_runner(runner, derived)
            elif unsized:  # sized, but on weights whose post-load processing did not run: figures, not a check
                progress.needs_gpu["memory_pool"] = (f"sized without the post-load processing of {', '.join(unsized)} "
                                                     "(it reads the weights' values or builds GPU kernels), which can "
                                                     "change the weights' bytes")
            if not unsized:  # what SGLang sized, as the steps after the pool read it on the way to serving
                refusal = (_requests_refusal(runner, progress, refusals)
                           or _decode_graph_sizes(runner, runner_cls, progress, refusals)) if apart else (
                    _capture_sizes(runner, runner_cls, progress, refusals)
                    or _requests_refusal(runner, progress, refusals))
                if refusal is not None:
                    raise refusal
    finally:  # what SGLang sized, also where building the pools stopped after the sizing (a warm-up on the device)
        sized = vars(runner).get("max_total_num_tokens")  # unset where SGLang refused before it (0.5.10+)
        if vars(runner).get("model") is not None and verdict:
            progress.memory_pool = {"total_bytes": total, "weights_bytes": _device_bytes(vars(runner).get("model")),
                                    "mem_fraction_static": getattr(runner, "mem_fraction_static", None),
                                    "max_total_num_tokens": sized if isinstance(sized, int) else None,
                                    "request_slots": _request_slots(runner, args)}
            running = vars(runner).get("max_running_requests")  # SGLang's own figure, where it set one
            if isinstance(running, int) and not isinstance(running, bool):
                progress.memory_pool["max_running_requests"] = running
            if skipped or post_load:
                progress.memory_pool["processing_skipped"] = sorted({name for name, _ in skipped} | set(post_load))
        vars(runner).clear()
        vars(runner).update(saved)


@contextlib.contextmanager
def _derived_sizes_kept(derived: list[Any]) -> Iterator[None]:
    """Each pool sizing SGLang derives while it lasts, appended to ``derived``: 0.5.16+'s
    ``KVCacheConfigurator._derive_pool_sizes``, whose result the runner takes only once every pool is built
    (:func:`_sizes_on_runner`)."""
    configurator = _attribute(("sglang.srt.mem_cache.kv_cache_configurator",), "KVCacheConfigurator")
    derive = vars(configurator).get("_derive_pool_sizes") if isinstance(configurator, type) else None
    if derive is None:
        yield
        return

    def kept(self: Any, *args: Any, **kwargs: Any) -> Any:
        sizes = derive(self, *args, **kwargs)
        derived.append(sizes)
        return sizes

    with _replaced(configurator, "_derive_pool_sizes", kept):
        yield


#: What the runner's ``alloc_memory_pool`` takes from the configurator's sizes once the pools are built (0.5.16+).
_SIZES_TAKEN = ("max_total_num_tokens", "max_running_requests")


def _sizes_on_runner(runner: Any, derived: list[Any]) -> None:
    """Where building the pools stopped at a device value after SGLang derived their sizes (0.5.16+), the runner's
    figures as ``alloc_memory_pool`` takes them from the sizes (:data:`_SIZES_TAKEN`): the steps after it read
    them on a GPU, which goes on."""
    if not derived:
        return
    for name in _SIZES_TAKEN:
        value = getattr(derived[-1], name, None)
        if name not in vars(runner) and isinstance(value, int) and not isinstance(value, bool):
            setattr(runner, name, value)


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


class _CaptureReached(BaseException):
    """Ends the target runner's ``init_device_graphs`` once its graph runner chose the batch sizes it captures
    (the capture runs the model on the device)."""

    def __init__(self, sizes: dict[str, Any]) -> None:
        super().__init__("the CUDA-graph capture")
        self.sizes = sizes


def _capture_sizes(runner: Any, runner_cls: Any, progress: Progress,
                   refusals: list[BaseException]) -> BaseException | None:
    """The batch sizes the target's CUDA-graph runner captures, chosen by SGLang's own code on the runner whose
    pool it sized (stage ``cuda_graph_sizes``; 0.4.6 … 0.5.13, where the runner sizes its pool itself).

    The runner's own ``init_device_graphs`` runs (SGLang decides whether graphs are captured: not with
    ``--disable-cuda-graph``); its graph runner's ``__init__`` runs from the start to the statement that calls
    ``get_batch_sizes_to_capture`` (:func:`model_classes.capture_sizes_statements`): the tokens per request a
    speculative target captures (``--speculative-num-draft-tokens``), then the sizes kept against the request
    pool and, with gathered buffers, the attention-TP width (``bs * num_tokens_per_bs % mul_base == 0``). Its
    ``assert len(capture_bs) > 0 and capture_bs[0] > 0, f"{capture_bs=}"`` is then SGLang's verdict (a public
    benchmark script records ``capture_bs=[]`` at tp 8 with EP, MTP's six tokens and ``--cuda-graph-max-bs 1``).
    The capture itself is never run; the attention backends' construction and the kernel warm-up before it on a
    real box are not run either (they size nothing this reads). The sizes are recorded (``cuda_graphs``). Any
    other failure on the way stops the stage, named. Returns the refusal (also in ``refusals``), or None."""
    module = sys.modules.get(runner_cls.__module__)
    graph_cls = vars(module).get("CudaGraphRunner") if module is not None else None
    statements = model_classes.capture_sizes_statements(graph_cls) if isinstance(graph_cls, type) else None
    init_graphs = getattr(runner_cls, "init_device_graphs", None)
    if graph_cls is None or statements is None or init_graphs is None or _request_pool_size(runner) is None:
        return None
    progress.enter("cuda_graph_sizes")
    defaults = {name: parameter.default for name, parameter in inspect.signature(graph_cls.__init__).parameters.items()
                if parameter.default is not inspect.Parameter.empty}

    def sized(model_runner: Any, *_args: Any, **_kwargs: Any) -> None:
        graph_runner = _Shell("the CUDA-graph runner")
        names = {name: defaults.get(name) for name in statements.parameters}
        names[statements.parameters[0]] = model_runner
        model_classes.run(statements, self=graph_runner, **names)
        chosen = vars(graph_runner)
        raise _CaptureReached({"capture_bs": [int(b) for b in chosen.get("capture_bs") or []],
                               "num_tokens_per_bs": chosen.get("num_tokens_per_bs")})

    if "attn_backend" not in vars(runner):  # built after the pool on a real box; kept, not read, by the sizes
        runner.attn_backend = _Unloaded("the target's attention backend (built after the pool, not here)")
    steps = model_classes.steps_before_graphs(runner_cls)
    run_steps: set[str] = set()
    while True:
        try:
            with _replaced(module, "CudaGraphRunner", sized):
                init_graphs(runner)
        except _CaptureReached as reached:
            progress.cuda_graphs = reached.sizes
            return None
        except Exception as exc:
            if _refused_in(exc, statements.filename):
                refusals.append(exc)
                return exc
            step = _step_that_sets(exc, runner, runner_cls, steps - run_steps)
            if step is None:
                raise _NotLoaded(f"the CUDA-graph runner's batch sizes stopped at {_stop_words(exc)}") from None
        else:
            progress.cuda_graphs = {"disabled": True}  # SGLang's init_device_graphs built no graph runner
            return None
        run_steps.add(step)
        try:  # the runner's own step before the graphs, which sets what they read (0.5.12: use_ngram_embedding)
            getattr(runner_cls, step)(runner)
        except Exception as exc:
            raise _NotLoaded(f"the runner's {step}, before its CUDA graphs, stopped at {_stop_words(exc)}") from None


#: Where 0.5.14+ choose the batch sizes of the target's decode graphs, once its pools and backends are built:
#: ``(module, function)``, the runner's own method where ``module`` is None. Every release 0.5.14 … 0.5.23 has the
#: runner's ``init_decode_cuda_graph`` (0.5.16+: a wrapper of ``cuda_graph_setup.capture_decode_graph``, the second
#: entry, for a release that drops the wrapper). It decides first whether graphs are captured (the decode phase's
#: backend, a generation model, a PD-prefill speculative target), then calls ``get_batch_sizes_to_capture`` itself
#: (up to 0.5.21) or builds the graph runner whose ``__init__`` does (0.5.22+).
_DECODE_GRAPH_ENTRIES: tuple[tuple[str | None, str], ...] = (
    (None, "init_decode_cuda_graph"),
    ("sglang.srt.model_executor.model_runner_components.cuda_graph_setup", "capture_decode_graph"))
#: The module that defines ``get_batch_sizes_to_capture`` on 0.5.14+, the one that builds the decode graphs, and
#: the one whose shared logits buffer (0.5.15+) is sized for the graphs first.
_GRAPH_SIZES_MODULE = "sglang.srt.model_executor.runner.base_cuda_graph_runner"
_DECODE_GRAPH_MODULE = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"
_SHARED_OUTPUT_MODULE = "sglang.srt.model_executor.graph_shared_output"


def _decode_graph_sizes(runner: Any, runner_cls: Any, progress: Progress,
                        refusals: list[BaseException]) -> BaseException | None:
    """The batch sizes of the target's decode graphs on 0.5.14+ (stage ``cuda_graph_sizes``), chosen by SGLang's
    own code on the runner whose pool it sized, as :func:`_capture_sizes` does up to 0.5.13.

    First, as ``init_cuda_graphs`` does before any graph (0.5.15+), SGLang's ``GraphSharedOutput
    .create_for_model_runner`` sizes the logits buffer every graph shares: for each draft-token width the decode
    graphs can verify (0.5.23: the adaptive widths too) it calls ``get_batch_sizes_to_capture`` on the runner;
    the rows it sizes are recorded (``shared_logits_rows``), and its class-wide buffer is put back afterwards.
    Then the release's entry (:data:`_DECODE_GRAPH_ENTRIES`) runs as written: it decides whether graphs are
    captured, and the tokens per request a speculative target verifies; SGLang's ``get_batch_sizes_to_capture``
    runs itself, keeping the sizes the request pool and the attention-TP alignment allow, and returns into a stop
    of ours (:class:`_CaptureReached`, put in place of the name in every module holding it), so the capture,
    which runs the model on the device, never starts. Its ``assert len(capture_bs) > 0 and capture_bs[0] > 0,
    f"{capture_bs=}"``, from either caller, is SGLang's verdict. The attention backends are not built here
    (their choice ran in ``attention_backend``): the runner holds a stand-in answering only the plain values
    ``AttentionBackend`` itself defines (:class:`_BackendDefaults`). Any other failure on the way stops the stage,
    named. Returns the refusal (also in ``refusals``), or None."""
    sizes_module = _imported(_GRAPH_SIZES_MODULE)
    original = vars(sizes_module).get("get_batch_sizes_to_capture") if sizes_module is not None else None
    entry: Any = None
    for module_name, name in _DECODE_GRAPH_ENTRIES:
        owner = runner_cls if module_name is None else _imported(module_name)
        entry = vars(owner).get(name) if owner is not None else None
        if entry is not None:
            break
    if original is None or entry is None or _request_pool_size(runner) is None:
        return None
    progress.enter("cuda_graph_sizes")
    _imported(_DECODE_GRAPH_MODULE)  # imported before the name is replaced in every module holding it
    shared_cls = _attribute((_SHARED_OUTPUT_MODULE,), "GraphSharedOutput")
    create = vars(shared_cls).get("create_for_model_runner") if isinstance(shared_cls, type) else None

    def sized(model_runner: Any, *args: Any, **kwargs: Any) -> Any:
        capture_bs, *_ = original(model_runner, *args, **kwargs)
        width = args[0] if args else kwargs.get("captured_req_width", kwargs.get("num_tokens_per_bs", 1))
        raise _CaptureReached({"capture_bs": [int(b) for b in capture_bs], "num_tokens_per_bs": width})

    shared_rows: int | None = None
    try:
        with contextlib.ExitStack() as stack:
            if "attn_backend" not in vars(runner):
                stack.enter_context(_on_runner(runner, "attn_backend", _BackendDefaults()))
            if create is not None:  # SGLang's own sizing of the shared buffer, its process-wide one put back
                with _replaced(shared_cls, "_process_shared", None):
                    shared = shared_cls.create_for_model_runner(runner)
                rows = getattr(shared, "max_rows", None)
                shared_rows = rows if isinstance(rows, int) and not isinstance(rows, bool) else None
            holders = [m for name, m in list(sys.modules.items()) if name.startswith("sglang.") and m is not None
                       and vars(m).get("get_batch_sizes_to_capture") is original]  # also what the sizing imported
            for module in holders:
                stack.enter_context(_replaced(module, "get_batch_sizes_to_capture", sized))
            if module_name is None:
                entry(runner)
            else:
                entry(model_runner=runner)
    except _CaptureReached as reached:
        progress.cuda_graphs = reached.sizes
    except Exception as exc:
        if _refused_in(exc, inspect.getsourcefile(original) or ""):
            refusals.append(exc)
            return exc
        raise _NotLoaded(f"the decode graphs' batch sizes stopped at {_stop_words(exc)}") from None
    else:
        progress.cuda_graphs = {"disabled": True}  # SGLang decided no decode graph is captured
    if shared_rows is not None and not progress.cuda_graphs.get("disabled"):  # rows for graphs never captured: none
        progress.cuda_graphs = {**progress.cuda_graphs, "shared_logits_rows": shared_rows}
    return None


class _BackendDefaults:
    """The target's attention backend as the decode graphs' sizing reads it, not built here: the plain values every
    backend inherits from SGLang's ``AttentionBackend`` (0.5.23's ``dllm_attention = None``); not its methods or
    properties (a property such as ``verify_mask`` answers per backend); anything else only a built backend has."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):  # copy, pickle, hasattr of protocols: not the backend's
            raise AttributeError(name)
        base = _attribute(("sglang.srt.layers.attention.base_attn_backend",), "AttentionBackend")
        inherited = vars(base) if isinstance(base, type) else {}
        if name not in inherited or callable(inherited[name]) or hasattr(inherited[name], "__get__"):
            raise _NotLoaded(f"reads the target's attention backend's {name} (built on the device, not here)")
        return inherited[name]


@contextlib.contextmanager
def _on_runner(runner: Any, name: str, value: Any) -> Iterator[None]:
    """``runner.<name>`` is ``value`` while it lasts, then unset."""
    setattr(runner, name, value)
    try:
        yield
    finally:
        vars(runner).pop(name, None)


def _step_that_sets(exc: BaseException, runner: Any, runner_cls: Any, steps: set[str] | frozenset[str]) -> str | None:
    """The runner's own step before its CUDA graphs (:func:`model_classes.steps_before_graphs`, not yet run) that
    sets the runner attribute whose absence ``exc`` is, or None."""
    if not isinstance(exc, AttributeError) or getattr(exc, "obj", None) is not runner or not exc.name:
        return None
    owner = model_classes.assigning_method(runner_cls, exc.name)
    step = owner.rsplit(".", 1)[-1] if owner is not None else None
    return step if step in steps else None


def _requests_refusal(runner: Any, progress: Progress, refusals: list[BaseException]) -> BaseException | None:
    """The target worker's own check that the runner it built has room for a request (``TpModelWorker.__init__``:
    ``assert self.max_running_requests > 0, "max_running_request is zero"``), run on the runner once SGLang sized
    its pool: every launch passes it before it serves (:func:`model_classes.requests_check_statements`).

    What SGLang's sizing set is checked: ``--max-running-requests`` divided by the attention-DP width can leave
    none (1 // 8 = 0: a public benchmark script records the assert on eight schedulers with ``--dp 8
    --enable-dp-attention --max-running-requests 1``). Its refusal is SGLang's verdict, sound: a launch that
    gets past the runner meets it (stage ``target_worker``). Before it, in launch order, the CUDA graphs' batch
    sizes are chosen against the same request pool (:func:`_capture_sizes`: 0.5.10+ size that pool at zero too,
    and refuse there first, ``capture_bs=[0]``); the attention backends and the kernel warm-up between are not
    run here. Run where the runner's figure is set: 0.5.10+ in the sizing itself; up to 0.5.9 by the runner's
    own statements right after it (:func:`model_classes.running_requests_statements`), run here once the request
    pool exists, also where building the other pools stopped at a value only a GPU holds (a GPU builds them and
    goes on to those statements). The refusal is returned, and listed in ``refusals``; None where the check
    passes or is not run."""
    taken = model_classes.running_requests_statements(type(runner).__mro__[1])
    if taken is not None and _request_pool_size(runner) is not None:
        with contextlib.suppress(Exception, _NotLoaded):  # the runner's own statements after the sizing (0.4.6 … 0.5.9)
            model_classes.run(taken, self=runner)
    worker_cls = getattr(_imported("sglang.srt.managers.tp_worker"), "TpModelWorker", None)
    checks = model_classes.requests_check_statements(worker_cls) if isinstance(worker_cls, type) else None
    running = vars(runner).get("max_running_requests")
    if checks is None or not isinstance(running, int) or isinstance(running, bool):
        return None
    progress.enter("target_worker")
    unbuilt = len(checks.nodes) > 1 and vars(runner).get("req_to_token_pool") is None
    if unbuilt:  # 0.5.16+'s pools stopped before the runner took them: the checks after the first read them
        checks = model_classes.Statements(checks.filename, checks.function, checks.nodes[:1], checks.module,
                                          checks.owner)
    try:
        held = {name: vars(runner)[name] for name in ("model_config", "ps") if name in vars(runner)}  # the worker's too
        model_classes.run(checks, self=_Shell("the target worker", model_runner=runner, **held))
    except AssertionError as exc:
        if not _refused_in(exc, checks.filename):
            raise
        refusals.append(exc)
        return exc
    except Exception as exc:
        raise _NotLoaded(f"the target worker's checks stopped at {_stop_words(exc)}") from None
    if unbuilt:
        progress.needs_gpu["target_worker"] = ("its checks after the first read the request pool, which building the "
                                               "pools did not reach here (the memory pool's stop)")
    return None


def _imported(name: str) -> types.ModuleType | None:
    """SGLang's module ``name``, imported, not looked up (:func:`_attribute` answers None when an import fails): an
    ImportError of GPU code must reach the evaluator, which imports the module on the CPU and evaluates again,
    as for every lazy import of SGLang's, so the answer never depends on what an earlier evaluation imported.
    None where the release has no such module."""
    if name in sys.modules:
        return sys.modules[name]
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name)


def _refused_in(exc: BaseException, filename: str) -> bool:
    """Whether ``exc`` is a refusal (:func:`_refusing_statement`) by a statement of SGLang's file ``filename``."""
    last = _refusing_statement(exc)
    return last is not None and os.path.abspath(last.filename) == os.path.abspath(filename)


def _unsimulated_memory(view: Any) -> str | None:
    """What moves the weights' memory in a way the simulated box does not follow, named; None when nothing does.
    Another device than CUDA (``--device cpu``: the build would allocate every weight for real on this machine;
    Kimi-K2.6's is 600 GB). CPU offload: the offloader the device step would set (``set_offloader``, after
    ``init_torch_distributed``) is not set here, so every weight would count as on the GPU; a model implementation
    other than SGLang's own: the class built here is SGLang's."""
    device = str(getattr(view, "device", None) or "cuda").lower()
    if not device.startswith("cuda"):  # the model would be built for real, in this machine's memory
        return f"--device {device}: the pool is sized against that device's memory, not the simulated GPU's"
    if (getattr(view, "cpu_offload_gb", 0) or 0) > 0 or (getattr(view, "offload_group_size", -1) or -1) > 0:
        return "CPU offload (--cpu-offload-gb, --offload-group-size): the offloader the device step sets is not set here"
    impl = str(getattr(view, "model_impl", None) or "auto").lower()
    if impl not in ("auto", "sglang"):
        return f"--model-impl {impl}: the class built here is SGLang's own"
    return None


def _batch_invariant_ops(view: Any) -> types.ModuleType | None:
    """SGLang's batch-invariant kernels' module, where ``--enable-deterministic-inference`` has ``initialize`` switch
    them on: it replaces torch's own operators process-wide (kernel choice; it sizes nothing), so the switch is not
    run here. None where the flag is off or the module does not import."""
    if not getattr(view, "enable_deterministic_inference", False):
        return None
    try:
        return importlib.import_module("sglang.srt.batch_invariant_ops")
    except Exception:
        return None


#: Where SGLang sizes the pool (the functions a sizing failure is raised under).
_SIZING_FUNCTIONS = frozenset({"init_memory_pool", "profile_max_num_token", "handle_max_mamba_cache",
                               "_resolve_memory_pool_config", "_profile_available_bytes", "_init_pools"})


def _sized_by_sglang(exc: BaseException, statements: Any) -> bool:
    """True for SGLang's own refusal in the sizing: an unchained ``raise``/``assert`` (never an import) in the
    pool's sizing functions or their callees (``MemoryPoolConfig``), or in the statements of ``initialize`` run
    here ("PP is not compatible with MTP models."). What else fails between the load and the pool (a package this
    machine lacks: ``torch_memory_saver``, ``torchao``; a LoRA adapter's files) is not the box's answer."""
    last = _refusing_statement(exc)
    if last is None or isinstance(exc, ImportError):
        return False
    own = last.name == statements.function and os.path.abspath(last.filename) == os.path.abspath(statements.filename)
    return own or any(frame.name in _SIZING_FUNCTIONS for frame in traceback.extract_tb(exc.__traceback__))


def _stop_words(exc: BaseException) -> str:
    """``exc`` in a stop's words: SGLang's statement where one is named, else the exception and where it rose."""
    where = _device_step(exc) or _meta_value(exc)
    if where is None:
        frame = _sglang_frame(traceback.extract_tb(exc.__traceback__))
        where = f"{type(exc).__name__}: {str(exc)[:120]}" + (f" ({_where(frame)})" if frame is not None else "")
    return where


#: Module-level caches the build fills: a rotary module cached by its arguments is handed to the next build,
#: and the load grows its tables in place (``reserve_rope_cache_for_long_sequences``), so the next evaluation
#: would count another's bytes. Emptied for the stage and put back after it.
_BUILD_CACHES = (("sglang.srt.layers.rotary_embedding", "_ROPE_DICT"),
                 ("sglang.srt.layers.rotary_embedding.factory", "_ROPE_DICT"))


@contextlib.contextmanager
def _process_state_kept(torch: Any) -> Iterator[None]:
    """What the load writes process-wide, put back: the environment (``set_cuda_arch``), torch's thread count
    (``torch.set_num_threads(1)``), the build's caches (:data:`_BUILD_CACHES`)."""
    environment = dict(os.environ)
    threads = torch.get_num_threads()
    caches = [(cache, dict(cache)) for module_name, name in _BUILD_CACHES
              for cache in [getattr(sys.modules.get(module_name), name, None)] if isinstance(cache, dict)]
    for cache, _ in caches:
        cache.clear()
    try:
        yield
    finally:
        for name in set(os.environ) - set(environment):
            del os.environ[name]
        os.environ.update(environment)
        torch.set_num_threads(threads)
        for cache, contents in caches:
            cache.clear()
            cache.update(contents)


#: What a GPU takes before any weight: the CUDA context and the allocator's first blocks (about 0.5–1 GiB seen on
#: H100/H200). Weights within this of the whole memory may run out of memory while they load, on a real box.
_CONTEXT_BYTES = 2 << 30


def _model_unchanged(model: Any, *_args: Any, **_kwargs: Any) -> Any:
    """``apply_torchao_config_to_model`` without a torchao config: SGLang returns the model as it is (0.5.8 imports
    ``torchao`` first, a dependency a GPU install has and this machine lacks)."""
    return model


@contextlib.contextmanager
def _platform_flags_of_the_box_now(torch: Any) -> Iterator[None]:
    """SGLang modules' ``_is_cuda`` as the simulated box answers it (True) while it lasts, where the module holds
    False: a module imported on the CPU (the evaluator imports a module whose import needs GPU code with the GPU
    hidden, :data:`_IMPORTS_RETRIED`) computed its flag then, and a layer's own platform check reads it when the
    model is built (0.5.23's ``VisionFlash3Attention``: "only available for cuda or musa"; a GPU box builds it).
    What the module skipped at its import (a kernel imported under the flag) stays absent: a build that reaches it
    stops there, named. Put back afterwards."""
    flipped = []
    if torch.cuda.is_available() and torch.version.cuda is not None:
        flipped = [module for name, module in list(sys.modules.items())
                   if module is not None and name.startswith("sglang.") and vars(module).get("_is_cuda") is False]
    for module in flipped:
        vars(module)["_is_cuda"] = True
    try:
        yield
    finally:
        for module in flipped:
            vars(module)["_is_cuda"] = False


def _platform_flags_of_the_box(torch: Any) -> Callable[[], Any]:
    return functools.partial(_platform_flags_of_the_box_now, torch)


class _OverTheGpu(BaseException):
    """Ends a model's construction on ``meta`` once its registered tensors exceed the GPU's whole memory (a
    ``BaseException``: SGLang's ``except Exception`` around a layer does not swallow it)."""

    def __init__(self, built: int) -> None:
        super().__init__("the weights outgrew the GPU")
        self.built = built


@contextlib.contextmanager
def _construction_within(total: int) -> Iterator[None]:
    """While it lasts, every parameter and buffer a module registers on ``meta`` is counted (by module and name: a
    re-registration replaces), and the construction ends (:class:`_OverTheGpu`) as soon as they exceed ``total``,
    the GPU's whole memory: a real box allocates each as the model is built, and runs out of memory there
    (DeepSeek-V3 or Kimi-K2.6 at tp 1, 600+ GiB, on one GPU: the build stops after a sixth of its layers, not
    at its end). Over-counting (a tensor registered, then dropped) can only end a build early into a named stop,
    never a verdict; the check after the load counts what the model holds."""
    import torch.nn.modules.module as module_hooks

    held: dict[tuple[int, str], int] = {}
    built = 0

    def registered(module: Any, name: str, tensor: Any) -> None:
        nonlocal built
        size = tensor.numel() * tensor.element_size() if tensor is not None and tensor.device.type == "meta" else 0
        built += size - held.get((id(module), name), 0)
        held[(id(module), name)] = size
        if built > total:
            raise _OverTheGpu(built)

    handles = [module_hooks.register_module_parameter_registration_hook(registered),
               module_hooks.register_module_buffer_registration_hook(registered)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _loaded_on_meta(runner: Any, runner_cls: Any, cls: type, refusals: list[BaseException], total: int,
                    platform: Callable[[], Any] = contextlib.nullcontext) -> None:
    """SGLang's own ``load_model`` on the runner (the dummy loader, on ``meta``). A refusal of the model's own
    modules (:func:`_refused_by_the_model`) or of ``load_model``'s own ``raise``/``assert`` is SGLang's verdict; any
    other failure of the load (a layer's platform check: a vision tower's "only available for cuda" on this CPU
    build of torch; a value only real weights hold) ends the stage, never a verdict."""
    try:
        with platform(), _construction_within(total), _jit_kernels_on_meta():
            runner_cls.load_model(runner)
    except _OverTheGpu as over:
        oom = WillNotStart("weights", f"the weights built so far take {over.built / _GIB:.2f} GiB per GPU, more than "
                           f"its {total / _GIB:.2f} GiB: a real load runs out of device memory (CUDA out of memory) "
                           "while it builds the model, before SGLang sizes the pool",
                           needed=over.built, available=total, total=total, at_least=True)
        refusals.append(oom)
        raise oom from None
    except Exception as exc:
        last = _refusing_statement(exc)
        own = (last is not None and last.name == "load_model"
               and os.path.abspath(last.filename) == os.path.abspath(inspect.getfile(runner_cls)))
        if own or _refused_by_the_model(exc, cls) or sglang_verdict(exc):
            refusals.append(exc)
            raise
        raise _NotLoaded(f"loading {cls.__name__} on meta stopped at {_stop_words(exc)}") from None
    weights = _device_bytes(vars(runner).get("model"))
    if weights > total - _CONTEXT_BYTES:  # a real load runs out of device memory first, in torch's words, not SGLang's
        oom = WillNotStart("weights", f"the weights take {weights / _GIB:.2f} GiB per GPU of its {total / _GIB:.2f} "
                           f"GiB, more than it leaves after the CUDA context (about {_CONTEXT_BYTES / _GIB:.0f} GiB): "
                           "a real load runs out of device memory (CUDA out of memory) before SGLang sizes the pool",
                           needed=weights, available=total - _CONTEXT_BYTES, total=total, at_least=False)
        refusals.append(oom)
        raise oom


def _size_neutral(method: Any) -> bool:
    """Whether ``method``'s post-load processing changes no tensor's size: the KV-cache scales of a quantised
    checkpoint's attention layers, SGLang's ``BaseKVCacheMethod.process_weights_after_loading`` not overridden
    (it copies two scalars: ``quantization/kv_cache.py``, 0.4.6 … 0.5.13)."""
    base: Any = _attribute(("sglang.srt.layers.quantization.kv_cache",), "BaseKVCacheMethod")
    if not isinstance(base, type) or not isinstance(method, base):
        return False
    inherited: Any = base
    return getattr(type(method), "process_weights_after_loading", None) is inherited.process_weights_after_loading


def _with_tolerant_processing(initialize: Callable[..., Any], skipped: list[tuple[str, bool]], *args: Any,
                              **kwargs: Any) -> Any:
    """SGLang's ``_initialize_model``, with each quantization method's ``process_weights_after_loading`` on the
    built model allowed to read values it cannot on ``meta``: that module's processing is then not run, and its
    method's class is listed in ``skipped`` with whether it changes no size (:func:`_size_neutral`; the sizing
    after it is a verdict only where every such method is)."""
    model = initialize(*args, **kwargs)
    done: dict[Any, dict[str, Any] | None] = {}  # what each kind of layer's processing did, this load only
    for module in getattr(model, "modules", lambda: [])():
        method: Any = getattr(module, "quant_method", None)
        process = getattr(method, "process_weights_after_loading", None)
        if process is None or getattr(process, "_bisect_spec_tolerant", False):
            continue

        def tolerant(layer: Any, *more: Any, _process: Any = process, _method: Any = method,
                     _skip: tuple[str, bool] = (type(method).__name__, _size_neutral(method)), **options: Any) -> Any:
            key = _processing_key(_method, layer) if not more and not options else None
            effect = done.get(key) if key is not None else None
            if effect is not None:  # a layer like one processed already: the same shapes, set without the arithmetic
                _replay(effect, layer)
                return None
            before = _layer_tensors(layer) if key is not None else None
            objects = _objects(layer, _method)
            try:
                result = _process(layer, *more, **options)
            except Exception as exc:
                if _meta_value(exc) is None and _device_step(exc) is None:  # a value, or a kernel only a GPU has
                    raise
                skipped.append(_skip)
                return None
            if key is not None and before is not None and result is None and _objects(layer, _method) == objects:
                done[key] = _effect(before, layer)
            return result

        tolerant._bisect_spec_tolerant = True  # type: ignore[attr-defined]
        with contextlib.suppress(AttributeError, TypeError):
            method.process_weights_after_loading = tolerant
    return model


#: The attributes of a layer or quantisation method that decide what its post-load processing does, besides its
#: tensors' shapes and dtypes: plain values only (numbers, strings, booleans, None; tuples of them)
_PLAIN = (int, float, str, bool, type(None))


#: A layer's attributes that say which layer it is (its position and name), not what its processing does
_NAMES_THE_LAYER = re.compile(r"(^|_)(layer_id|layer_idx|layer_name|prefix)$")


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value))


def _processing_key(method: Any, layer: Any) -> Any:
    """What a quantisation method's post-load processing of ``layer`` on ``meta`` depends on: the method's class and
    plain settings, the layer's class and plain attributes, and its own tensors' names, shapes and dtypes. Two
    layers with one key come out of the processing alike (Kimi-K2.6's 60 MoE layers: SGLang's Marlin repack loops
    over every expert of each); None where the layer holds a tensor that is not on ``meta``."""
    tensors = _layer_tensors(layer)
    if tensors is None:
        return None
    settings = tuple(sorted((k, v) for k, v in vars(method).items() if _plain(v)))
    own = tuple(sorted((k, v) for k, v in vars(layer).items()
                       if _plain(v) and not k.startswith("_") and not _NAMES_THE_LAYER.search(k)))
    return (type(method), settings, type(layer), own, tuple(sorted(tensors.items())))


def _objects(layer: Any, method: Any) -> dict[tuple[int, str], int]:
    """The layer's and the method's attributes that are neither plain values nor tensor stores, by identity: a
    processing that sets one (a kernel workspace, a runner) is not replayed, it runs for every layer."""
    found = {}
    for number, owner in enumerate((layer, method)):
        for name, value in vars(owner).items():
            if name not in ("_parameters", "_buffers", "_modules") and not _plain(value) and not _meta_tensor(value) \
                    and not (isinstance(value, dict) and all(_plain(k) and _plain(v) for k, v in value.items())):
                found[(number, name)] = id(value)
    return found


def _meta_tensor(value: Any) -> bool:
    """A tensor on ``meta`` kept as a plain attribute (a kernel's workspace): its shape and dtype are all it has."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter) \
        and value.is_meta


def _layer_tensors(layer: Any) -> dict[str, tuple[Any, ...]] | None:
    """``layer``'s own parameters and buffers (not its children's): name -> (kind, shape, dtype, requires_grad);
    None where one is not on ``meta``."""
    found: dict[str, tuple[Any, ...]] = {}
    for kind, store in (("parameter", vars(layer).get("_parameters") or {}), ("buffer", vars(layer).get("_buffers") or {})):
        for name, tensor in store.items():
            if tensor is None:
                continue
            if not getattr(tensor, "is_meta", False):
                return None
            found[name] = (kind, tuple(tensor.shape), tensor.dtype, bool(getattr(tensor, "requires_grad", False)))
    return found


def _effect(before: dict[str, tuple[Any, ...]], layer: Any) -> dict[str, Any] | None:
    """What a processing did to ``layer``'s own tensors (each one's kind, shape, dtype after it; those it removed)
    and plain attributes; None where it did more than that (a new attribute of another kind: not replayed)."""
    after = _layer_tensors(layer)
    if after is None:
        return None
    attributes: dict[str, Any] = {}
    tensors: dict[str, tuple[Any, ...]] = {}
    for name, value in vars(layer).items():
        if name in ("_parameters", "_buffers", "_modules") or name.startswith("_forward") or name.startswith("_backward"):
            continue
        if _plain(value):
            attributes[name] = value
        elif isinstance(value, dict) and all(_plain(k) and _plain(v) for k, v in value.items()):
            attributes[name] = dict(value)
        elif _meta_tensor(value):
            tensors[name] = (tuple(value.shape), value.dtype)
    return {"tensors": after, "removed": sorted(set(before) - set(after)), "attributes": attributes,
            "tensor_attributes": tensors}


def _replay(effect: dict[str, Any], layer: Any) -> None:
    """Give ``layer`` the tensors and plain attributes :func:`_effect` recorded of a layer like it."""
    import torch

    for name in effect["removed"]:
        (vars(layer).get("_parameters") or {}).pop(name, None)
        (vars(layer).get("_buffers") or {}).pop(name, None)
    for name, (kind, shape, dtype, grad) in effect["tensors"].items():
        tensor = torch.empty(shape, dtype=dtype, device="meta")
        if kind == "parameter":
            layer._parameters[name] = torch.nn.Parameter(tensor, requires_grad=grad)
        else:
            layer._buffers[name] = tensor
    for name, value in effect["attributes"].items():
        setattr(layer, name, dict(value) if isinstance(value, dict) else value)
    for name, (shape, dtype) in effect["tensor_attributes"].items():
        setattr(layer, name, torch.empty(shape, dtype=dtype, device="meta"))


class _MetaKernels:
    """What SGLang's JIT kernel loader (``sglang.kernels.jit.utils.load_jit``, 0.5.2x) gives a post-load processing
    on ``meta``: each kernel, called with ``meta`` tensors only, writes nothing (it fills outputs SGLang's own Python
    allocated, with their shapes and dtypes; on ``meta`` there are no values to write, as with the fake
    implementations sgl-kernel registers for ``torch.compile``). The kernel's own device-side checks do not run.
    Called with any other tensor, it is a device step."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, kernel: str) -> Callable[..., None]:
        def on_meta(*args: Any, **kwargs: Any) -> None:
            tensors = [a for a in (*args, *kwargs.values()) if hasattr(a, "is_meta")]
            if not tensors or not all(t.is_meta for t in tensors):
                raise RuntimeError(f"SGLang's JIT kernel {self.name}.{kernel} needs a CUDA device")
            return None

        return on_meta


@contextlib.contextmanager
def _jit_kernels_on_meta() -> Iterator[None]:
    """SGLang's JIT kernel modules load as :class:`_MetaKernels` while it lasts; afterwards no module keeps one
    (``cache_once`` holds what a loader returned: those entries are dropped, so no later step of this evaluation or
    of another sees a kernel that was not built)."""
    modules = [m for name, m in list(sys.modules.items())
               if (name == "sglang.kernels" or name.startswith("sglang.kernels.")) and callable(vars(m).get("load_jit"))]
    if not modules:
        yield
        return
    originals = {m: vars(m)["load_jit"] for m in modules}

    def load_on_meta(*args: Any, **_kwargs: Any) -> _MetaKernels:
        return _MetaKernels(str(args[0]) if args else "?")

    for module in modules:
        module.load_jit = load_on_meta  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, original in originals.items():
            module.load_jit = original  # type: ignore[attr-defined]
        _forget_meta_kernels()


def _forget_meta_kernels() -> None:
    """Drop every :class:`_MetaKernels` a ``cache_once`` wrapper of ``sglang.kernels`` holds."""
    for name, module in list(sys.modules.items()):
        if not (name == "sglang.kernels" or name.startswith("sglang.kernels.")):
            continue
        for value in list(vars(module).values()):  # functions only: a lazy proxy answers any attribute
            for cell in (value.__closure__ or ()) if isinstance(value, types.FunctionType) else ():
                try:
                    held = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(held, dict):
                    for key in [k for k, v in held.items() if isinstance(v, _MetaKernels)]:
                        del held[key]


def _request_slots(runner: Any, args: Any) -> int | None:
    """The request slots SGLang sized the pool for: the request pool's size, or (where building the pools stopped
    before it) what the sizing wrote into the server arguments for the draft (``max_num_reqs``)."""
    size = _request_pool_size(runner)
    if size is None:
        size = getattr(args, "max_num_reqs", None)
    return size if isinstance(size, int) else None


def _request_pool_size(runner: Any) -> int | None:
    """The size of the request pool the runner built, or None before it exists."""
    size = getattr(vars(runner).get("req_to_token_pool"), "size", None)
    return size if isinstance(size, int) else None


def _post_load_not_run(not_run: list[str], model: Any, *_args: Any, **_kwargs: Any) -> None:
    """The loader's call of the model's ``post_load_weights`` (``post_load_weights(model, model_config)`` up to
    0.5.11, ``_post_load_weights(model)`` from 0.5.12), not run: it derives tensors from the weights' values
    (DeepSeek's absorbed MLA matrices, FP8 requantisation: seconds of decomposed arithmetic per layer on ``meta``).
    Named in ``not_run`` where the model has one."""
    if callable(getattr(model, "post_load_weights", None)):
        not_run.append(f"{type(model).__name__}.post_load_weights")


def _no_values(*_args: Any, **_kwargs: Any) -> None:
    """The dummy loader's random values, not drawn: a ``meta`` tensor holds none."""


def _device_bytes(model: Any) -> int:
    """The bytes of a built model's tensors (parameters and buffers, each once): what its weights take on the device."""
    if model is None or not callable(getattr(model, "parameters", None)):
        return 0
    seen: set[int] = set()
    total = 0
    modules = model.modules() if callable(getattr(model, "modules", None)) else [model]
    for module in modules:  # each module's own tensors (what ``parameters()`` and ``buffers()`` walk, at a third the cost)
        for tensor in [*vars(module).get("_parameters", {}).values(), *vars(module).get("_buffers", {}).values()]:
            if tensor is not None and id(tensor) not in seen and tensor.device.type == "meta":  # a CPU tensor is not on the GPU
                seen.add(id(tensor))
                total += tensor.numel() * tensor.element_size()
    return total


@contextlib.contextmanager
def _dummy_load_format(args: Any) -> Iterator[None]:
    """``--load-format dummy`` while the stage loads: in the server arguments, and (0.5.18+) in the runtime context's
    model bag, which the load reads there (``get_model().load_format``), through SGLang's own ``override``."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_attribute_set(args, "load_format", "dummy"))
        bag_of: Any = _attribute(("sglang.srt.runtime_context",), "get_model")
        with contextlib.suppress(Exception):  # no published context, or a bag without the field: the arguments hold it
            stack.enter_context(bag_of().override(load_format="dummy"))
        yield


def _set_past_guards(target: Any, name: str, value: Any) -> None:
    """``target.name = value`` past the class's own guard: ``object.__setattr__``, or for a struct whose fields it
    does not reach (0.5.20+'s ``msgspec.Struct`` server arguments, sealed after resolution) its base's setter."""
    try:
        object.__setattr__(target, name, value)
        return
    except TypeError:
        pass
    for base in type(target).__mro__[1:]:
        setter = vars(base).get("__setattr__")
        if setter is not None and base is not object:
            setter(target, name, value)
            return
    raise TypeError(f"cannot set {name} on {type(target).__name__}")


@contextlib.contextmanager
def _attribute_set(target: Any, name: str, value: Any) -> Iterator[None]:
    """``target.name`` is ``value`` while it lasts, then what it was."""
    original = getattr(target, name)
    _set_past_guards(target, name, value)
    try:
        yield
    finally:
        _set_past_guards(target, name, original)


class _Shell:
    """Something a draft worker holds, with what the stage gives it; any other read ends the stage."""

    def __init__(self, what: str, **values: Any) -> None:
        object.__setattr__(self, "_what", what)
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        raise _NotLoaded(f"reads {self._what}.{name} (only a loaded server has it)")


def _note_source(progress: Progress, role: str, cls: type) -> None:
    """Record a class read from its source (its module does not import on this machine)."""
    if model_classes.FROM_SOURCE in vars(cls) and role not in progress.classes_from_source:
        progress.classes_from_source.append(role)


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
    progress.enter("draft_model")
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
            progress.needs_gpu["draft_model"] = f"no module of sglang.srt.models defines {', '.join(missing)}"
        return
    _draft_built(draft_config, draft_cls, progress)
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


def _draft_built(draft_config: Any, draft_cls: type, progress: Progress) -> None:
    """The draft model built as the draft worker's loader builds it, on ``meta``: SGLang's own
    ``_initialize_model`` (the class's ``__init__`` with the draft's real config and quantization), serving the
    class :mod:`model_classes` found (the registry may have skipped its module on this CPU). A refusal the
    model's own module raises (``raise``/``assert`` in ``sglang/srt/models``: "EAGLE3 currently only supports 1
    layer" for a two-layer EAGLE3 head, 0.4.6 … 0.5.9) is SGLang's verdict; any other failure of the build (a
    layer's CPU-only branch, a kernel only a GPU has) stops it, recorded, and the stage goes on with stand-ins."""
    loader = _attribute(("sglang.srt.model_loader.loader",), "_initialize_model")
    load_config_cls = _attribute(("sglang.srt.configs.load_config",), "LoadConfig")
    default_dtype = _attribute(("sglang.srt.model_loader.utils", "sglang.srt.model_loader.loader"),
                               "set_default_torch_dtype")
    if loader is None or load_config_cls is None or default_dtype is None or model_classes.FROM_SOURCE in vars(draft_cls):
        return
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
            _call(loader, draft_config, load_config, **extra)
    except _NotLoaded as stop:
        progress.needs_gpu["draft_model"] = f"building {draft_cls.__name__} on meta: {stop}"
    except Exception as exc:
        if _refused_by_the_model(exc, draft_cls) or sglang_verdict(exc):
            raise
        frame = _sglang_frame(traceback.extract_tb(exc.__traceback__))
        where = f" ({_where(frame)})" if frame is not None else ""
        progress.needs_gpu["draft_model"] = (f"building {draft_cls.__name__} on meta stopped at "
                                             f"{type(exc).__name__}: {str(exc)[:120]}{where}")


_REFUSALS = (ValueError, AssertionError, NotImplementedError)


def sglang_verdict(exc: BaseException) -> bool:
    """True when ``exc``, raised while SGLang builds a model on ``meta`` (its layers, quantisation methods, the
    parallel layout's checks), is SGLang's own answer to the configuration, wherever the statement sits
    (``layers/dp_attention.py``'s ValueError for ``--attn-dp-size`` below ``--tp-size``, a quantisation's
    NotImplementedError, ``configs/model_config.py``'s ZeroDivisionError): decided from the raising statement
    and what it reads, not from the exception's type or file.

    It is SGLang's when the statement that raised it is SGLang's own (the innermost frame is in the ``sglang``
    package), and what it reads is the configuration: not a device call or a value only the GPU holds
    (:func:`_device_step`, :func:`_meta_value`), not a package this machine lacks (an import failed anywhere in
    its chain: a GPU package), not the registry missing a class whose module does not import here, not process
    state the device steps build (:func:`_unwritten_context`), and not an attribute of an object of bisect-spec's
    (a stand-in). A ``raise``/``assert`` that handles another exception (chained) is a refusal only where its
    cause is SGLang's verdict too."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or "/sglang/" not in frames[-1].filename.replace(os.sep, "/") \
            or os.path.abspath(frames[-1].filename).startswith(_OWN_PACKAGE):
        return False
    for link in _chain(exc):
        if isinstance(link, (ImportError, _NotLoaded, WillNotStart)):
            return False
        owner = getattr(link, "obj", None) if isinstance(link, AttributeError) else None
        if owner is not None and str(getattr(type(owner), "__module__", "")).startswith("bisect_spec"):
            return False
    if _device_step(exc) or _unregistered_here(exc) or _unwritten_context(exc):
        return False
    if _refusing_statement(exc) is not None:
        # SGLang's own unchained raise/assert ran to its end: what it read was no tensor value (reading one raises
        # in torch first), whatever its message says ("the meta-initialized client" of weight_cache/protocol.py
        # is not a meta tensor); a check of a tensor's placement on meta is the one exception
        try:
            return meta_device.names_a_meta_tensor(exc) is None
        except (Exception, _NotLoaded):
            return False
    if _meta_value(exc):
        return False
    cause = exc.__cause__ or exc.__context__
    return cause is None or sglang_verdict(cause)


def _refusing_statement(exc: BaseException) -> traceback.FrameSummary | None:
    """The frame whose own ``raise`` or ``assert`` statement raised ``exc``, unchained (a check refusing, not a
    failure on the way to one); None otherwise. Whose check it is, each caller decides from the frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or exc.__cause__ is not None or exc.__context__ is not None:
        return None
    return frames[-1] if (frames[-1].line or "").lstrip().startswith(("raise", "assert")) else None


def _refused_by_the_model(exc: BaseException, cls: type) -> bool:
    """True when ``exc`` was raised, unchained, by a ``raise`` or ``assert`` statement of the module of ``cls`` or of
    one of its bases in ``sglang.srt.models``: the model class refusing its config, as it would on a GPU box."""
    last = _refusing_statement(exc)
    if not isinstance(exc, _REFUSALS) or last is None:
        return False
    files = set()
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        path = getattr(module, "__file__", None) or ""
        if "/sglang/srt/models/" in path.replace(os.sep, "/"):
            files.add(os.path.abspath(path))
    return os.path.abspath(last.filename) in files


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


class _DeviceReached(Exception):
    """Stops ``ModelRunner.__init__`` at its first device step (``init_torch_distributed``)."""


#: Process-wide state the model runner writes: ``(module, global name)``. Put back after every
#: evaluation so the next one starts from the same state (found by feature: a name a release
#: lacks is skipped).
_RUNNER_GLOBALS = (("sglang.srt.managers.schedule_batch", "global_server_args_dict"),
                   ("sglang.srt.server_args", "_global_server_args"),
                   ("sglang.srt.model_executor.model_runner", "global_server_args_dict"))


@contextlib.contextmanager
def _runner_globals_kept() -> Iterator[None]:
    saved: list[tuple[Any, str, Any, Any]] = []
    for module_name, name in _RUNNER_GLOBALS:
        module = sys.modules.get(module_name)
        if module is None or not hasattr(module, name):
            continue
        value = getattr(module, name)
        saved.append((module, name, value, dict(value) if isinstance(value, dict) else None))
    try:
        yield
    finally:
        for module, name, value, contents in saved:
            setattr(module, name, value)
            if contents is not None:
                value.clear()
                value.update(contents)


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
    progress.enter("model_runner")
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


#: Attention modules whose classes the backend choice builds: building a backend is device work
#: (workspaces, kernels, CUDA graphs' buffers), so these modules are stood in for while the choice runs.
_BACKEND_PACKAGE = "sglang.srt.layers.attention."
_NOT_BACKENDS = frozenset({"base_attn_backend"})


def _is_backend_module(fullname: str) -> bool:
    leaf = fullname.rpartition(".")[2]
    return (fullname.startswith(_BACKEND_PACKAGE) and leaf.endswith("_backend") and leaf not in _NOT_BACKENDS
            and "." not in fullname[len(_BACKEND_PACKAGE):])


class _Inert:
    """What a stood-in backend hands back for anything asked of it."""

    def __getattr__(self, name: str) -> Any:
        return _Inert()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Inert()


def _backend_stand_in(fullname: str, chosen: list[str]) -> types.ModuleType:
    """A module whose every class records its construction in ``chosen`` (and does nothing else)."""
    module = types.ModuleType(fullname, "bisect-spec: stands in for an attention backend's module while "
                                        "SGLang chooses its backends (building one is device work)")

    def stand_in(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        def built(self: Any, *args: Any, **kwargs: Any) -> None:
            chosen.append(attribute)

        klass = type(attribute, (_Inert,), {"__init__": built, "__module__": fullname})
        setattr(module, attribute, klass)
        return klass

    module.__getattr__ = stand_in  # type: ignore[method-assign]
    module.__file__ = None
    return module


class _BackendFinder:
    """A ``sys.meta_path`` finder serving stand-ins for the backend modules first imported during the choice."""

    def __init__(self, chosen: list[str]) -> None:
        self.chosen = chosen

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not _is_backend_module(fullname):
            return None
        return importlib.util.spec_from_loader(fullname, self)  # type: ignore[arg-type]

    def create_module(self, spec: Any) -> types.ModuleType:
        return _backend_stand_in(spec.name, self.chosen)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


@contextlib.contextmanager
def _backends_stood_in() -> Iterator[list[str]]:
    """While it lasts, every attention backend SGLang builds is a stand-in; yields the classes built.

    Modules imported during the choice are forgotten afterwards (they may hold stand-ins), and the
    backend modules imported before it are put back.
    """
    chosen: list[str] = []
    before = set(sys.modules)
    real = {name: sys.modules[name] for name in [n for n in sys.modules if n.startswith(_BACKEND_PACKAGE)]
            if _is_backend_module(name)}
    for name in real:
        sys.modules[name] = _backend_stand_in(name, chosen)
    finder = _BackendFinder(chosen)
    sys.meta_path.insert(0, finder)
    try:
        yield chosen
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            module = sys.modules.pop(name)
            parent, _, leaf = name.rpartition(".")
            if getattr(sys.modules.get(parent), leaf, None) is module:
                with contextlib.suppress(AttributeError):
                    delattr(sys.modules[parent], leaf)
        sys.modules.update(real)


def _attention_backend(runner: Any, progress: Progress) -> None:
    """The runner's ``init_attention_backend()``, SGLang's own: the decode and prefill backends it
    chooses (a hybrid of two, two-batch overlap, the MLA and capability checks, an unknown name), with
    each backend's construction stood in for. On a real box this runs after the weights and the memory
    pool. What ``load_model`` would have set and the choice reads is set as ``load_model`` sets it
    without a model: ``sliding_window_size`` from the model config's attention chunk (so the triton
    backend's sliding-window refusal of 0.4.x, which asks the model itself, is not run).
    """
    if _backend_choice(runner) is None:
        return
    progress.enter("attention_backend")
    progress.attention_backends = _choose_backends(runner)


def _backend_choice(runner: Any) -> tuple[Any, Any, Any, Any] | None:
    """How this release's runner chooses its backends: ``(init_attention_backend, setup module, resolve,
    build)``, or None where it has neither way."""
    init: Any = getattr(runner, "init_attention_backend", None)
    setup: Any = None
    if init is None and callable(getattr(runner, "init_attention_backends", None)):
        # 0.5.16+: ``init_attention_backends()`` first hands the model its aux-hidden-state layers (model
        # work: not run), then resolves the backend pair and builds it, in the setup module's functions
        setup = sys.modules.get("sglang.srt.model_executor.model_runner_components.attention_backend_setup")
    resolve: Any = getattr(setup, "resolve_attention_backend_strs", None)  # 0.5.18+; 0.5.16/0.5.17 resolve in build
    build: Any = getattr(setup, "build_attention_backends", None)
    if init is None and build is None:
        return None
    return init, setup, resolve, build


def _choose_backends(runner: Any) -> list[str]:
    """SGLang's own backend choice on ``runner`` (its constructions stood in for): the classes built."""
    choice = _backend_choice(runner)
    if choice is None:
        return []
    init, setup, resolve, build = choice
    if not hasattr(runner, "sliding_window_size"):
        runner.sliding_window_size = getattr(runner.model_config, "attention_chunk_size", None)
    with _backends_stood_in() as chosen:
        if init is not None:
            init()
        else:
            if resolve is not None:  # 0.5.18+: the runner holds the resolved pair while the backends build
                resolved = resolve(model_runner=runner)
                runner.prefill_attention_backend_str = resolved.prefill
                runner.decode_attention_backend_str = resolved.decode
            with _replaced(setup, "init_cublas", lambda *args, **kwargs: None):  # a matmul on the device
                build(model_runner=runner)
    return list(chosen)


@contextlib.contextmanager
def _replaced(module: Any, name: str, value: Any) -> Iterator[None]:
    """``module.name`` is ``value`` while it lasts (where the module has the name)."""
    if module is None or (name not in vars(module) and not hasattr(module, name)):
        yield
        return
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


#: A kernel torch's CPU build has no CUDA implementation of (a tensor made on the device).
_CUDA_KERNEL = re.compile(r"with arguments from the 'CUDA' backend|Torch not compiled with CUDA|no NVIDIA driver")
#: The simulated box's refusal to import a GPU package's code (``simulated_gpu``).
_GPU_CODE = re.compile(r"on the simulated box but bisect-spec never imports GPU code")
#: The simulated box's refusal to build GPU code (``simulated_gpu.BUILD_REFUSED``: a kernel's JIT build).
_GPU_BUILD = re.compile(r"on the simulated box but bisect-spec never builds GPU code")


def _device_step(exc: BaseException) -> str | None:
    """The device call that stopped a stage after the weights (torch's CPU build raised it), or None."""
    torch = sys.modules.get("torch")
    root = os.path.dirname(getattr(torch, "__file__", None) or "\0") + os.sep
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        if not frames:
            continue
        stub = _kernel_stub(link)
        if stub is not None:
            return stub
        if isinstance(link, ModuleNotFoundError) and _GPU_CODE.search(str(link)):
            caller = _sglang_frame(frames) or frames[-1]
            return f"imports the GPU code of {link.name or link} ({_where(caller)}): needs a GPU install"
        if _GPU_BUILD.search(str(link)):
            caller = _sglang_frame(frames) or frames[-1]
            return f"builds SGLang's GPU kernels ({_where(caller)}): needs a GPU install"
        in_torch = os.path.abspath(frames[-1].filename).startswith(root)
        if not (in_torch and re.search(r"cuda|CUDA|device|driver|not compiled", str(link))) \
                and not _CUDA_KERNEL.search(str(link)):
            continue
        caller = next((f for f in reversed(frames) if not os.path.abspath(f.filename).startswith(root)), frames[-1])
        return f"{caller.line or caller.name} ({_where(caller)}) needs a GPU"
    return None


def _kernel_stub(exc: BaseException) -> str | None:
    """SGLang's stand-in for a kernel that did not import on this machine, raising: a function of SGLang's that takes
    only ``*args, **kwargs`` (it reads no argument, no configuration) and raises at once, bound where the kernel's
    import failed (0.5.18's ``gptq_kernels._unsupported_kernel``: "GPTQ CUDA kernels are unavailable on the current
    platform"). A GPU install has the kernel; None for anything else."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    code = tb.tb_frame.f_code
    if "/sglang/" not in code.co_filename.replace(os.sep, "/") or code.co_argcount or code.co_kwonlyargcount \
            or not (code.co_flags & inspect.CO_VARARGS and code.co_flags & inspect.CO_VARKEYWORDS):
        return None
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    if not (frame.line or "").lstrip().startswith("raise "):
        return None
    return f"calls {code.co_name} ({_where(frame)}), SGLang's stand-in for a GPU kernel that does not import here"


def _meta_value(exc: BaseException) -> str | None:
    """A statement that read a value of a tensor the GPU would hold (made on ``meta`` here), or checked such
    a tensor's placement: it stops the stage (:mod:`meta_device`); or None."""
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        caller = _sglang_frame(frames)
        if caller is None:
            continue
        if meta_device.reads_a_value(link):
            return f"{caller.line or caller.name} ({_where(caller)}) reads a value the GPU holds"
        try:
            name = meta_device.names_a_meta_tensor(link)
        except (Exception, _NotLoaded):  # reading the failing frame must never end the worker
            name = None
        if name is not None:
            return f"{caller.line or caller.name} ({_where(caller)}) checks {name}, a tensor the GPU holds"
    return None


_UNREGISTERED = re.compile(r"is not a registered model|are not supported for now|failed to be inspected")


def _unregistered_here(exc: BaseException) -> str | None:
    """SGLang's model registry refusing an architecture that a module of ``sglang.srt.models`` defines: on a
    GPU box that module imports and registers it; here its import failed (the registry ignores such
    failures and says the architecture is unknown): a stop naming the module, never a verdict; or None."""
    for link in _chain(exc):
        if not isinstance(link, ValueError) or not _UNREGISTERED.search(str(link)):
            continue
        defined = model_classes.defining_modules()
        for name in re.findall(r"'(\w+)'", str(link)):
            if name in defined:
                return (f"the model registry has no {name} here: {', '.join(defined[name])} does not import on this "
                        "machine (it registers the class on a GPU install)")
    return None


def _sglang_frame(frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The innermost of ``frames`` in SGLang's own code (the statement a stop or a verdict names), or None."""
    return next((f for f in reversed(frames) if "/sglang/" in f.filename.replace(os.sep, "/")), None)


def _where(frame: traceback.FrameSummary) -> str:
    """``file:line`` of a frame, the file relative to the ``sglang`` package where it is SGLang's."""
    path = frame.filename.replace(os.sep, "/")
    return f"{path.rpartition('/sglang/')[2] or os.path.basename(frame.filename)}:{frame.lineno}"


def _tokenizer_manager(args: Any, publish: Callable[..., None] | None, progress: Progress) -> None:
    """The launcher's ``TokenizerManager.init_model_config``, on an instance with nothing else built."""
    manager = _attribute(("sglang.srt.managers.tokenizer_manager",), "TokenizerManager")
    init_model_config = getattr(manager, "init_model_config", None)
    if init_model_config is None:
        return
    if publish is not None:
        _call(publish, args, role="tokenizer")
    progress.enter("tokenizer_manager")
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
        progress.enter("auto_parsers")
        resolve(args)


def _draft_model_config(args: Any, target: Any, progress: Progress) -> None:
    """The target ModelRunner's speculative pre-device step, where the release has it as a free function."""
    algorithm = getattr(_view(args), "speculative_algorithm", None)
    resolve_aux = _attribute(("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state",),
                             "resolve_spec_aux_hidden_state_config")
    speculative_algorithm = _attribute(("sglang.srt.speculative.spec_info",), "SpeculativeAlgorithm")
    if not algorithm or resolve_aux is None or speculative_algorithm is None:
        return
    progress.enter("draft_model_config")
    _call(resolve_aux, server_args=args, model_config=target,
          spec_algorithm=speculative_algorithm.from_string(algorithm), is_draft_worker=False)


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


# -- faults of the emulation itself ------------------------------------------------------

#: bisect-spec's own package: a failure raised in it is never SGLang's verdict.
#: (``repro.py`` embeds this module's source without a ``__file__``: its own frames are then none of ours)
_OWN_PACKAGE = (os.path.dirname(os.path.dirname(os.path.abspath(globals()["__file__"]))) + os.sep
                if "__file__" in globals() else "\0")
#: Stages whose set-up (the runtime context, a bare object) is this module's, not SGLang's.
_EMULATED_STAGES = frozenset({"tokenizer_manager", "target_model_config", "draft_model_config", "model_runner",
                              "target_model", "attention_backend", "draft_worker_model_config", "draft_worker",
                              "draft_model"})
_UNPUBLISHED = re.compile(r"not published|publish\(\) (?:was )?not called|no (?:runtime )?context published", re.I)
#: What each of bisect-spec's inside modules stands in for, for the fault's one line.
_OWN_STEPS = {"simulated_gpu": "the simulated GPU box", "version_shims": "a version shim or stub",
              "launch_path": "the launch-path emulation", "evaluator": "the evaluator",
              "launch_oracle": "the launch oracle", "worker_main": "the worker",
              "model_classes": "the model stand-ins"}


#: ``worker_main._no_network``'s refusal: evaluations run offline, and SGLang reaching for the hub is a
#: failure of the configuration (a hub id where a local path belongs), recorded as SGLang's, not a fault.
_OFFLINE = "bisect-spec blocked network access"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def tool_fault(exc: BaseException, progress: Progress) -> str | None:
    """The step of bisect-spec's own emulation that caused ``exc``; None when SGLang raised it.

    A fault of ours is: an exception whose raising frame is bisect-spec's code (a simulated
    GPU probe, a stub of a GPU package, a shim, a call this module makes with arguments the
    release does not take), or whose cause is (anywhere in its ``__cause__``/``__context__``
    chain); an attribute missing on an object of ours (a simulated device) or on one this
    module built by hand; SGLang's runtime context read as unpublished in a stage whose
    publication is this module's job. A real launch never meets any of these.
    """
    if any(str(link).startswith(_OFFLINE) for link in _chain(exc)):
        return None  # the documented offline refusal: SGLang's reach for the network, recorded as its failure
    for link in _chain(exc):
        frames = traceback.extract_tb(link.__traceback__)
        if frames and os.path.abspath(frames[-1].filename).startswith(_OWN_PACKAGE):
            module = os.path.splitext(os.path.basename(frames[-1].filename))[0]
            return f"{_OWN_STEPS.get(module, module)} ({module}.py:{frames[-1].lineno} in {frames[-1].name})"
        owner = getattr(link, "obj", None) if isinstance(link, AttributeError) else None
        if owner is not None and id(owner) in progress.built:
            return f"stage {progress.stage}: {progress.built[id(owner)]}"
        if owner is not None and str(getattr(type(owner), "__module__", "")).startswith("bisect_spec"):
            return f"{_OWN_STEPS['simulated_gpu']}: {type(owner).__name__} has no attribute {getattr(link, 'name', '?')!r}"
        if progress.stage in _EMULATED_STAGES and _UNPUBLISHED.search(str(link)):
            return f"runtime-context publication before stage {progress.stage}"
    return None


# -- environment variables the speculative code paths read ---------------------------------

#: An environment variable read in source text: ``envs.SGLANG_X``, ``get_bool_env_var("SGLANG_X")``, ...
#: (also used by ``data_flow``; this module imports nothing of bisect_spec: ``repro.py`` embeds its source)
ENV_READ = re.compile(r"""(?:envs\.|get_bool_env_var\(\s*["']|get_int_env_var\(\s*["']|environ(?:\.get)?[\[(]\s*["']|"""
                      r"""getenv\(\s*["'])(?P<name>SGL(?:ANG)?_[A-Z0-9_]+)""")
_ENV_DEFINITION = re.compile(r"^\s*(?P<name>SGL(?:ANG)?_[A-Z0-9_]+)\s*=\s*Env(?P<kind>Bool|Int|Float|Str)\((?P<default>[^)]*)\)",
                             re.M)
#: Where the speculative code lives: whole files, and functions of ``server_args.py`` (<= 0.5.12).
_SPECULATIVE_FILES = ("srt/speculative", "srt/arg_groups/speculative_hook.py")


def speculative_env_vars(package_root: str, also: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Environment variables the release's speculative code paths read, found in its source.

    Read from ``srt/speculative/``, ``srt/arg_groups/speculative_hook.py`` and the
    functions of ``srt/server_args.py`` whose names mention speculation, and the names ``also``
    (those the speculative checks read: :func:`data_flow.speculative_reads`). Each:
    ``{"name", "kind": bool|int|float|str, "default"}``; kind and default come from the
    release's ``srt/environ.py`` declarations where they exist (``EnvBool(False)``), else
    ``bool`` when read through ``get_bool_env_var``.
    """
    import ast as _ast
    import os as _os

    def read(path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    texts: list[str] = []
    for relative in _SPECULATIVE_FILES:
        path = _os.path.join(package_root, relative)
        if _os.path.isdir(path):
            for directory, _dirs, files in sorted(_os.walk(path)):
                texts += [read(_os.path.join(directory, f)) for f in sorted(files) if f.endswith(".py")]
        elif _os.path.isfile(path):
            texts.append(read(path))
    server_args = _os.path.join(package_root, "srt", "server_args.py")
    if _os.path.isfile(server_args):
        source = read(server_args)
        lines = source.splitlines()
        for node in _ast.walk(_ast.parse(source)):
            if isinstance(node, _ast.FunctionDef) and "specul" in node.name:
                texts.append("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    bools = set(re.findall(r"get_bool_env_var\(\s*[\"'](SGL(?:ANG)?_[A-Z0-9_]+)", "\n".join(texts)))
    names = sorted({m["name"] for text in texts for m in ENV_READ.finditer(text)} | set(also))
    declared: dict[str, tuple[str, str]] = {}
    environ_path = _os.path.join(package_root, "srt", "environ.py")
    if _os.path.isfile(environ_path):
        for match in _ENV_DEFINITION.finditer(read(environ_path)):
            declared[match["name"]] = (match["kind"].lower(), match["default"].strip())
    found = []
    for name in names:
        kind, default = declared.get(name, ("bool" if name in bools else "str", ""))
        found.append({"name": name, "kind": kind, "default": default})
    return found

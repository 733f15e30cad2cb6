"""The target built on ``meta``, kept by a worker for the next evaluation whose build reads the same inputs
(mirrors nothing of SGLang's: a helper of :mod:`.memory_pool`, no stage here).

A full evaluation of Kimi-K2.6 spends 45 % of its time in the loader's ``load_model`` (61 layers × 384 experts and a
vision tower built on ``meta``, the experts' Marlin repack), and most rows of a sweep differ only in flags that the
build never reads (the draft's steps, topk and tokens; the CUDA graphs' sizes). The memo hands such a row the model
the loader returned for an earlier row, put back as the loader returned it.

Written by hand: what a build reads is spread over SGLang's objects, and no library keys a computation on a
process's state. The key is everything the build can see, not a list of what it is believed to read:

* the loader's own inputs in full: its ``load_config``, the ``model_config`` (with its Hugging Face config) and the
  ``device_config``, state by state (:func:`_state`);
* the server arguments, every field as resolved, and (0.5.18+) the runtime context SGLang publishes from them,
  except the fields of :data:`NOT_READ_BY_THE_BUILD`; each of those the build does read (its reads are watched
  while it runs) joins that entry's key with its value;
* older releases' ``global_server_args_dict`` in full (the module globals a stage sets, such as the MoE backends
  and the DP-attention widths, come from arguments the key holds: scanning every module's globals cost 30 ms);
* the whole environment, and the simulated GPU's memory.

An object the key cannot describe by value (a C object, a depth past :data:`_DEPTH`) is keyed by its identity, which
only costs a miss. What the runner does to the model after the loader returns (the RoPE cache grown for the
speculative steps, the EAGLE3 layers to capture) is undone on the next hit: every module's attributes, and the
dicts and lists among them, are put back as the loader returned them. What the loader appended to the stage's
lists (the post-load processing not run) is appended again. A build that raised is never kept.

A worker keeps :data:`_KEPT` models, frozen out of the cyclic garbage collector's sight (``gc.freeze``): every full
collection walked them again, which made the main job slower with the memo than without it (211 s against 188 s).
A model let go of is emptied, so reference counting frees it. ``BISECT_SPEC_BUILD_MEMO=0`` (or
``BISECT_SPEC_PARANOID=1``) in the environment builds every time; ``tests/integration/test_build_memo.py`` checks
every outcome against it on three release families, and ``scripts/compare_runs.py`` the main job.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import gc
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

#: Fields of the server arguments (and leaves of 0.5.18+'s runtime context of the same name) left out of the key:
#: what a sweep varies most that decides the draft's work, the CUDA graphs and the pool, not the target's build.
#: A build that reads one anyway is keyed on its value too (:class:`_ReadsWatched`).
NOT_READ_BY_THE_BUILD = frozenset({
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "speculative_accept_threshold_single", "speculative_accept_threshold_acc", "speculative_draft_window_size",
    "speculative_draft_sink_size", "speculative_dflash_block_size", "speculative_token_map",
    "cuda_graph_max_bs", "cuda_graph_bs", "disable_cuda_graph", "disable_cuda_graph_padding",
    "mem_fraction_static", "max_running_requests", "max_total_tokens", "chunked_prefill_size", "random_seed",
    "_launch_command", "_max_speculative_num_draft_tokens", "max_speculative_num_draft_tokens",
})

#: How deep :func:`_state` describes nested objects; deeper ones are keyed by identity.
_DEPTH = 12

#: Models a worker keeps (each a model on ``meta``: its modules and meta tensors, tens of MB for Kimi-K2.6).
_KEPT = 12

_PLAIN = (int, float, str, bool, bytes, type(None))

_OFF = os.environ.get("BISECT_SPEC_BUILD_MEMO") == "0" or os.environ.get("BISECT_SPEC_PARANOID") == "1"


def _state(value: Any, depth: int = 0, seen: dict[int, Any] | None = None, leave_out: frozenset[str] = frozenset()) -> Any:
    """``value`` as a hashable description of its state: plain values as they are, containers and objects by their
    contents (``leave_out``: attribute and key names not described), what cannot be described by its identity."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, enum.Enum):
        return (type(value).__qualname__, value.name)
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, types.MethodType)):
        return ("object", id(value))  # the same for the worker's life
    seen = {} if seen is None else seen
    if id(value) in seen:
        return seen[id(value)]
    if depth > _DEPTH:
        return ("deep", id(value))
    seen[id(value)] = ("cycle", id(value))
    torch = sys.modules.get("torch")
    described: Any
    if torch is not None and isinstance(value, (torch.dtype, torch.device)):
        described = str(value)
    elif torch is not None and isinstance(value, torch.Tensor):
        described = ("tensor", tuple(value.shape), str(value.dtype), str(value.device), id(value) if not value.is_meta else 0)
    elif isinstance(value, (list, tuple)):
        described = (type(value).__name__, tuple(_state(v, depth + 1, seen, leave_out) for v in value))
    elif isinstance(value, (set, frozenset)):
        described = ("set", tuple(sorted(repr(_state(v, depth + 1, seen, leave_out)) for v in value)))
    elif isinstance(value, dict):
        described = ("dict", tuple((repr(k), _state(v, depth + 1, seen, leave_out)) for k, v in value.items()
                                   if not (isinstance(k, str) and k in leave_out)))
    else:
        described = (type(value).__module__, type(value).__qualname__,
                     tuple((name, _state(v, depth + 1, seen, leave_out)) for name, v in _attributes(value)
                           if name not in leave_out))
    seen[id(value)] = described
    return described


def _attributes(value: Any) -> list[tuple[str, Any]]:
    """An object's own attributes: its ``__dict__`` and slots (a msgspec struct's fields); [] where it has none
    (then only its class describes it: a C object that hides state would need its identity)."""
    found: list[tuple[str, Any]] = []
    names = getattr(type(value), "__struct_fields__", None)
    if names is not None:
        found += [(name, getattr(value, name, None)) for name in names]
    for klass in type(value).__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                found.append((name, getattr(value, name)))
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        found += list(attributes.items())
    elif not found and not hasattr(value, "__dict__"):
        found.append(("identity", id(value)))
    return found


#: Module-level dicts the runner fills from the arguments (older releases' ``global_server_args_dict``): keyed in
#: full, their copies of left-out fields included.
_GLOBAL_DICTS = (("sglang.srt.managers.schedule_batch", "global_server_args_dict"),
                 ("sglang.srt.model_executor.model_runner", "global_server_args_dict"))


def _module_globals() -> Any:
    """The module-level dicts of :data:`_GLOBAL_DICTS`, in full. Other module globals a stage sets (the MoE backends,
    the DP-attention widths) are set from arguments the key holds."""
    return tuple(_state(vars(sys.modules[name]).get(key)) for name, key in _GLOBAL_DICTS if name in sys.modules)


def _server_args_objects(args: Any) -> list[Any]:
    """The server arguments the build can reach: the stage's, and the process-wide ones SGLang keeps (where they are
    another object)."""
    found = [args]
    for module_name, name in (("sglang.srt.server_args", "_global_server_args"),):
        other = vars(sys.modules.get(module_name) or types.SimpleNamespace()).get(name)
        if other is not None and all(other is not known for known in found):
            found.append(other)
    return found


def _context_bags() -> list[Any]:
    """0.5.18+'s runtime context's bags (``get_model()``, ``get_spec()`` ...: namespaces of the resolved arguments),
    the context first; [] where the release has none."""
    module = sys.modules.get("sglang.srt.runtime_context")
    get_context = getattr(module, "get_context", None)
    bag_class = getattr(module, "_ConfigBag", None)
    if get_context is None:
        return []
    try:
        context = get_context()
    except Exception:
        return []
    found: list[Any] = [context]
    stack = list(vars(context).values()) if hasattr(context, "__dict__") else []
    while stack:
        item = stack.pop()
        if isinstance(bag_class, type) and isinstance(item, bag_class) and all(item is not b for b in found):
            found.append(item)
            stack.extend(object.__getattribute__(item, "_subs").values())
    return found


class _WatchedField:
    """A left-out field on the watching subclass (a data descriptor): a read is noted with its value, and reads and
    writes go where the class sends them otherwise (a slot, a property, the instance's ``__dict__``)."""

    def __init__(self, name: str, klass: type) -> None:
        self.name = name
        self.inner: Any = next((vars(base)[name] for base in klass.__mro__ if name in vars(base)), None)
        kind = type(self.inner)
        self.data = self.inner is not None and hasattr(kind, "__get__") and (hasattr(kind, "__set__")
                                                                           or hasattr(kind, "__delete__"))

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        value = self._value(instance)
        if _WATCHERS and self.name not in _WATCHERS[-1].read:
            _WATCHERS[-1].read[self.name] = _state(value)
        return value

    def _value(self, instance: Any) -> Any:
        if self.data:
            return self.inner.__get__(instance, type(instance))
        own = getattr(instance, "__dict__", None)
        if isinstance(own, dict) and self.name in own:
            return own[self.name]
        if self.inner is None:
            raise AttributeError(self.name)
        return self.inner.__get__(instance, type(instance)) if hasattr(type(self.inner), "__get__") else self.inner

    def __set__(self, instance: Any, value: Any) -> None:
        if self.data:
            self.inner.__set__(instance, value)
        else:
            instance.__dict__[self.name] = value

    def __delete__(self, instance: Any) -> None:
        if self.data:
            self.inner.__delete__(instance)
        else:
            del instance.__dict__[self.name]


class _ReadsWatched:
    """While it lasts, the named fields read from the given objects, with the value read: each object's class is
    swapped for a subclass whose named fields are :class:`_WatchedField` (every other attribute is read as before,
    at no cost), then put back."""

    _subclasses: ClassVar[dict[type, type]] = {}

    def __init__(self, objects: list[Any], names: frozenset[str]) -> None:
        self.objects = objects
        self.names = names
        self.read: dict[str, Any] = {}

    def _watching(self, klass: type) -> type:
        sub = self._subclasses.get(klass)
        if sub is None:
            namespace: dict[str, Any] = {name: _WatchedField(name, klass) for name in self.names}
            namespace.update(__module__=klass.__module__, __qualname__=klass.__qualname__)
            if not hasattr(klass, "__struct_fields__"):  # a msgspec struct's subclass keeps its layout by itself
                namespace["__slots__"] = ()
            sub = type(klass)(klass.__name__, (klass,), namespace)
            self._subclasses[klass] = sub
        return sub

    @contextlib.contextmanager
    def watching(self) -> Iterator[bool]:
        """Watch while it lasts; yields whether every object is watched (else nothing the build did is kept)."""
        swapped: list[tuple[Any, type]] = []
        _WATCHERS.append(self)
        try:
            for item in self.objects:
                klass = type(item)
                try:
                    _class_set(item, self._watching(klass))
                except (TypeError, AttributeError):
                    continue
                swapped.append((item, klass))
            yield len(swapped) == len(self.objects)
        finally:
            for item, klass in swapped:
                _class_set(item, klass)
            _WATCHERS.pop()


_WATCHERS: list[_ReadsWatched] = []


def _class_set(item: Any, klass: type) -> None:
    """``item.__class__ = klass`` past the class's own ``__setattr__`` (SGLang's sealed arguments refuse writes): with
    the first attribute setter of its classes written in C (``object``'s, or a msgspec struct's)."""
    for base in type(item).__mro__:
        setter = vars(base).get("__setattr__")
        if setter is not None and type(setter).__name__ == "wrapper_descriptor":
            setter(item, "__class__", klass)
            return
    object.__setattr__(item, "__class__", klass)


@dataclasses.dataclass
class _Kept:
    """One model as the loader returned it: its modules' attributes (and the dicts and lists among them), the
    fields the build read that the key leaves out, and what the loader appended to the stage's lists."""

    model: Any
    modules: list[tuple[Any, dict[str, Any], dict[str, Any]]]
    read: dict[str, Any]
    appended: list[list[Any]]

    @classmethod
    def of(cls, model: Any, read: dict[str, Any], appended: list[list[Any]]) -> _Kept:
        modules = []
        for module in model.modules():
            attributes = dict(vars(module))
            contents = {name: (dict(value) if isinstance(value, dict) else list(value))
                        for name, value in attributes.items() if isinstance(value, (dict, list))}
            modules.append((module, attributes, contents))
        return cls(model, modules, read, appended)

    def release(self) -> None:
        """Empty every module the memo let go of (its attributes, its tensors' own attributes): a model's modules and
        parameters refer to each other (a parameter's ``weight_loader`` is its module's bound method), and the kept
        model was frozen out of the cyclic collector's sight (:meth:`BuildMemo.load`), so reference counting alone
        must free it."""
        for module, attributes, contents in self.modules:
            for saved in contents.values():
                for value in saved.values() if isinstance(saved, dict) else saved:
                    own = getattr(value, "__dict__", None)
                    if isinstance(own, dict):
                        own.clear()
            vars(module).clear()
            attributes.clear()
        self.modules.clear()
        self.model = None

    def put_back(self, appended_to: list[list[Any]]) -> Any:
        for module, attributes, contents in self.modules:
            own = vars(module)
            own.clear()
            own.update(attributes)
            for name, saved in contents.items():
                value = attributes[name]
                if isinstance(value, dict):
                    value.clear()
                    value.update(saved)
                else:
                    value[:] = saved
        for target, items in zip(appended_to, self.appended, strict=True):
            target.extend(items)
        return self.model


class BuildMemo:
    """A worker's kept builds (the last :data:`_KEPT`), by key; :meth:`load` is the loader's ``load_model``."""

    def __init__(self) -> None:
        self.kept: collections.OrderedDict[Any, list[_Kept]] = collections.OrderedDict()
        self.hits = 0
        self.builds = 0

    def key(self, loader: Any, model_config: Any, device_config: Any, args: Any, total: int) -> Any:
        leave_out = NOT_READ_BY_THE_BUILD
        return (_state(getattr(loader, "load_config", None)), _state(model_config), _state(device_config),
                tuple(_state(a, leave_out=leave_out) for a in _server_args_objects(args)),
                tuple(_state(b, leave_out=leave_out) for b in _context_bags()),
                _module_globals(), _environment(), total)

    def load(self, original: Callable[..., Any], loader: Any, args: Any, total: int,
             appended_to: list[list[Any]], **inputs: Any) -> Any:
        """``original(loader, **inputs)`` (the loader's ``load_model``), or the model an earlier call with the same
        key returned, put back as it returned it."""
        if _OFF:
            return original(loader, **inputs)
        key = self.key(loader, inputs.get("model_config"), inputs.get("device_config"), args, total)
        for kept in self.kept.get(key, []):
            if all(_state(_read_now(args, name)) == value for name, value in kept.read.items()):
                self.kept.move_to_end(key)
                self.hits += 1
                return kept.put_back(appended_to)
        sizes = [len(target) for target in appended_to]
        watcher = _ReadsWatched([*_server_args_objects(args), *_context_bags()], NOT_READ_BY_THE_BUILD)
        with watcher.watching() as watched:
            model = original(loader, **inputs)
        self.builds += 1
        if not watched:  # a field left out of the key could have been read unseen
            return model
        appended = [list(target[size:]) for target, size in zip(appended_to, sizes, strict=True)]
        if callable(getattr(model, "modules", None)):
            while self.kept and sum(len(v) for v in self.kept.values()) >= _KEPT:
                oldest = next(iter(self.kept))
                self.kept[oldest].pop(0).release()
                if not self.kept[oldest]:
                    del self.kept[oldest]
            self.kept.setdefault(key, []).append(_Kept.of(model, dict(watcher.read), appended))
            self.kept.move_to_end(key)
            # out of the cyclic collector's sight: a kept Kimi-K2.6 is some 10^5 objects, which every full collection
            # would walk again (what it cost made the memo slower than building); the young garbage goes first
            gc.collect(1)
            gc.freeze()
        return model


def _environment() -> tuple[tuple[str, str], ...]:
    """The environment, read without the evaluator's read tracer (CPython's mapping keeps it in ``_data``)."""
    environ: Any = os.environ
    data = getattr(environ, "_data", None)
    if not isinstance(data, dict):
        return tuple(sorted(os.environ.items()))
    return tuple(sorted((environ.decodekey(k), environ.decodevalue(v)) for k, v in data.items()))


def _read_now(args: Any, name: str) -> Any:
    """A left-out field's value now: from the server arguments, else from the runtime context's bags."""
    if hasattr(args, name):
        return getattr(args, name)
    for bag in _context_bags()[1:]:
        fields = object.__getattribute__(bag, "_fields")
        if name in fields:
            return fields[name]
    return None


#: The worker's memo (one release per worker process).
MEMO = BuildMemo()

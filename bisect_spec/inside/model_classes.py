"""The model classes a launch builds when the weights load, and the calls the speculative path makes on them.

Why. Once the target and the draft are built, a speculative launch calls methods of their
classes: the target ``ModelRunner`` asks the target model to capture auxiliary hidden states
for EAGLE3 (``set_eagle3_layers_to_capture``) and DFLASH (``set_dflash_layers_to_capture``); the
EAGLE family's worker shares the target's embedding and head with the draft
(``get_embed_and_head`` on the target, ``set_embed_and_head`` or ``set_embed`` on the draft). A
class without the method fails there, minutes into a real launch, with the weights loaded:
EAGLE3 on a target whose class had no capture hook yet (Qwen2 before sglang PR #9216,
DeepSeek-V3 before 0.5.4.post2), or EAGLE3 with no draft model (sglang#36528: the target's own
class is built as the draft, and has no ``set_embed``).

How, without weights or a GPU:

* **The class** is the one SGLang's model registry serves for the architecture: the module of
  ``sglang.srt.models`` that defines it, imported as the registry imports it (on the CPU), and
  the class of that name in its ``EntryClass``. Only that module is imported (the registry's
  own ``import_model_classes`` imports every one, ~250, 8 s a process). Where the module does not
  import on a CPU (0.5.11 and older import ``vllm`` or ``sgl_kernel`` at module level), the stage
  stops there and says so (:class:`NotLoaded`), never a verdict.
* **An instance** is a stand-in (:func:`stand_in`), an object of a class with the same name whose
  attributes are the real class's names: a method answers without running its body (the body
  touches weights) with an :class:`Opaque` value; a name that an ``__init__`` of the class or of a
  base assigns is an :class:`Opaque` value; any other name is missing, so Python itself raises
  ``AttributeError: 'X' object has no attribute 'y'`` in SGLang's frame, as it would on the box.
  An :class:`Opaque` value refuses what only real tensors answer (truth, iteration, length,
  numbers) with :class:`NotLoaded`: the stage stops there, recorded, never a verdict.
* **What ``__init__`` decides from the config alone** is a real value (:func:`decided_by_init`): the
  ``__init__``'s own ``if`` tests and plain assignments, evaluated on the model's config with the
  ``__init__``'s writes to it kept apart, every call skipped. An EAGLE3 head's
  ``load_lm_head_from_target`` (no ``draft_vocab_size`` and untied embeddings: take the target's head)
  chooses ``set_embed_and_head`` or ``set_embed``; without it the stage stopped there for every EAGLE3
  draft (39 of 305 configurations on a real H200, 2026-12-04).
  A name another method sets too (``load_weights``) stays opaque.
* **The calls** are SGLang's own statements (:func:`aux_capture_statements`,
  :func:`lm_head_statements`), compiled from the release's source with its file name, line
  numbers and function name, and run (:func:`run`) with ``self`` the runner or the worker, so a
  failure's traceback is SGLang's own statement.

Hand-written, because nothing else does this: it is the smallest piece of SGLang's weight loading
that answers the question, and every statement it runs is SGLang's.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any


class NotLoaded(BaseException):
    """A read of what only a loaded model or server has (its tensors, its memory pool): ends a stage.

    A ``BaseException``: SGLang's ``except Exception`` must not swallow it and go on, and
    ``hasattr`` must not answer False for something a real server has."""


class Opaque:
    """A value only a built model has (a tensor, a module): attributes, calls and items give more
    of the same; its truth, length, iteration or number refuses with :class:`NotLoaded`."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Opaque(f"{self._what}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        pass

    def __delattr__(self, name: str) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Opaque:
        return Opaque(f"{self._what}(...)")

    def __getitem__(self, key: Any) -> Opaque:
        return Opaque(f"{self._what}[...]")

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def _computed(self, *args: Any) -> Opaque:
        """Arithmetic on a tensor gives a tensor: more of the same (``embed * scale``)."""
        return Opaque(f"{self._what} (computed)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _computed
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _computed
    __neg__ = __pos__ = __abs__ = __invert__ = _computed

    def _refuse(self, *args: Any) -> Any:
        raise NotLoaded(f"uses the value of {self._what} (only a built model has it)")

    __bool__ = __iter__ = __len__ = __index__ = __int__ = __float__ = _refuse

    def __repr__(self) -> str:
        return f"<{self._what}>"


# -- the class ------------------------------------------------------------------------------

_CLASS_LINE = re.compile(r"^class (\w+)\b", re.M)


@functools.cache
def _defining_modules() -> dict[str, tuple[str, ...]]:
    """Architecture class name -> the modules of ``sglang.srt.models`` that define a class of that name."""
    spec = importlib.util.find_spec("sglang.srt.models")
    index: dict[str, list[str]] = {}
    for directory in (spec.submodule_search_locations or []) if spec is not None else []:
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".py") or name.startswith("_"):
                continue
            with open(os.path.join(directory, name), encoding="utf-8-sig") as handle:
                text = handle.read()
            if "EntryClass" not in text:
                continue
            for match in _CLASS_LINE.finditer(text):
                index.setdefault(match[1], []).append(f"sglang.srt.models.{name[:-3]}")
    return {k: tuple(v) for k, v in index.items()}


def defining_modules() -> dict[str, tuple[str, ...]]:
    """Architecture class name -> the modules of ``sglang.srt.models`` that define it (read from their source)."""
    return _defining_modules()


def import_module(module: str) -> Any:
    if module in sys.modules:
        return sys.modules[module]
    try:
        from bisect_spec.inside import simulated_gpu
        load: Callable[[str], Any] = simulated_gpu.import_on_cpu
    except ImportError:  # repro.py: the simulation's modules without their package
        load = importlib.import_module
    try:
        load(module)
    except ImportError as exc:
        # as SGLang's own model registry imports it, under the simulated box: the registry does so the first time
        # its module is imported (every model module), so a later evaluation of the same worker finds the module
        # imported this way; importing it so now keeps the first evaluation's verdict the same as theirs
        try:
            importlib.import_module(module)
        except Exception:
            raise NotLoaded(f"imports {module}, which does not import on this machine ({exc})") from None
    return sys.modules[module]


def model_class(architectures: Iterable[str] | None) -> type | None:
    """The class SGLang's registry serves for the first architecture it knows; None when no module
    of ``sglang.srt.models`` defines one. Where that module does not import on this machine, the class as
    its source defines it (:func:`source_class`); :class:`NotLoaded` where the source cannot say either."""
    for architecture in architectures or ():
        for module_name in _defining_modules().get(architecture, ()):
            try:
                module = import_module(module_name)
            except NotLoaded as refused:
                found = source_class(module_name, architecture)
                if found is None:
                    raise refused from None
                return found
            entries = getattr(module, "EntryClass", None)
            for entry in entries if isinstance(entries, (list, tuple)) else [entries]:
                if isinstance(entry, type) and entry.__name__ == architecture:
                    return entry
    return None


# -- a class read from its source, where its module does not import here ----------------------

#: Set on a class :func:`source_class` built: the module it was read from.
FROM_SOURCE = "__bisect_spec_from_source__"


@functools.cache
def _module_tree(module: str) -> tuple[str, ast.Module] | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return spec.origin, _tree(spec.origin)


def _imported_from(tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
    """Where ``name`` comes from by a top-level ``from M import X [as name]`` of ``module``."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    base = module.rsplit(".", node.level)[0] if node.level else ""
                    source = ".".join(p for p in (base, node.module or "") if p)
                    return source, alias.name
    return None


@functools.cache
def _surface(module: str, name: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(the names a class defines, with its bases': methods and class attributes; the names its methods
    assign on ``self``) read from source; None where a base cannot be read (not SGLang's or torch's)."""
    found = _module_tree(module)
    if found is None:
        return None
    filename, tree = found
    class_def = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if class_def is None:
        origin = _imported_from(tree, module, name)
        return _surface(*origin) if origin is not None and origin[0].startswith("sglang.") else None
    names = {n.name for n in class_def.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    segment = ast.get_source_segment(_source(filename), class_def) or ""
    assigned = {m[1] or m[2] for m in _ASSIGNED.finditer(segment)}
    assigned |= {t.id for n in class_def.body if isinstance(n, (ast.Assign, ast.AnnAssign))  # class attributes
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    for base in class_def.bases:
        base_name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
        if base_name in ("object", "Generic", "ABC"):
            continue
        if base_name == "Module":
            import torch

            names |= set(dir(torch.nn.Module)) - {"__getattr__"}
            assigned |= _assigned_names(torch.nn.Module)
            continue
        if base_name is None:
            return None
        origin = (module, base_name) if any(isinstance(n, ast.ClassDef) and n.name == base_name for n in tree.body) \
            else _imported_from(tree, module, base_name)
        inherited = _surface(*origin) if origin is not None and origin[0].startswith("sglang.") else None
        if inherited is None:
            return None
        names |= inherited[0]
        assigned |= inherited[1]
    return frozenset(names), frozenset(assigned)


def source_reference(module: str, name: str) -> type:
    """A class of a module that does not import here, named for finding its statements in its source."""
    return type(name, (), {"__module__": module, FROM_SOURCE: module})


@functools.cache
def source_class(module: str, architecture: str) -> type | None:
    """The class ``architecture`` of ``module`` as its source defines it (a stand-in class: its names,
    its bases' and what its methods assign), where the module does not import on this machine; None when
    the module's ``EntryClass`` does not name it or a base cannot be read."""
    found = _module_tree(module)
    if found is None:
        return None
    entry = next((n.value for n in found[1].body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in n.targets)), None)
    entries = entry.elts if isinstance(entry, (ast.List, ast.Tuple)) else [entry] if entry is not None else []
    if architecture not in {e.id for e in entries if isinstance(e, ast.Name)}:
        return None
    surface = _surface(module, architecture)
    if surface is None:
        return None
    names, assigned = surface
    return _stand_in_type(architecture, module, architecture, methods=names, opaque=assigned,
                          own_getattr="__getattr__" in names, extra={FROM_SOURCE: module})


# -- the stand-in ----------------------------------------------------------------------------

#: Methods whose result the speculative path unpacks: ``embed, head = model.get_embed_and_head()``.
_PAIRS = {"get_embed_and_head": ("embedding", "head")}
_ASSIGNED = re.compile(r"\bself\.(\w+)\s*(?::[^=\n]+)?=(?!=)|(?:setattr\(\s*self|register_buffer\(|"
                       r"register_parameter\(|add_module\()\s*,?\s*[\"'](\w+)[\"']")


@functools.cache
def _assigned_names(cls: type) -> frozenset[str]:
    """Names an instance of ``cls`` gets in ``__init__`` or later (every ``self.NAME = ...`` in the
    source of the class and its bases, and names registered as buffers, parameters or modules)."""
    names: set[str] = set()
    for klass in cls.__mro__[:-1]:
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for match in _ASSIGNED.finditer(source):
            names.add(match[1] or match[2])
    return frozenset(names)


def _method(class_name: str, name: str) -> Callable[..., Any]:
    def answer(self: Any, *args: Any, **kwargs: Any) -> Any:
        parts = _PAIRS.get(name)
        if parts is not None:
            return tuple(Opaque(f"{class_name}.{name}() {part}") for part in parts)
        return Opaque(f"{class_name}.{name}(...)")
    answer.__name__ = name
    return answer


def _stand_in_type(name: str, module: str, qualname: str, *, methods: Iterable[str], opaque: Iterable[str],
                   own_getattr: bool, kept: dict[str, Any] | None = None,
                   extra: dict[str, Any] | None = None) -> type:
    """A stand-in class named ``name``: ``methods`` answer without running, ``kept`` are the class's own
    values, any other name in ``opaque`` is an :class:`Opaque` value; every other name is missing (Python's
    own ``AttributeError``), unless the class has its own ``__getattr__``."""
    namespace: dict[str, Any] = {"__module__": module, "__qualname__": qualname, "__slots__": (), **(extra or {})}
    namespace.update({m: _method(name, m) for m in methods if not (m.startswith("__") and m.endswith("__"))})
    namespace.update(kept or {})
    namespace.update({n: Opaque(f"{name}.{n}") for n in opaque if n not in namespace})
    if own_getattr:
        namespace["__getattr__"] = _dynamic(name)
    return type(name, (), namespace)


@functools.cache
def _stand_in_class(cls: type) -> type:
    methods: list[str] = []
    kept: dict[str, Any] = {}
    for name in dir(cls):
        if name.startswith("__") and name.endswith("__"):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, property) or type(value).__name__ in ("cached_property", "getset_descriptor"):
            kept[name] = Opaque(f"{cls.__name__}.{name}")
        elif isinstance(value, (staticmethod, classmethod)) or inspect.isroutine(value):
            methods.append(name)
        else:
            kept[name] = value
    own_getattr = any("__getattr__" in vars(k) for k in cls.__mro__
                      if not k.__module__.startswith(("torch.", "builtins")))
    return _stand_in_type(cls.__name__, cls.__module__, cls.__qualname__, methods=methods,
                          opaque=_assigned_names(cls), own_getattr=own_getattr, kept=kept,
                          extra={"__doc__": f"bisect-spec: stands in for a built {cls.__name__}"})


def _dynamic(class_name: str) -> Callable[[Any, str], Any]:
    """``__getattr__`` of a stand-in for a class with its own: a missing name may be answered at run time."""
    def lookup(self: Any, name: str) -> Any:
        raise NotLoaded(f"reads {class_name}.{name}, which its own __getattr__ answers on a built model")
    return lookup


def stand_in(cls: type, config: Any = None) -> Any:
    """A built ``cls`` as the speculative path meets it (see the module's notes); with the model's ``config``,
    the values its ``__init__`` decides from the config alone (:func:`decided_by_init`) are real values."""
    base = cls if FROM_SOURCE in vars(cls) else _stand_in_class(cls)
    try:
        decided = decided_by_init(cls, config) if config is not None else {}
    except (SyntaxError, ValueError, TypeError, RecursionError):  # a source the plan cannot read: names stay opaque
        decided = {}
    if decided:
        base = type(base.__name__, (base,), {"__module__": base.__module__, "__qualname__": base.__qualname__,
                                            "__slots__": (), **decided})
    return base()


#: What an ``__init__``'s decision may read and compute: the config, values it already set, constants and
#: operators. A call (building a layer, asking the runtime) is not evaluated: its result stays opaque.
_DECIDABLE = (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp,
              ast.Load, ast.cmpop, ast.boolop, ast.unaryop, ast.operator, ast.Tuple, ast.List)


def _decidable(node: ast.AST) -> bool:
    return all(isinstance(n, _DECIDABLE) and (not isinstance(n, ast.Name) or n.id in ("self", "config", "None"))
               for n in ast.walk(node))


def _self_target(node: ast.stmt) -> str | None:
    """``X`` of a plain ``self.X = ...`` (or ``self.X: T = ...``), else None."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    if len(targets) == 1 and isinstance(targets[0], ast.Attribute) and isinstance(targets[0].value, ast.Name) \
            and targets[0].value.id == "self":
        return targets[0].attr
    return None


@functools.cache
def _init_def(cls: type) -> tuple[str, ast.FunctionDef] | None:
    for klass in (cls,) if FROM_SOURCE in vars(cls) else cls.__mro__[:-1]:
        found = _class_def(klass)
        if found is None:
            continue
        init = next((n for n in found[1].body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is not None:
            return found[0], init
    return None


#: One step of an ``__init__`` as :func:`decided_by_init` runs it: ``("set", name, code)`` (code None: not
#: decidable), ``("config", attribute, code)``, ``("if", code, body, orelse, names set in either branch)``, or
#: ``("unknown", names)`` (a loop, ``with``, ``try``: what it sets is not decided).
_Step = tuple[Any, ...]


def _assigned_within(nodes: Iterable[ast.AST]) -> frozenset[str]:
    return frozenset(name for n in nodes for sub in ast.walk(n) if isinstance(sub, ast.stmt)
                     for name in [_self_target(sub)] if name)


@functools.cache
def _init_plan(cls: type) -> tuple[_Step, ...] | None:
    """The steps of ``cls.__init__`` that :func:`decided_by_init` runs, compiled once per class (with SGLang's
    file name and line numbers), or None where no ``__init__`` source is found."""
    found = _init_def(cls)
    if found is None:
        return None
    filename = found[0]

    def code(node: ast.expr) -> Any:
        return compile(ast.Expression(node), filename, "eval") if _decidable(node) else None

    def plan(body: list[ast.stmt]) -> tuple[_Step, ...]:
        steps: list[_Step] = []
        for node in body:
            name = _self_target(node)
            value = getattr(node, "value", None)
            if name is not None:
                steps.append(("set", name, code(value) if value is not None else None))
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Attribute) and isinstance(node.targets[0].value, ast.Name) \
                    and node.targets[0].value.id == "config" and _decidable(node.value):
                steps.append(("config", node.targets[0].attr, code(node.value)))
            elif isinstance(node, ast.If):
                steps.append(("if", code(node.test), plan(node.body), plan(node.orelse),
                              _assigned_within([*node.body, *node.orelse])))
            else:
                names = _assigned_within([node])
                if names:
                    steps.append(("unknown", names))
        return tuple(steps)

    return plan(found[1].body)


def decided_by_init(cls: type, config: Any) -> dict[str, Any]:
    """The names ``cls.__init__`` sets from the model's config alone, with their values: SGLang's own ``if``
    tests and plain assignments of that ``__init__`` (its file and lines), evaluated on ``config`` with the
    ``__init__``'s writes to it kept apart, everything else skipped (layers are built by calls: never
    evaluated). A name another method sets too (``load_weights``) is not decided here: only a loaded model
    knows it. Example: an EAGLE3 head's ``load_lm_head_from_target`` (True when its config has no
    ``draft_vocab_size`` and untied embeddings)."""
    import types

    steps = _init_plan(cls)
    if steps is None:
        return {}
    written = _Written(config)
    own = types.SimpleNamespace()
    values: dict[str, Any] = {}
    unknown: set[str] = set()
    scope = {"self": own, "config": written, "__builtins__": {}}

    def run(plan: tuple[_Step, ...]) -> None:
        for step in plan:
            if step[0] == "set":
                if step[2] is None:  # a call (building a layer): not decided
                    unknown.add(step[1])
                    continue
                try:
                    value = eval(step[2], scope)
                except Exception:  # a read the config cannot answer: not decided
                    unknown.add(step[1])
                    continue
                setattr(own, step[1], value)
                values[step[1]] = value
            elif step[0] == "config":  # ``config.draft_vocab_size = config.vocab_size``: kept apart
                with contextlib.suppress(Exception):
                    setattr(written, step[1], eval(step[2], scope))
            elif step[0] == "if":
                try:
                    taken = None if step[1] is None else bool(eval(step[1], scope))
                except (Exception, NotLoaded):  # a test the config alone does not answer
                    taken = None
                if taken is None:
                    unknown.update(step[4])
                else:
                    run(step[2] if taken else step[3])
            else:
                unknown.update(step[1])

    run(steps)
    decided = {}
    for name, value in values.items():
        if name in unknown or assigning_method(cls, name) is not None:
            continue
        if value is written:  # ``self.config = config``: the model's own config, as the __init__ left it
            if vars(written)["_written"]:
                continue  # the __init__ wrote it: only the built model's copy has those values
            value = config
        decided[name] = value
    return decided


class _Written:
    """The config an ``__init__`` is handed, its writes kept apart (``config.draft_vocab_size = ...``): reads
    see them, the caller's config never does (SGLang shares one config object between evaluations)."""

    def __init__(self, config: Any) -> None:
        vars(self).update(_config=config, _written={})

    def __getattr__(self, name: str) -> Any:
        written = vars(self)["_written"]
        return written[name] if name in written else getattr(vars(self)["_config"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        vars(self)["_written"][name] = value


# -- SGLang's statements ---------------------------------------------------------------------

class Statements:
    """Statements of one SGLang function, to run out of it: its file, the function's name, the nodes."""

    def __init__(self, filename: str, function: str, nodes: list[ast.stmt], module: str, owner: str = "",
                 parameters: tuple[str, ...] = ()) -> None:
        self.filename, self.function, self.nodes, self.module = filename, function, nodes, module
        #: the class whose method holds them (its other methods are the ones ``self`` calls)
        self.owner = owner
        #: the method's own parameters (after ``self``), which the statements may read
        self.parameters = parameters

    @property
    def where(self) -> str:
        lines = f"{self.nodes[0].lineno}-{self.nodes[-1].end_lineno}"
        return f"{self.filename.replace(os.sep, '/').split('/sglang/')[-1]}:{lines} in {self.function}"


@functools.cache
def _source(filename: str) -> str:
    with open(filename, encoding="utf-8-sig") as handle:  # utf-8-sig: 0.5.12 has a file with a BOM
        return handle.read()


@functools.cache
def _tree(filename: str) -> ast.Module:
    return ast.parse(_source(filename), filename)


def _class_def(cls: type) -> tuple[str, ast.ClassDef] | None:
    filename = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if not filename:  # a class of a module that does not import here (:func:`source_reference`)
        found = _module_tree(cls.__module__)
        filename = found[0] if found is not None else None
    if not filename or not filename.endswith(".py"):  # a compiled base (``msgspec.Struct``): no source to read
        return None
    for node in _tree(filename).body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return filename, node
    return None


@functools.cache
def assigning_method(cls: type, name: str) -> str | None:
    """``Class.method`` of the first method (the class's, then its bases') that sets ``self.<name>``, or
    None: where a missing attribute of an object built by hand is one SGLang sets in a step not run."""
    for klass in cls.__mro__[:-1]:
        found = _class_def(klass)
        if found is None:
            continue
        for node in found[1].body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name == "__init__":
                continue
            for target in ast.walk(node):
                if (isinstance(target, ast.Attribute) and isinstance(target.ctx, ast.Store) and target.attr == name
                        and isinstance(target.value, ast.Name) and target.value.id == "self"):
                    return f"{klass.__name__}.{node.name}"
    return None


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return None


def _paths(body: list[ast.stmt], names: frozenset[str]) -> Iterable[list[tuple[list[ast.stmt], int]]]:
    """For every call of one of ``names`` in ``body``: the chain of (statement list, index) down to it."""
    for index, statement in enumerate(body):
        inner = [child for field in ("body", "orelse", "finalbody") for child in [getattr(statement, field, None)]
                 if isinstance(child, list) and child and isinstance(child[0], ast.stmt)]
        inner += [handler.body for handler in getattr(statement, "handlers", [])]
        nested = False
        for block in inner:
            for path in _paths(block, names):
                nested = True
                yield [(body, index), *path]
        if not nested:
            parts = [statement] if not inner else [getattr(statement, "test", None), *getattr(statement, "items", [])]
            if any(_called(n) in names for part in parts if part is not None for n in ast.walk(part)):
                yield [(body, index)]


_CONDITION = re.compile(r"eagle|spec|aux|dflash|draft", re.I)


@functools.cache
def aux_capture_statements(runner_cls: type) -> Statements | None:
    """Where the target ``ModelRunner`` asks the model to capture auxiliary hidden states: the call of
    ``configure_aux_hidden_state_capture`` (0.5.18+) or of ``init_aux_hidden_state_capture`` (0.5.12+),
    else the speculative ``if`` around the first call of ``set_eagle3_layers_to_capture``."""
    found = _class_def(runner_cls)
    if found is None:
        return None
    filename, class_def = found
    methods = [n for n in class_def.body if isinstance(n, ast.FunctionDef)]
    for names in (frozenset({"configure_aux_hidden_state_capture", "init_aux_hidden_state_capture"}),
                  frozenset({"set_eagle3_layers_to_capture"})):
        for method in methods:
            if method.name in names:
                continue
            for path in _paths(method.body, names):
                chosen = path[-1]
                for body, index in reversed(path[:-1]):
                    node = body[index]
                    if not isinstance(node, ast.If) or not _CONDITION.search(ast.unparse(node.test)):
                        break
                    chosen = (body, index)
                body, index = chosen
                return Statements(filename, method.name, [body[index]], runner_cls.__module__)
    return None


def after_attention_backends(statements: Statements, runner_cls: type) -> bool:
    """Whether the runner builds its attention backends before it runs ``statements`` (0.5.9's
    ``initialize`` asks for the capture after ``init_attention_backend``; elsewhere it comes first)."""
    found = _class_def(runner_cls)
    if found is None:
        return False
    for method in (n for n in found[1].body if isinstance(n, ast.FunctionDef) and n.name == statements.function):
        return any(isinstance(n, ast.Call) and _called(n) in ("init_attention_backend", "init_attention_backends")
                   and n.lineno < statements.nodes[0].lineno for n in ast.walk(method))
    return False


def _methods(cls: type) -> Iterator[tuple[type, str, ast.ClassDef, ast.FunctionDef]]:
    """Each method of ``cls`` and of its bases, as written: (its class, the file, the class's node, the method's)."""
    for klass in cls.__mro__[:-1]:
        found = _class_def(klass)
        if found is None:
            continue
        filename, class_def = found
        for method in (n for n in class_def.body if isinstance(n, ast.FunctionDef)):
            yield klass, filename, class_def, method


def _calling(body: list[ast.stmt], name: str) -> list[int]:
    """The indices of the statements of ``body`` that call ``name`` (anywhere inside them)."""
    return [i for i, s in enumerate(body) if any(_called(n) == name for n in ast.walk(s))]


#: What the runner's ``initialize`` sets before the load that what follows reads, as steps of its own (0.5.16+) or
#: inline: the memory saver (the load uses it), the token oracle (the canary installed once the pool is built).
_SET_BEFORE_THE_LOAD = frozenset({"init_memory_saver_adapter", "init_token_oracle",  # 0.5.16+'s steps, and what
                                  "memory_saver_adapter", "_token_oracle_manager"})  # they set (earlier, inline)


@functools.cache
def pools_sized_apart(runner_cls: type) -> bool:
    """Whether the target ``ModelRunner`` sizes its memory pool in a method of its own, ``alloc_memory_pool``, which
    the scheduler calls on every worker once the target's and the draft's weights are loaded (0.5.14+), rather
    than in ``initialize`` right after the load (0.4.6 … 0.5.13)."""
    return any(method.name == "alloc_memory_pool" for _, _, _, method in _methods(runner_cls))


@functools.cache
def memory_pool_statements(runner_cls: type) -> Statements | None:
    """Where the target ``ModelRunner`` loads its weights and sizes its memory pool: the statements of its method
    that calls ``load_model()`` and then ``init_memory_pool(...)`` (``initialize``, 0.4.6 … 0.5.13), from the load
    to the one that sizes the pool (and the memory-saver adapter's assignment before them, which the load uses),
    with the method's own plain assignments of the locals they read before them. Where the runner sizes its pool
    apart (:func:`pools_sized_apart`, 0.5.14+: the scheduler sizes every worker's pool after the draft's weights
    load, through ``alloc_memory_pool``), from the load to the method's end: what ``initialize`` does after the
    load (the KV cache's dtype, ...), which the sizing reads. The method's parameters (``min_per_gpu_memory``) are
    in ``Statements.parameters``.
    """
    apart = pools_sized_apart(runner_cls)
    for klass, filename, class_def, method in _methods(runner_cls):
        body = method.body
        loads, pools = _calling(body, "load_model"), _calling(body, "init_memory_pool")
        if not loads or (method.name != "initialize" if apart else (not pools or pools[0] <= loads[0])):
            continue
        # the load itself, and what ``initialize`` sets before it that the load uses (its memory saver)
        before = [s for s in body[:loads[0]] if (isinstance(s, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr in _SET_BEFORE_THE_LOAD for t in s.targets)) or (
            isinstance(s, ast.Expr) and _called(s.value) in _SET_BEFORE_THE_LOAD)]
        nodes = before + (body[loads[0]:] if apart else body[loads[0]:pools[0] + 1])
        parameters = tuple(a.arg for a in method.args.args[1:])
        return Statements(filename, method.name, _locals_before(body, nodes), klass.__module__, class_def.name,
                          parameters)
    return None


def _plain_value(node: ast.AST) -> bool:
    """A name, an attribute chain on one, or a call of one with no arguments (``get_parallel()``, ``get_tp_group()``)."""
    if isinstance(node, ast.Call):
        return not node.args and not node.keywords and _plain_value(node.func)
    if isinstance(node, ast.Attribute):
        return _plain_value(node.value)
    return isinstance(node, ast.Name)


#: The name :func:`run` binds to what an assignment run on its own (:func:`_on_its_own`) may stop at: a failure, or a
#: read of what only a loaded server has (:class:`NotLoaded`).
STOPS = "__bisect_spec_stops__"


def _on_its_own(statement: ast.stmt, handled: str = "Exception") -> ast.stmt:
    """``statement`` in a ``try`` that lets the next run when it fails (``except Exception: pass``; ``handled``: the
    name of what else it lets through, :data:`STOPS`)."""
    handler = ast.ExceptHandler(type=ast.Name(id=handled, ctx=ast.Load()), name=None, body=[ast.Pass()])
    guarded = ast.Try(body=[statement], handlers=[handler], orelse=[], finalbody=[])
    for node in ast.walk(guarded):
        if node is not statement and isinstance(node, (ast.stmt, ast.expr, ast.excepthandler)):
            ast.copy_location(node, statement)
    return guarded


@functools.cache
def device_step_assignments(runner_cls: type) -> Statements | None:
    """What the runner's device step (``init_torch_distributed``) sets from the parallel state once the process
    group exists: its assignments of a plain value (:func:`_plain_value`) to ``self.<name>`` or to a local
    (0.5.21's ``parallel = get_parallel()``, ``self.tp_rank = parallel.tp_rank``; 0.5.14's ``self.tp_group =
    get_tp_group()``), in order, each on its own (:func:`_on_its_own`: one that reads the device work's result
    leaves its name unset). Its other statements (the memory measured, the process group built) are device
    work. None where the runner has no such method or assignment."""
    for klass, filename, class_def, method in _methods(runner_cls):
        if method.name != "init_torch_distributed":
            continue
        taken = [statement for statement in ast.walk(method) if isinstance(statement, ast.Assign)
                 and len(statement.targets) == 1 and _plain_value(statement.value)
                 and (isinstance(statement.targets[0], ast.Name) or _self_target(statement) is not None)]
        taken.sort(key=lambda statement: (statement.lineno, statement.col_offset))
        if taken:
            return Statements(filename, method.name, [_on_its_own(statement) for statement in taken], klass.__module__,
                              class_def.name)
    return None


@functools.cache
def running_requests_statements(runner_cls: type) -> Statements | None:
    """Where the target ``ModelRunner`` takes its running requests from the pool it sized, right after the sizing:
    the assignments of ``self.max_running_requests`` that follow ``init_memory_pool(...)`` in the method of
    :func:`memory_pool_statements` (0.4.6 … 0.5.9), with the method's plain assignments of the locals they read.
    None where the sizing sets it itself (0.5.10+) or the runner does not size its pool there."""
    for klass, filename, class_def, method in _methods(runner_cls):
        body = method.body
        pools = _calling(body, "init_memory_pool")
        if not pools or not _calling(body[:pools[0]], "load_model"):
            continue
        after = pools[0] + 1
        while after < len(body) and _assigns_self(body[after], "max_running_requests"):
            after += 1
        if after == pools[0] + 1:
            return None
        return Statements(filename, method.name, _locals_before(body, body[pools[0] + 1:after]), klass.__module__,
                          class_def.name)
    return None


def _only_checks(statement: ast.stmt) -> bool:
    """Whether ``statement`` only checks: an ``assert``, a ``raise``, a call of a ``check`` function, or an ``if``
    holding nothing else (a ``pass`` aside)."""
    if isinstance(statement, (ast.Assert, ast.Raise, ast.Pass)):
        return True
    if isinstance(statement, ast.Expr):
        return "check" in (_called(statement.value) or "")
    if isinstance(statement, ast.If):
        return all(_only_checks(s) for s in [*statement.body, *statement.orelse])
    return False


@functools.cache
def checks_after_initialize(runner_cls: type) -> Statements | None:
    """The target ``ModelRunner.__init__``'s checks after its ``initialize()`` (which loads the weights): its own
    ``check_*`` calls (0.5.9+'s ``check_quantized_moe_compatibility``: the MoE's widths against tp, ep and the
    quantisation's block), the ``if`` blocks that only assert or raise (every release's "Pipeline Parallel is not
    compatible with this model", where ``--pp-size`` > 1), and the plain assignments of ``self`` attributes those
    read (``self.support_pp``, from the built model's ``forward``). What else ``__init__`` does there (the weight
    updaters, the elastic-EP joiner) is left out. None where ``__init__`` has no such statement."""
    for klass, filename, class_def, method in _methods(runner_cls):
        if method.name != "__init__":
            continue
        calls = _calling(method.body, "initialize")
        if not calls:
            continue
        after = method.body[calls[0] + 1:]
        checks = [s for s in after if _only_checks(s)]
        read = {n.attr for c in checks for n in ast.walk(c) if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name) and n.value.id == "self"}
        kept = [s for s in after if s in checks or (isinstance(s, ast.Assign) and len(s.targets) == 1
                and isinstance(s.targets[0], ast.Attribute) and isinstance(s.targets[0].value, ast.Name)
                and s.targets[0].value.id == "self" and s.targets[0].attr in read)]
        if not checks:
            return None
        return Statements(filename, method.name, kept, klass.__module__, class_def.name)
    return None


@functools.cache
def steps_before_graphs(runner_cls: type) -> frozenset[str]:
    """The runner's own methods its ``initialize`` calls (``self.<method>()``, a statement of its own) after it
    sizes the pool and before it captures the CUDA graphs (``init_device_graphs``): 0.5.12's
    ``maybe_init_ngram_embedding``, which sets what the graph runner reads. Empty where there is no such span."""
    for _, _, _, method in _methods(runner_cls):
        body = method.body
        pools, graphs = _calling(body, "init_memory_pool"), _calling(body, "init_device_graphs")
        if not pools or not graphs or graphs[-1] <= pools[0]:
            continue
        return frozenset(
            name for statement in body[pools[0] + 1:graphs[-1]] if isinstance(statement, ast.Expr)
            for name in [_called(statement.value)] if name is not None and isinstance(statement.value, ast.Call)
            and isinstance(statement.value.func, ast.Attribute) and isinstance(statement.value.func.value, ast.Name)
            and statement.value.func.value.id == "self")
    return frozenset()


@functools.cache
def capture_sizes_statements(graph_runner_cls: type) -> Statements | None:
    """Where the target's CUDA-graph runner chooses the batch sizes it captures: its ``__init__`` from the start
    to the statement that calls ``get_batch_sizes_to_capture`` (0.4.6 … 0.5.13's ``CudaGraphRunner``: the tokens per
    request it captures, by the speculative algorithm, then SGLang's sizes against the request pool). Its
    parameters (``model_runner``; 0.5.12+'s keyword-only ``attn_backend``, ...) are in ``Statements.parameters``.
    None where the class has no such statement."""
    for klass, filename, class_def, method in _methods(graph_runner_cls):
        sized = _calling(method.body, "get_batch_sizes_to_capture") if method.name == "__init__" else []
        if sized:
            parameters = tuple(a.arg for a in [*method.args.args[1:], *method.args.kwonlyargs])
            return Statements(filename, method.name, method.body[:sized[0] + 1], klass.__module__, class_def.name,
                              parameters)
    return None


def _assigns_self(statement: ast.stmt, name: str) -> bool:
    """Whether ``statement`` is ``self.<name> = ...``."""
    return isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == name and isinstance(t.value, ast.Name) and t.value.id == "self"
        for t in statement.targets)


@functools.cache
def requests_check_statements(worker_cls: type) -> Statements | None:
    """The target worker's check that its runner has room for a request, once the runner is built: in its
    ``__init__``, the first ``assert`` on ``max_running_requests`` (``"max_running_request is zero"``), with the
    assignment of ``self.max_running_requests`` before it where there is one (0.5.1 … 0.5.13: from
    ``self.model_runner.max_running_requests``). 0.5.14+ check in ``alloc_memory_pool``, once the scheduler sized the
    pools: there the statements run from the check to the method's end (the next, "Memory pool size is too small",
    reads the request length the pool leaves). None where the class has no such check."""
    for klass, filename, class_def, method in _methods(worker_cls):
        body = method.body
        checks = [i for i, s in enumerate(body) if method.name in ("__init__", "alloc_memory_pool")
                  and isinstance(s, ast.Assert) and any(
            isinstance(n, ast.Attribute) and n.attr == "max_running_requests" for n in ast.walk(s.test))]
        if checks and method.name == "alloc_memory_pool":  # 0.5.14+: the worker's validation, to the method's end
            return Statements(filename, method.name, body[checks[0]:], klass.__module__, class_def.name)
        if checks:
            taken = [s for s in body[:checks[0]] if _assigns_self(s, "max_running_requests")]
            return Statements(filename, method.name, [*taken[-1:], body[checks[0]]], klass.__module__, class_def.name)
    return None


@functools.cache
def lm_head_statements(worker_cls: type) -> Statements | None:
    """Where the EAGLE family's worker shares the target's embedding and head with the draft: from the
    statement that calls the target's ``get_embed_and_head`` to the last of its siblings that calls the
    draft's ``set_embed_and_head`` or ``set_embed``. Looked for in the worker's class and its bases, then
    in the other classes of their modules (0.5.9+'s v2 workers delegate to a draft worker class there)."""
    classes: list[tuple[str, ast.ClassDef, str]] = []
    for klass in worker_cls.__mro__[:-1]:
        found = _class_def(klass)
        if found is not None:
            classes.append((found[0], found[1], klass.__module__))
    for filename, _, module in list(classes):
        classes += [(filename, node, module) for node in _tree(filename).body
                    if isinstance(node, ast.ClassDef) and all(node is not c[1] for c in classes)]
    for filename, class_def, module in classes:
        for method in (n for n in class_def.body if isinstance(n, ast.FunctionDef)):
            for body, start in _embed_and_head_statements(method.body):
                last = max((i for i in range(start, len(body))
                            if any(_called(n) in ("set_embed_and_head", "set_embed") for n in ast.walk(body[i]))),
                           default=None)
                if last is not None:  # with the function's own imports before them (0.5.23: ``unwrap_lora_layer``)
                    nodes = _whole_loop(method.body, body[start:last + 1])
                    imports = [n for n in body[:start] if isinstance(n, (ast.Import, ast.ImportFrom))]
                    return Statements(filename, method.name, _locals_before(method.body, imports + nodes), module,
                                      class_def.name)
    return None


def _whole_loop(method_body: list[ast.stmt], nodes: list[ast.stmt]) -> list[ast.stmt]:
    """``nodes``, or the loop of the method's own body that holds them all (0.5.21+'s multi-layer EAGLE worker
    shares the embedding and head once per step, inside ``for i in range(self.speculative_num_steps)``)."""
    for statement in method_body:
        if isinstance(statement, (ast.For, ast.While)) and nodes[0] is not statement:
            inside = {id(n) for n in ast.walk(statement)}
            if all(id(node) in inside for node in nodes):
                return [statement]
    return nodes


def _locals_before(method_body: list[ast.stmt], nodes: list[ast.stmt]) -> list[ast.stmt]:
    """``nodes``, after the method's own plain assignments before them of the locals they read
    (0.5.21+: ``target_runner = self.target_worker.model_runner``)."""
    read = {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    first = next((i for i, statement in enumerate(method_body) if any(n is nodes[0] for n in ast.walk(statement))),
                 None)
    if first is None:
        return nodes
    kept = [statement for statement in method_body[:first] if isinstance(statement, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id in read for t in statement.targets)
            and all(statement is not node for node in nodes)]
    return kept + nodes


def _embed_and_head_statements(body: list[ast.stmt]) -> Iterable[tuple[list[ast.stmt], int]]:
    """Statements that get the target's embedding and head: a call of ``get_embed_and_head``, or (0.5.23's
    helpers) an assignment to ``embed, head``."""
    for path in _paths(body, frozenset({"get_embed_and_head"})):
        yield path[-1]
    for index, statement in enumerate(body):
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if any(isinstance(t, ast.Tuple) and [getattr(e, "id", None) for e in t.elts] == ["embed", "head"]
               for t in targets):
            yield body, index
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                yield from _embed_and_head_statements(inner)


def owner_methods(statements: Statements) -> dict[str, Any]:
    """The functions of the class that holds ``statements`` (and of its bases), by name: what ``self.x()``
    calls in them, run as SGLang's own code."""
    owner = getattr(sys.modules.get(statements.module), statements.owner, None)
    methods: dict[str, Any] = {}
    for klass in reversed(owner.__mro__[:-1]) if isinstance(owner, type) else ():
        methods.update({k: v for k, v in vars(klass).items() if inspect.isfunction(v) and not k.startswith("__")})
    return methods


@functools.cache
def _compiled(statements: Statements, names: tuple[str, ...]) -> Any:
    template = ast.parse(f"def {statements.function}({', '.join(names)}): pass").body[0]
    assert isinstance(template, ast.FunctionDef)
    for node in ast.walk(template):  # the def sits on the first statement's line; the statements keep theirs
        if isinstance(node, (ast.stmt, ast.expr, ast.arg)):
            node.lineno = node.end_lineno = statements.nodes[0].lineno
    template.body = list(statements.nodes)
    module = ast.Module(body=[template], type_ignores=[])
    ast.fix_missing_locations(module)
    return compile(module, statements.filename, "exec")


def run(statements: Statements, **names: Any) -> None:
    """Run SGLang's ``statements`` in their module's globals, with ``names`` as the function's locals."""
    module = sys.modules.get(statements.module)  # not imported: the statements' globals are then builtins only
    namespace: dict[str, Any] = dict(vars(module)) if module is not None else {"__name__": statements.module}
    namespace[STOPS] = (Exception, NotLoaded)
    exec(_compiled(statements, tuple(names)), namespace)  # SGLang's own statements, compiled above
    try:
        namespace[statements.function](**names)
    except NameError as exc:  # a local the function set before these statements: not SGLang's failure
        if exc.name in namespace or exc.name in vars(builtins):
            raise
        what = "a local of" if module is not None else "a name of its module (not importable here), or a local of"
        raise NotLoaded(f"reads {exc.name}, {what} {statements.function} set before {statements.where}") from None

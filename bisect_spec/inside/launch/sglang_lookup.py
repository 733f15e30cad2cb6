"""Finding SGLang's names by feature, never by version string, and calling them with the arguments the
release accepts; setting an attribute for a while.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

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


def _instead_of(instead: Callable[..., None], original: Any) -> Callable[..., None]:
    """A method that calls ``instead(original, *args)`` (``args`` with the instance first, as a method gets them)."""

    def method(*args: Any, **kwargs: Any) -> None:
        return instead(original, *args, **kwargs)

    return method


@contextlib.contextmanager
def _on_runner(runner: Any, name: str, value: Any) -> Iterator[None]:
    """``runner.<name>`` is ``value`` while it lasts, then unset."""
    setattr(runner, name, value)
    try:
        yield
    finally:
        vars(runner).pop(name, None)


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

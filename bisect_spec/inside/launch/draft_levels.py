"""The draft worker after its draft runner (mirrors nothing of SGLang's: the parsing behind the ``draft_worker``
stage, :mod:`.draft_worker`): the constructors on the way from the speculative worker to the draft's ``ModelRunner``,
each cut at the statement that builds the next, and what each does after that cut that a CPU can run.
"""

from __future__ import annotations

import ast
import functools
import sys
from typing import Any, NamedTuple

from .siblings import model_classes


class DraftLevel(NamedTuple):
    """One constructor on the way from the speculative worker to the draft's ``ModelRunner``: the worker's own
    ``__init__`` (0.5.12+'s v2 workers: then their inner draft worker's), the draft's model worker's
    (``TpModelWorker``), each cut at the statement that builds the next."""

    #: the class whose ``__init__`` this is (the object's class, or a base whose ``__init__`` it inherits)
    owner: type
    #: the statement that builds the next level (or the draft's runner), as SGLang wrote it
    cut: ast.stmt
    #: the next level's class; None where the cut builds the draft's ``ModelRunner``
    builds: type | None
    #: the ``self`` attribute the cut stores what it builds in (``_draft_worker``, ``draft_worker``,
    #: ``_model_runner``); None where it builds this same object (``super().__init__``)
    stores: str | None
    #: what ``__init__`` does after the cut that a CPU can run: its plain assignments, the branch of an ``if`` that
    #: only assigns, and its checks (:func:`_checking`); None where there is none
    after: model_classes.Statements | None
    #: whether :attr:`after` holds a check (not only assignments)
    checks: bool


def _own_init(cls: type) -> tuple[type, str, ast.ClassDef, ast.FunctionDef] | None:
    for klass, filename, class_def, method in model_classes._methods(cls):
        if method.name == "__init__":
            return klass, filename, class_def, method
    return None


def _self_method(cls: type, name: str) -> ast.FunctionDef | None:
    return next((method for _, _, _, method in model_classes._methods(cls) if method.name == name), None)


def _runner_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (model_classes._called(node) or "").endswith("ModelRunner") \
        and isinstance(node.func, ast.Name)


def _built_by(call: ast.Call, klass: type, self_cls: type) -> tuple[type | None, bool] | None:
    """What ``call`` in ``klass.__init__`` builds on the way to the draft's runner: (the next level's class, or None
    for the runner itself; whether it is this same object), or None where it builds none of them."""
    func = call.func
    if _runner_call(call):
        return None, False
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        method = _self_method(self_cls, func.attr)  # 0.5.14+'s TpModelWorker: ``self._init_model_runner()``
        if method is not None and any(_runner_call(n) for n in ast.walk(method)):
            return None, False
        return None
    names = vars(sys.modules[klass.__module__]) if klass.__module__ in sys.modules else {}
    built: Any = None
    same = False
    if isinstance(func, ast.Name):
        built = names.get(func.id)
    elif isinstance(func, ast.Attribute) and func.attr == "__init__":
        same = True
        if isinstance(func.value, ast.Call) and model_classes._called(func.value) == "super":
            built = klass.__mro__[1]
        elif isinstance(func.value, ast.Name):
            built = names.get(func.value.id)
    if isinstance(built, type) and built.__module__.startswith("sglang.") \
            and str(getattr(sys.modules.get(built.__module__), "__file__", "")).endswith(".py") \
            and _cut_of(built, self_cls if same else built) is not None:
        return built, same
    return None


def _cut_of(klass: type, self_cls: type) -> tuple[int, type | None, bool] | None:
    """The index of the statement of ``klass``'s ``__init__`` that builds the draft's runner or a level on the way,
    what it builds and whether that is the same object."""
    found = _own_init(klass)
    if found is None:
        return None
    owner, _, _, method = found
    for index, statement in enumerate(method.body):
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                built = _built_by(node, owner, self_cls)
                if built is not None:
                    return index, built[0], built[1]
    return None


def _stores(statement: ast.stmt, owner: type, self_cls: type) -> str | None:
    """The ``self`` attribute the cut statement stores what it builds in: its assignment (in a ``with``) whose value
    builds it, or that of the ``self`` method it calls (``self._model_runner = ModelRunner(...)``)."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Assign) and any(isinstance(n, ast.Call) and _built_by(n, owner, self_cls) is not None
                                                and not _self_call(n) for n in ast.walk(node.value)):
            return model_classes._self_target(node)
        if isinstance(node, ast.Call) and _self_call(node):
            method = _self_method(self_cls, node.func.attr)  # type: ignore[attr-defined]
            for inner in ast.walk(method) if method is not None else ():
                if isinstance(inner, ast.Assign) and any(_runner_call(n) for n in ast.walk(inner.value)):
                    return model_classes._self_target(inner)
    return None


def _self_call(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"


def _assigns_plainly(statement: ast.stmt) -> bool:
    """``self.x = <plain value>`` / ``x = <plain value>`` (:func:`_plain_value`), or of a constant (``self.tokenizer =
    self.processor = None``)."""
    return isinstance(statement, ast.Assign) and (model_classes._plain_value(statement.value) or isinstance(
        statement.value, ast.Constant)) and all(isinstance(t, ast.Name) or (
            isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self")
        for t in statement.targets)


def _only_assigns(statements: list[ast.stmt]) -> bool:
    return all(_assigns_plainly(s) or isinstance(s, ast.Pass) for s in statements)


def _checking(statement: ast.stmt) -> bool:
    """A check (:func:`_only_checks`), or a call of one of the object's own methods that validates
    (``self._validate_vocab_compatibility(...)``)."""
    if model_classes._only_checks(statement):
        return True
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
        and isinstance(statement.value.func, ast.Attribute) and isinstance(statement.value.func.value, ast.Name) \
        and statement.value.func.value.id == "self" and "validate" in statement.value.func.attr


def _settled(statement: ast.stmt) -> ast.stmt | None:
    """What of ``statement`` after the cut a CPU runs: a plain assignment, each on its own (:func:`_on_its_own`); an
    ``if`` one of whose branches only assigns (the other, which does more, left out: what it sets stays unset: the
    draft's model worker skips its tokenizer, ``if ... or self.is_draft_worker: self.tokenizer = None``)."""
    if _assigns_plainly(statement):
        return model_classes._on_its_own(statement, model_classes.STOPS)
    if isinstance(statement, ast.If) and ((statement.body and _only_assigns(statement.body)) or (
            statement.orelse and _only_assigns(statement.orelse))):
        kept = ast.If(test=statement.test, body=statement.body if _only_assigns(statement.body) else [ast.Pass()],
                      orelse=statement.orelse if _only_assigns(statement.orelse) else [])
        return ast.copy_location(kept, statement)
    return None


@functools.cache
def draft_levels(worker_cls: type) -> tuple[DraftLevel, ...]:
    """The constructors from the speculative worker ``worker_cls`` down to the draft's ``ModelRunner``
    (:class:`DraftLevel`), outermost first; empty where its ``__init__`` builds no draft runner (NGRAM)."""
    levels: list[DraftLevel] = []
    object_cls = init_cls = worker_cls  # the class of the object built; the class whose ``__init__`` builds it
    while len(levels) < 6:
        found, cut = _own_init(init_cls), _cut_of(init_cls, object_cls)
        if found is None or cut is None:
            break
        owner, filename, class_def, method = found
        index, builds, same = cut
        # the draft's model worker's own checks after its runner read the runner's pool (never sized for the draft
        # here): only what it assigns is run
        checks = [s for s in method.body[index + 1:] if builds is not None and _checking(s)]
        after = [kept for statement in method.body[index + 1:]
                 for kept in [statement if statement in checks else _settled(statement)] if kept is not None]
        parameters = tuple(a.arg for a in [*method.args.args[1:], *method.args.kwonlyargs])
        statements = model_classes.Statements(filename, method.name, model_classes._locals_before(method.body, after),
                                              owner.__module__, class_def.name, parameters) if after else None
        stores = None if same else _stores(method.body[index], owner, object_cls)
        levels.append(DraftLevel(owner, method.body[index], builds, stores, statements,
                                 bool(checks)))
        if builds is None:
            break
        init_cls = builds
        if not same:
            object_cls = builds
    return tuple(levels)

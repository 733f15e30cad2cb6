"""What a release's speculative checks read, and the values their branches test.

The sweep space comes from the release's own code, not from a hand list (issue 12, item 3).
This module reads the release's source (no import, no execution) and answers, per
``ServerArgs`` field: does a speculative check read it, and against which constants do its
branches compare it.

**Scope: the speculative checks.** Every condition of ``srt/arg_groups/speculative_hook.py``
(0.5.13+); in ``srt/server_args.py``, the other ``srt/arg_groups/*.py`` modules and the
launch path's modules before the first GPU step (``engine.py``, ``model_config.py``,
``tokenizer_manager.py``), every ``if``/``while``/``assert`` condition that reads a
``speculative_*`` field, every condition nested under one, every condition of a branch that
holds one, and the early exits (``if not cfg.enable_unified_memory: return``) of a function
that has one; and everything a *speculative handler* reads, a function that returns early unless
speculative decoding is on (``if cfg.speculative_algorithm in ["NGRAM", None]: return``), whose
checks may sit in a list of ``(condition, reason)`` pairs rather than in ``if`` statements.
These are the checks ``launch_server`` runs on a speculative configuration
wherever they live: ``check_server_args``, the validation hook, LoRA's, disaggregation's and
unified memory's compatibility checks, the attention-backend handlers. A condition that
reads no speculative field and guards none cannot decide a speculative check; whatever it
checks is met on the way (masking).

**Reads.** ``X.field`` and ``getattr(X, "field")`` for any receiver (``self``,
``server_args``, ``args``), and a bare name (a helper's parameter named after its field:
``_resolve_speculative_algorithm_alias(speculative_algorithm, ...)``), where ``field`` is a
``dest`` of the release's parser: the
parser maps it to its flag (``--fp8-gemm-backend`` sets ``fp8_gemm_runner_backend``), so
names alone never have to match.

**Values that reach each branch.** Each comparison of a read with constants:
``==``/``!=`` and ``in``/``not in`` a tuple, list or set give the constants themselves;
``<``, ``<=``, ``>``, ``>=`` give the boundary on both sides (``page_size > 1``: 1 and 2).
Truthiness (``if self.enable_lora:``) needs no value: a switch is swept on and off.

**Not seen**: a check that reaches speculation only through a helper it calls
(interprocedural), and a value copied to a local variable before it is compared
(``ragged_mode = envs.X.get()``: the variable joins, the constant does not).

Why hand-written: no maintained library does intra-procedural read/compare extraction over
Python source in a few dozen lines; ``ast`` from the standard library does the parsing.
Standard library only: this runs inside a release environment (``worker_main``).
"""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Iterable, Iterator
from typing import Any

from bisect_spec.inside.launch.environment import ENV_READ

#: Where the speculative checks live: a whole module from 0.5.13, and the argument modules that
#: hold functions reading speculative fields (every release).
SPECULATIVE_MODULE = os.path.join("srt", "arg_groups", "speculative_hook.py")
ARGUMENT_MODULES = (os.path.join("srt", "server_args.py"), os.path.join("srt", "arg_groups"),
                    # the launch path's modules up to the first GPU step (the stages of launch/)
                    os.path.join("srt", "entrypoints", "engine.py"), os.path.join("srt", "configs", "model_config.py"),
                    os.path.join("srt", "managers", "tokenizer_manager.py"))
#: A read of a field under this prefix puts a function in scope.
SPECULATIVE_FIELD = "speculative_"
ALGORITHM_FIELD = "speculative_algorithm"

_BOUNDARY = {ast.Lt: (-1, 0), ast.LtE: (0, 1), ast.Gt: (0, 1), ast.GtE: (-1, 0)}


def speculative_reads(package_root: str, dests: Iterable[str]) -> dict[str, list[Any]]:
    """``{dest: [constants its branches compare it with]}`` for every parser field a speculative
    check tests (an empty list: tested, never compared with a constant), and ``{"SGLANG_X": []}``
    for every environment variable one reads (``assert not envs.SGLANG_DISABLE_LAZY_COMPACTION.get()``).

    Constants keep their source order of first appearance, without duplicates.
    """
    known = set(dests)
    found: dict[str, list[Any]] = {}
    for path, tree in _argument_trees(package_root):
        for function in _functions(tree):
            tests: list[ast.AST] = list(_speculative_tests(function.body, known, path.endswith(SPECULATIVE_MODULE)))
            exits = list(_early_exits(function.body))
            if any(_reads_speculative(test, known) for test in exits):
                # a speculative handler (it returns unless speculative decoding is on): all it reads and compares
                tests = [function]
            elif tests:  # the early exits of a function with speculative checks decide whether they run
                tests += [t for t in exits if not any(t is seen for seen in tests)]
            for test in tests:
                for node in ast.walk(test):
                    if (field := _field_read(node, known)) is not None:
                        found.setdefault(field, [])
                for match in ENV_READ.finditer(ast.unparse(test)):  # an environment variable is its own field
                    found.setdefault(match["name"], [])
                for node in ast.walk(test):
                    if isinstance(node, ast.Compare):
                        for field, value in _compared(node, known):
                            if value not in found[field]:
                                found[field].append(value)
    return found


def branch_contexts(package_root: str, dests: Iterable[str]) -> list[dict[str, Any]]:
    """The branches a feature switch and an algorithm open together, and what each reads.

    A check such as unified memory's ``_assert_spec_verify_backends`` runs only where a switch is on
    (``if not cfg.enable_unified_memory: return``) *and* the algorithm is one value (``if
    cfg.speculative_algorithm == "DFLASH":``), and then tests a third flag (the attention backends):
    a 3-way interaction of non-core flags with the algorithm, which 2-way covering never has to hold
    together. Each such branch is ``{"function", "line", "switches": [dest], "algorithms": [name],
    "reads": [dest]}``: the conditions come from enclosing ``if`` tests and from the early exits
    before it (an ``and`` of conditions counts; ``or`` does not), the reads from the branch's body
    and the functions it calls by name (``f(...)`` or ``x.f(...)``: the first definition of that name
    in the argument modules, ``attention_backends_of``), transitively: an over-approximation. A switch
    is a non-speculative field tested for truth; an algorithm test is ``==``/``in`` (or an early exit
    on ``!=``/``not in``) against constants. The sweep evaluates each branch's context, and the
    context with each value of each read (:mod:`bisect_spec.search.branches`). Not seen: conditions in
    ``except`` handlers and ``match`` statements, ``if not a or not b: return`` as ``a and b``.
    """
    known = set(dests)
    trees = [tree for _, tree in _argument_trees(package_root)]
    defined: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined.setdefault(node.name, node)

    def reads(nodes: Iterable[ast.AST], seen: set[str]) -> set[str]:
        found: set[str] = set()
        for node in nodes:
            for inner in ast.walk(node):
                if (field := _field_read(inner, known)) is not None:
                    found.add(field)
                if isinstance(inner, ast.Call):
                    called = inner.func
                    name = called.id if isinstance(called, ast.Name) else \
                        called.attr if isinstance(called, ast.Attribute) else None
                    if name is not None and name in defined and name not in seen:
                        seen.add(name)
                        found |= reads(defined[name].body, seen)
        return found

    out: list[dict[str, Any]] = []

    def note(function: str, line: int, body: list[ast.stmt], algorithms: list[Any], switches: list[str]) -> None:
        read = sorted(reads(body, {function}) - {ALGORITHM_FIELD, *switches})
        if read:
            out.append({"function": function, "line": line, "switches": list(dict.fromkeys(switches)),
                        "algorithms": algorithms, "reads": read})

    def walk(function: str, body: list[ast.stmt], algorithms: list[Any] | None, switches: list[str]) -> None:
        for index, statement in enumerate(body):
            if isinstance(statement, ast.If):
                named, switched = _conditions(statement.test, known, False)
                inner_algorithms = named if named is not None else algorithms
                if (named is not None or switched) and inner_algorithms and switches + switched:
                    note(function, statement.lineno, statement.body, inner_algorithms, switches + switched)
                walk(function, statement.body, inner_algorithms, switches + switched)
                walk(function, statement.orelse, algorithms, switches)
                if statement.body and isinstance(statement.body[-1], (ast.Return, ast.Raise)) and not statement.orelse:
                    named, switched = _conditions(statement.test, known, True)  # an early exit: the rest holds
                    if named is not None or switched:
                        rest = body[index + 1:]
                        rest_algorithms = named if named is not None else algorithms
                        if rest_algorithms and switches + switched:
                            note(function, statement.lineno, rest, rest_algorithms, switches + switched)
                        walk(function, rest, rest_algorithms, switches + switched)
                        return
            elif isinstance(statement, (ast.For, ast.While, ast.With, ast.Try)):
                walk(function, [s for s in ast.iter_child_nodes(statement) if isinstance(s, ast.stmt)],
                     algorithms, switches)

    for tree in trees:
        for function in _functions(tree):
            walk(function.name, function.body, None, [])
    return out


def _conditions(test: ast.expr, known: set[str], negate: bool) -> tuple[list[Any] | None, list[str]]:
    """(algorithms, switches) that ``test`` being true (false with ``negate``) asserts."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negate:
        algorithms: list[Any] | None = None
        switches: list[str] = []
        for value in test.values:
            named, switched = _conditions(value, known, False)
            algorithms = named if named is not None else algorithms
            switches += switched
        return algorithms, switches
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _conditions(test.operand, known, not negate)
    field = _field_read(test, known)
    if field is not None and not field.startswith(SPECULATIVE_FIELD):
        return None, [] if negate else [field]
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _field_read(test.left, known) == ALGORITHM_FIELD:
        values = _constants(test.comparators[0])
        positive = isinstance(test.ops[0], (ast.Eq, ast.In))
        negative = isinstance(test.ops[0], (ast.NotEq, ast.NotIn))
        if values and (positive or negative) and positive != negate:
            return values, []
    return None, []


def _speculative_tests(body: list[ast.stmt], known: set[str], guarded: bool) -> Iterator[ast.expr]:
    """The conditions of speculative checks among ``body``: an ``if``/``while``/``assert`` test that
    reads a speculative field, any test nested under one (``guarded``), and the tests of the
    branches that hold one (``if cfg.disaggregation_mode != "null":`` around a speculative assert)."""
    for statement in body:
        test = statement.test if isinstance(statement, (ast.If, ast.While, ast.Assert)) else None
        speculative = test is not None and _reads_speculative(test, known)
        inner: list[ast.expr] = []
        for name in ("body", "orelse", "finalbody", "handlers"):
            children = getattr(statement, name, None)
            if isinstance(children, list):
                nested = [c for c in children if isinstance(c, ast.stmt)]
                nested += [s for h in children if isinstance(h, ast.ExceptHandler) for s in h.body]
                inner += _speculative_tests(nested, known, guarded or speculative)
        if test is not None and (guarded or speculative or inner):
            yield test
        yield from inner


def _reads_speculative(node: ast.AST, known: set[str]) -> bool:
    return any((field := _field_read(inner, known)) is not None and field.startswith(SPECULATIVE_FIELD)
               for inner in ast.walk(node))


def _early_exits(body: list[ast.stmt]) -> Iterator[ast.expr]:
    """Tests of the function's top-level ``if ...: return`` statements (the guards before its checks:
    ``if not cfg.enable_unified_memory: return``)."""
    for statement in body:
        if isinstance(statement, ast.If) and statement.body and isinstance(statement.body[-1], ast.Return):
            yield statement.test


def known_algorithms(package_root: str) -> list[str]:
    """Every ``--speculative-algorithm`` name the release accepts, read from ``SpeculativeAlgorithm``
    in ``srt/speculative/spec_info.py``: its members (but ``NONE``) and the aliases its
    ``from_string`` maps (``name_map`` keys, ``*ALIAS*`` constants: ``NEXTN``), in source order."""
    path = os.path.join(package_root, "srt", "speculative", "spec_info.py")
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return []
    names: list[str] = []

    def add(value: object) -> None:
        if isinstance(value, str) and value.isupper() and value != "NONE" and value not in names:
            names.append(value)

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
            for statement in node.body:
                if isinstance(statement, ast.Assign):
                    for target in statement.targets:
                        if isinstance(target, ast.Name):
                            add(target.id)
            for inner in ast.walk(node):
                if isinstance(inner, ast.FunctionDef) and inner.name == "from_string":
                    for mapping in ast.walk(inner):
                        if isinstance(mapping, ast.Dict):
                            for key in mapping.keys:
                                if isinstance(key, ast.Constant):
                                    add(key.value)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and "ALIAS" in t.id for t in node.targets):
            for constant in ast.walk(node.value):
                if isinstance(constant, ast.Constant):
                    add(constant.value)
    return names


@functools.cache
def _argument_trees(package_root: str) -> tuple[tuple[str, ast.Module], ...]:
    """Each argument module's path and syntax tree (parsed once per worker: the flag table asks twice);
    a module that cannot be read or parsed is left out."""
    found = []
    for path in _argument_files(package_root):
        try:
            with open(path, encoding="utf-8") as handle:
                found.append((path, ast.parse(handle.read())))
        except (OSError, SyntaxError, ValueError):
            continue
    return tuple(found)


def _argument_files(package_root: str) -> Iterator[str]:
    for relative in ARGUMENT_MODULES:
        path = os.path.join(package_root, relative)
        if os.path.isfile(path):
            yield path
        elif os.path.isdir(path):
            yield from (os.path.join(path, name) for name in sorted(os.listdir(path)) if name.endswith(".py"))


def _functions(node: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every outermost function (methods included): a nested function belongs to its outer one."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield child
        else:
            yield from _functions(child)


def _field_read(node: ast.AST, known: set[str]) -> str | None:
    """The parser field ``node`` reads: ``X.field``, ``getattr(X, "field"[, default])``, or a bare name
    that is a field's (a helper's parameter: ``def _resolve_alias(speculative_algorithm, ...)``)."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in known:
        return node.attr
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in known:
        return node.id
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in known):
        return str(node.args[1].value)
    return None


def _constants(node: ast.AST) -> list[Any] | None:
    """The constant, or the constants of a literal tuple/list/set; None when not constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)) \
            and not isinstance(node.value, bool):
        return [node.value]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        return [-node.operand.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):  # None among them stands for "not given"
        values = [_constants(e) for e in node.elts if not (isinstance(e, ast.Constant) and e.value is None)]
        if all(v is not None for v in values):
            return [c for v in values if v is not None for c in v]
    return None


def _compared(node: ast.Compare, known: set[str]) -> Iterator[tuple[str, Any]]:
    """(field, value) for each comparison of a field read with constants in a chain."""
    operands = [node.left, *node.comparators]
    for left, op, right in zip(operands, node.ops, operands[1:], strict=False):
        for read, other, flipped in ((left, right, False), (right, left, True)):
            field = _field_read(read, known)
            values = _constants(other)
            if field is None or values is None:
                continue
            if isinstance(op, (ast.In, ast.NotIn)) and flipped:
                continue  # "x" in self.field: a membership test of the field's contents
            if type(op) in _BOUNDARY:
                for value in values:
                    if isinstance(value, int):
                        low, high = _BOUNDARY[type(op)]
                        if flipped:  # c < field is field > c
                            low, high = -high, -low
                        yield from ((field, value + shift) for shift in range(low, high + 1))
                    else:
                        yield field, value
            elif isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                yield from ((field, value) for value in values)

"""Python's parser, one thread at a time.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state
(python/cpython#106905). When the garbage collector runs Python code in the middle of a
parse (a finalizer, a ``gc.callbacks`` entry, a ``ResourceWarning``) another thread can
start a parse of its own, and one of the two fails with ``SystemError: AST constructor
recursion depth mismatch``. A sweep's shrinks run side by side in threads, and each reads
SGLang's sources, so every parse in the orchestrator goes through this module's lock.
The standard library offers no thread-safe parser, hence these few lines.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse_expression", "parse_module"]

_PARSER = threading.Lock()


def parse_module(source: str) -> ast.Module:
    """``ast.parse(source)``, serialised with every other parse of this process's threads.

    :raises SyntaxError: ``source`` is not Python.
    """
    with _PARSER:
        return ast.parse(source)


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``, serialised the same way.

    :raises SyntaxError: ``source`` is not one Python expression.
    """
    with _PARSER:
        return ast.parse(source, mode="eval")

"""The orchestrator's parser lock (``bisect_spec.model.syntax``), under the race CPython 3.11 loses."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bisect_spec.model import syntax

SOURCE = (Path(__file__).resolve().parents[2] / "bisect_spec" / "runtime" / "warm.py").read_text()


@pytest.fixture
def collector_yields_mid_parse() -> Iterator[None]:
    """Run the garbage collector often and let it switch threads (as a finalizer's Python code does), so a
    parse in one thread is interrupted by a parse in another."""
    def switch(_phase: str, _info: dict[str, int]) -> None:
        time.sleep(0)

    threshold = gc.get_threshold()
    gc.callbacks.append(switch)
    gc.set_threshold(50)
    try:
        yield
    finally:
        gc.callbacks.remove(switch)
        gc.set_threshold(*threshold)


def test_two_threads_parsing_at_once_both_get_their_tree(collector_yields_mid_parse: None) -> None:
    """Without the lock, Python 3.11.7 fails this with "SystemError: AST constructor recursion depth mismatch"
    (measured: in 6 of 6 runs of the same race with ``ast.parse``)."""
    errors: list[BaseException] = []
    trees: list[int] = []

    def parse_often() -> None:
        for _ in range(30):
            try:
                trees.append(len(syntax.parse_module(SOURCE).body))
                syntax.parse_expression("a.b > 1 and c")
            except BaseException as exc:  # the race's failure is what the test looks for
                errors.append(exc)

    threads = [threading.Thread(target=parse_often) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(trees) == 60 and len(set(trees)) == 1


def test_a_syntax_error_is_raised_as_ever_and_frees_the_lock() -> None:
    with pytest.raises(SyntaxError):
        syntax.parse_module("if :")
    assert syntax.parse_expression("x").body is not None

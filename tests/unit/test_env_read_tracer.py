"""The evaluator's tracer of environment reads: which memoised functions read ``os.environ``, also through frames
it keeps between reads (a generator resumed under another caller must not answer for its first one)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bisect_spec.inside.evaluator import _EnvReadTracer


@pytest.fixture
def tracer_of() -> Iterator[Callable[[list[Any]], _EnvReadTracer]]:
    original = os._Environ.__getitem__
    try:
        yield lambda caches: _EnvReadTracer(lambda: caches)
    finally:
        os._Environ.__getitem__ = original  # type: ignore[method-assign]


def read() -> str | None:
    return os.environ.get("BISECT_SPEC_TRACER_PROBE")


def deep(depth: int) -> None:
    if depth:
        deep(depth - 1)
    read()


def test_a_memoised_function_that_reads_is_named_and_one_that_does_not_is_not(tracer_of: Any) -> None:
    @functools.lru_cache
    def reads() -> None:
        deep(30)

    @functools.lru_cache
    def calls_nothing() -> int:
        return 1

    tracer = tracer_of([reads, calls_nothing])
    deep(30)  # outside both: a read under frames the tracer keeps, none of them a cache's
    assert tracer.readers == set()
    for _ in range(3):  # the frames of the first walk are kept while they run: the later reads find them
        calls_nothing()
        reads.cache_clear()
        reads()
    assert tracer.readers == {id(reads)}


def test_a_generator_resumed_under_a_memoised_function_marks_it(tracer_of: Any) -> None:
    def reading_generator() -> Iterator[None]:
        while True:
            deep(5)
            yield

    steps = reading_generator()

    @functools.lru_cache
    def resumes() -> None:
        next(steps)

    tracer = tracer_of([resumes])
    next(steps)  # first resumed outside any cache
    assert tracer.readers == set()
    resumes()  # the same generator frame, now under the cache: its callers changed
    assert tracer.readers == {id(resumes)}


def test_reads_under_one_caller_frame_see_a_cache_entered_later_below_it(tracer_of: Any) -> None:
    @functools.lru_cache
    def inner() -> None:
        read()

    tracer = tracer_of([inner])

    def caller() -> None:
        read()  # this frame is kept without a cache above it
        inner()  # a cache entered below the kept frame: found on the new frames' walk
        read()

    caller()
    assert tracer.readers == {id(inner)}
    tracer.forget_frames()
    assert tracer._frames == {}

"""The Hypothesis-driven search keeps Hypothesis' files where the caller says, never in the working directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory

from bisect_spec.search.random_search import search
from bisect_spec.search.space import FlagSpace, FlagSpec


@pytest.fixture
def hypothesis_default(tmp_path: Path) -> Iterator[Path]:
    """A fresh directory as Hypothesis' own choice (``.hypothesis`` in the working directory), put back after."""
    before = storage_directory(intent_to_write=False).home_directory
    default = tmp_path / "cwd" / ".hypothesis"
    set_hypothesis_home_dir(default)
    yield default
    set_hypothesis_home_dir(before)


def test_the_search_writes_under_the_storage_it_is_given_and_puts_hypothesis_back(
        hypothesis_default: Path, tmp_path: Path) -> None:
    space = FlagSpace(tuple(FlagSpec(f"--flag-{n}", (None, ("1",), ("2",), ("text",))) for n in range(10)))
    tried = search(space, lambda config: config.key(), budget=50, seed=0, storage=tmp_path / "home")
    assert len(set(tried)) == len(tried) == 50
    assert not hypothesis_default.exists(), "Hypothesis wrote where it would have without the storage"
    assert storage_directory(intent_to_write=False).home_directory == hypothesis_default

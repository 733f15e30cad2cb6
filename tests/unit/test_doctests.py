"""Every example in the package's docstrings runs, as a doctest, under the README's test command.

The modules are found by their source (a ``>>>`` line), so a new example is run without being
listed here. An example that names a release (``release="0.5.23"``) needs it installed: it is
an ``sglang`` test and a missing release fails it, as for the integration tests
(:func:`tests.conftest.require_release`).
"""

from __future__ import annotations

import doctest
import importlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

import bisect_spec
from tests.conftest import require_release

PACKAGE = Path(bisect_spec.__file__).parent
RELEASE = re.compile(r'release="([^"]+)"')


def _modules_with_examples() -> list[Any]:
    """``pytest.param(module name, releases its examples need)`` per module with a ``>>>`` line."""
    found: list[Any] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if not re.search(r"^\s*>>> ", text, re.MULTILINE):
            continue
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        releases = tuple(sorted(set(RELEASE.findall(text))))
        marks = [pytest.mark.sglang] if releases else []
        found.append(pytest.param(name, releases, id=name, marks=marks))
    return found


MODULES = _modules_with_examples()


def test_the_public_api_has_examples() -> None:
    assert "bisect_spec.api" in [param.values[0] for param in MODULES]


@pytest.mark.parametrize(("module_name", "releases"), MODULES)
def test_the_docstring_examples_run(module_name: str, releases: tuple[str, ...]) -> None:
    for release in releases:
        require_release(release)
    module = importlib.import_module(module_name)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{module_name} has '>>>' lines but no doctest was found in it"
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, out.getvalue()
    assert result.attempted > 0

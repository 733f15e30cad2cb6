"""``statements.sglang_traceback``: SGLang's frames and the final exception, nothing of the machine or of bisect-spec.

A package named ``sglang`` is written to a temporary directory and imported for real, so the
frames are real frames of files under a package root (as in a release environment). The real
release case is ``tests/integration/test_failure_text.py``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from bisect_spec.inside import statements
from bisect_spec.inside.statements import portable_paths, sglang_traceback

HOOK = '''
def handle(value):
    try:
        import sgl_kernel_that_is_not_installed  # an import fallback, as SGLang's layers do
    except ImportError:
        check(value)

def check(value):
    assert value > 1, f"value {value} too small"

def wrapped(value):
    try:
        check(value)
    except AssertionError as exc:
        raise ValueError("bad value") from exc
'''


@pytest.fixture
def package(tmp_path: Path) -> Iterator[tuple[str, ModuleType]]:
    root = tmp_path / "site" / "sglang"
    (root / "srt").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "srt" / "__init__.py").write_text("")
    (root / "srt" / "hook.py").write_text(HOOK)
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        yield str(root), importlib.import_module("sglang.srt.hook")
    finally:
        sys.path.remove(str(tmp_path / "site"))
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]


def caught(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("did not raise")


def test_an_import_fallback_being_handled_is_not_part_of_the_failure(package: tuple[str, ModuleType]) -> None:
    root, hook = package
    text = sglang_traceback(caught(lambda: hook.handle(0)), root)
    assert text.splitlines() == [
        "Traceback (most recent call last):",
        '  File "srt/hook.py", line 6, in handle',
        "    check(value)",
        '  File "srt/hook.py", line 9, in check',
        '    assert value > 1, f"value {value} too small"',
        "           ^^^^^^^^^",
        "AssertionError: value 0 too small",
    ]


def test_an_explicit_cause_is_kept_and_the_callers_frames_are_not(package: tuple[str, ModuleType]) -> None:
    root, hook = package
    text = sglang_traceback(caught(lambda: hook.wrapped(0)), root)
    assert "AssertionError: value 0 too small" in text and "direct cause of the following exception" in text
    assert text.rstrip().endswith("ValueError: bad value")
    assert __file__ not in text and "test_traceback_text" not in text  # the caller's frame (this test) is left out
    assert str(root) not in text


def test_a_long_traceback_keeps_its_last_whole_lines(package: tuple[str, ModuleType]) -> None:
    root, hook = package
    text = sglang_traceback(caught(lambda: hook.handle(0)), root, most=60)
    assert text.endswith("AssertionError: value 0 too small\n") and len(text) <= 60
    assert text.startswith("    ")  # starts at a line's beginning, not mid-line


def test_paths_outside_the_package_are_named_by_where_they_are_installed() -> None:
    import json

    stdlib_file = json.__file__.replace("__init__.py", "decoder.py")
    text = f'  File "{stdlib_file}", line 3, in decode\n  File "/nowhere/x.py", line 1, in f\n'
    assert portable_paths(text, "/opt/site/sglang") == ('  File "<stdlib>/json/decoder.py", line 3, in decode\n'
                                                          '  File "/nowhere/x.py", line 1, in f\n')
    log = '  File "/srv/env/lib/python3.11/site-packages/sglang/srt/server_args.py", line 9, in f\n'
    assert portable_paths(log, None) == '  File "srt/server_args.py", line 9, in f\n'


def test_a_logged_traceback_loses_bisect_spec_frames_and_machine_paths() -> None:
    own = statements.__file__.replace("statements.py", "launch_main.py")
    log = ("Traceback (most recent call last):\n"
           f'  File "{own}", line 80, in main\n'
           "    runpy.run_module('sglang.launch_server')\n"
           "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
           '  File "/srv/env/site/sglang/srt/server_args.py", line 9, in resolve_once\n'
           "    assert x\n"
           "AssertionError\n")
    (block,) = statements.traceback_blocks(log)
    assert statements.failure_from_block(block)["traceback_tail"] == (
        "Traceback (most recent call last):\n"
        '  File "srt/server_args.py", line 9, in resolve_once\n'
        "    assert x\n"
        "AssertionError")

"""The public API is a façade: every name it lists resolves, and importing it (or the CLI) loads no workflow.

A command imports the layers it needs when it runs, which is what keeps the CLI's start-up short
(``scripts/bench_probe.py`` measures it). These tests read ``sys.modules`` of a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bisect_spec import api


def test_every_public_name_resolves_and_is_listed_once() -> None:
    assert sorted(api.__all__) == sorted(set(api.__all__))
    assert set(api._WHERE) == set(api.__all__)
    for name in api.__all__:
        assert getattr(api, name) is not None
    assert api.nightly.__name__ == "run_nightly"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'sweeep'"):
        api.sweeep  # noqa: B018 - the attribute access is the test


def _modules_after(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\n"
                           "print(json.dumps(sorted(m for m in sys.modules if m.startswith('bisect_spec'))))"],
                          capture_output=True, text=True, check=True, timeout=120)
    found: list[str] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_importing_the_api_or_the_cli_loads_no_workflow() -> None:
    for code in ("import bisect_spec.api", "import bisect_spec.cli.commands"):
        loaded = _modules_after(code)
        assert not [m for m in loaded if m.startswith(("bisect_spec.workflows", "bisect_spec.reduce", "bisect_spec.search",
                                                       "bisect_spec.report"))], (code, loaded)


def test_a_probe_loads_the_probe_workflow_and_not_the_sweep() -> None:
    loaded = _modules_after("from bisect_spec import api\napi.probe")
    assert "bisect_spec.workflows.probe" in loaded
    assert not {"bisect_spec.workflows.sweep", "bisect_spec.workflows.shrink", "bisect_spec.workflows.nightly"} & set(loaded)

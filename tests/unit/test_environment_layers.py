"""An installed release gains the layers its pins added later (no pip: layer installs are replaced)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bisect_spec import environments


def test_missing_layers_are_added_in_pinned_order_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))
    pinned = environments.pins()["releases"]["0.5.23"]["layers"]
    assert pinned[:1] == ["jsonschema-4.26.0"] and "xgrammar-0.2.7" in pinned
    directory = tmp_path / "envs" / "sglang-0.5.23"
    directory.mkdir(parents=True)
    (directory / "env.json").write_text(json.dumps({"release": "0.5.23", "layers": ["xgrammar-0.2.7"]}))
    installed: list[str] = []
    monkeypatch.setattr(environments, "ensure_base", lambda progress=None: tmp_path / "python")
    monkeypatch.setattr(environments, "_ensure_layer", lambda layer, python, progress: installed.append(layer))
    added = environments.add_missing_layers("0.5.23")
    assert added == [layer for layer in pinned if layer != "xgrammar-0.2.7"] == installed
    record = environments.describe("0.5.23")
    assert record["layers"] == pinned
    assert record["layers_added"] == sorted(added)
    assert environments.add_missing_layers("0.5.23") == []  # complete: nothing to do, nothing installed again
    assert installed == added

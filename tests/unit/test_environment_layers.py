"""An installed release gains the layers its pins added later (no pip: layer installs are replaced)."""

from __future__ import annotations

import fcntl
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from bisect_spec.runtime import environments


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


def test_a_table_an_older_bisect_spec_recorded_still_names_the_releases_that_have_a_flag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's cache file is named after the code that builds it; after an upgrade the older one still
    holds the parser's options (the data flow's additions aside), enough for "exists in ..." hints."""
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))
    directory = tmp_path / "envs" / "sglang-0.5.12"
    directory.mkdir(parents=True)
    (directory / "env.json").write_text(json.dumps({"release": "0.5.12", "layers": []}))
    (directory / "flags-0123456789ab.json").write_text(json.dumps([{"option": "--enable-x", "aliases": ["--enable-x"]}]))
    assert environments.flags_cache_name() != "flags-0123456789ab.json"
    assert environments.cached_flag_table("0.5.12") is None  # a sweep reads the current table only
    assert environments.releases_with_flag("--enable-x") == ["0.5.12"]
    assert environments.releases_with_flag("--enable-y") == []


def test_recording_the_current_flag_table_removes_those_older_code_recorded(tmp_path: Path) -> None:
    (tmp_path / "flags-0123456789ab.json").write_text("[]")
    (tmp_path / "other.json").write_text("{}")
    environments.record_flag_table(tmp_path, [{"option": "--x", "aliases": ["--x"]}])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([environments.flags_cache_name(), "other.json"])
    assert json.loads((tmp_path / environments.flags_cache_name()).read_text())[0]["option"] == "--x"


def test_a_flag_table_being_recorded_is_never_read_half_written(tmp_path: Path) -> None:
    """Two commands starting on a cold release at once both record its table while the other may read it."""
    table = [{"option": f"--flag-{n}", "aliases": [f"--flag-{n}"], "help": "x" * 200} for n in range(5000)]
    path = tmp_path / environments.flags_cache_name()
    environments.record_flag_table(tmp_path, table)
    done = threading.Event()

    def write() -> None:
        for _ in range(40):
            environments.record_flag_table(tmp_path, table)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    while not done.is_set():
        assert len(json.loads(path.read_text())) == len(table)
        reads += 1
    writer.join()
    assert reads > 0
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no staging file left


def test_two_installs_at_once_install_a_shared_layer_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``env install --jobs``: a second install needing the layer the first is installing waits for it, then finds
    it installed (pip replaced; the lock is the real ``flock``)."""
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))
    first_inside, second_waits, go_on = threading.Event(), threading.Event(), threading.Event()
    installs: list[str] = []
    real_flock = fcntl.flock

    def install_layer(layer: str, directory: Path, python: Path, progress: object) -> None:
        installs.append(threading.current_thread().name)
        first_inside.set()
        assert go_on.wait(60)
        directory.mkdir(parents=True)
        (directory / "layer.json").write_text("{}")

    def flock(handle: Any, operation: int) -> None:
        if operation == fcntl.LOCK_EX and threading.current_thread().name == "second":
            second_waits.set()
        real_flock(handle, operation)

    monkeypatch.setattr(environments, "_install_layer", install_layer)
    monkeypatch.setattr(fcntl, "flock", flock)
    threads = [threading.Thread(target=environments._ensure_layer, args=("transformers-4.57.1", tmp_path, None),
                                name=name) for name in ("first", "second")]
    threads[0].start()
    assert first_inside.wait(60)
    threads[1].start()
    assert second_waits.wait(60)  # the second install asks for the layer's lock while the first holds it
    go_on.set()
    for thread in threads:
        thread.join(60)
    assert installs == ["first"]

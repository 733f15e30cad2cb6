"""The run store: locking, the kill-safe journal, exact error lines, the cross-run outcome cache."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, NoReturn

import pytest

from bisect_spec.errors import StoreError
from bisect_spec.model.flags import Config
from bisect_spec.runtime import store
from tests.unit.test_compact import MODEL, as_read, records

ROOT = Path(__file__).resolve().parents[2]
META: dict[str, Any] = {"schema": "bisect-spec/run/1", "target": {"release": "0.5.23", "model": "kimi-k2.6"},
                        "strategy": {"name": "quick"}, "plan_size": 3}

HOLD_LOCK = """
import sys
from pathlib import Path
from bisect_spec.runtime import store
run = store.open_run(Path(sys.argv[1]), sys.argv[2])
print("locked", flush=True)
sys.stdin.read()
"""


def store_error(func: Any, *args: Any) -> str:
    with pytest.raises(StoreError) as info:
        func(*args)
    return str(info.value)


def new_run(runs: Path, run_id: str = "r1", entries: int = 0) -> store.Run:
    run = store.create_run(runs, META, run_id=run_id)
    for index in range(entries):
        run.append({"key": f"k{index}", "index": index})
    return run


# -- creating and locking ------------------------------------------------------------


def test_create_run_writes_metadata_and_holds_the_lock(tmp_path: Path) -> None:
    run = store.create_run(tmp_path, META)
    assert run.id.endswith("-kimi-k2.6-0.5.23-" + run.id.rsplit("-", 1)[-1])
    assert json.loads((run.path / "run.json").read_text()) == META
    assert (run.path / "lock").read_text() == str(os.getpid())
    assert store_error(store.create_run, tmp_path, META, run.id) == (
        f"run {run.id} exists already in {tmp_path}: resume it with --resume {run.id}")
    run.close()
    assert not (run.path / "lock").exists()  # no lock survives the run
    again = store.open_run(tmp_path, run.id)  # and a resume locks it afresh
    assert (again.path / "lock").read_text() == str(os.getpid())
    again.close()


def test_a_locked_run_cannot_be_opened_twice_in_one_process(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    # flock locks belong to an open file description: a second open() is a second locker
    assert store_error(store.open_run, tmp_path, "r1") == (
        f"run r1 is in use by another bisect-spec process (pid {os.getpid()}); wait for it to finish or start a new run")
    run.close()
    with store.open_run(tmp_path, "r1") as again:
        assert again.meta == META


def test_a_run_locked_by_another_process_names_it_and_kill_9_releases_it(tmp_path: Path) -> None:
    new_run(tmp_path).close()
    child = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path), "r1"], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        assert store_error(store.open_run, tmp_path, "r1") == (
            f"run r1 is in use by another bisect-spec process (pid {child.pid}); wait for it to finish or start a new run")
    finally:
        child.kill()
        child.communicate(timeout=30)
    with store.open_run(tmp_path, "r1") as run:  # the kernel drops the lock of a killed process
        assert (run.path / "lock").read_text() == str(os.getpid())


# -- opening: exact one-line errors --------------------------------------------------


def test_open_missing_run(tmp_path: Path) -> None:
    assert store_error(store.open_run, tmp_path, "nope") == f"no run 'nope' in {tmp_path}"
    for run_id in ("a", "b", "c", "d"):
        new_run(tmp_path, run_id).close()
    assert store_error(store.open_run, tmp_path, "nope") == f"no run 'nope' in {tmp_path}; recent runs: b, c, d"
    assert store_error(store.read_run, tmp_path, "nope") == f"no run 'nope' in {tmp_path}"


def test_open_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "stuff").mkdir()
    expected = f"{tmp_path / 'stuff'} is not a bisect-spec run (no run.json)"
    assert store_error(store.open_run, tmp_path, "stuff") == expected
    assert store_error(store.read_run, tmp_path, "stuff") == expected
    # a path (with a slash) is accepted instead of an id
    assert store_error(store.open_run, Path("/nonexistent"), str(tmp_path / "stuff")) == expected


def test_open_a_run_with_unreadable_metadata(tmp_path: Path) -> None:
    new_run(tmp_path).close()
    (tmp_path / "r1" / "run.json").write_text("{not json")
    message = store_error(store.open_run, tmp_path, "r1")
    assert message.startswith(f"{tmp_path / 'r1' / 'run.json'} is unreadable (")
    assert message.endswith("): the run cannot be resumed")


# -- the journal ---------------------------------------------------------------------


def test_journal_round_trip(tmp_path: Path) -> None:
    new_run(tmp_path, entries=3).close()
    with store.open_run(tmp_path, "r1") as run:
        assert [e["key"] for e in run.journal_entries()] == ["k0", "k1", "k2"]
        assert run.torn == 0


def test_a_torn_last_line_is_dropped_counted_and_truncated(tmp_path: Path) -> None:
    new_run(tmp_path, entries=3).close()
    journal = tmp_path / "r1" / "journal.jsonl"
    intact = journal.read_bytes()
    journal.write_bytes(intact + b'{"index":3,"key":"k3","outc')  # the process died mid-write
    with store.open_run(tmp_path, "r1") as run:
        assert [e["key"] for e in run.journal_entries()] == ["k0", "k1", "k2"]
        assert run.torn == 1
        assert journal.read_bytes() == intact
        run.append({"key": "k3", "index": 3})
    with store.open_run(tmp_path, "r1") as run:
        assert [e["key"] for e in run.journal_entries()] == ["k0", "k1", "k2", "k3"]
        assert run.torn == 0


def test_a_torn_only_line_empties_the_journal(tmp_path: Path) -> None:
    new_run(tmp_path).close()
    journal = tmp_path / "r1" / "journal.jsonl"
    journal.write_bytes(b'{"key":"k0","ou')
    with store.open_run(tmp_path, "r1") as run:
        assert run.journal_entries() == []
        assert run.torn == 1
    assert journal.read_bytes() == b""


def test_a_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    new_run(tmp_path, entries=1).close()
    journal = tmp_path / "r1" / "journal.jsonl"
    journal.write_text(journal.read_text() + "garbage\n" + '{"key":"k2"}\n' + '{"key":"k3"}\n')
    with store.open_run(tmp_path, "r1") as run:
        assert store_error(run.journal_entries) == (
            f"{journal} line 2 is corrupt: move the run aside and start a new one")


def test_a_last_record_without_newline_survives_the_next_append(tmp_path: Path) -> None:
    new_run(tmp_path, entries=1).close()
    journal = tmp_path / "r1" / "journal.jsonl"
    journal.write_text(journal.read_text() + '{"index":1,"key":"k1"}')  # write stopped just before the newline
    with store.open_run(tmp_path, "r1") as run:
        kept = [e["key"] for e in run.journal_entries()]
        run.append({"key": "k2", "index": 2})
    with store.open_run(tmp_path, "r1") as run:
        again = [e["key"] for e in run.journal_entries()]
    # whatever the policy for the unterminated record, the record appended after it must not be lost
    assert "k2" in again and again == [*kept, "k2"]


# -- the stored form: blobs, sealing, torn appends --------------------------------------


def test_records_come_back_as_appended_sealed_or_not(tmp_path: Path) -> None:
    entries = records(40)
    older = entries[0]  # a line of a run journaled before the stored form: read as it is
    run = new_run(tmp_path)
    (run.path / "journal.jsonl").write_text(store.canonical_json(older) + "\n")
    for entry in entries[1:]:
        run.append(entry)
    expected = [as_read(e) for e in entries]
    assert [json.dumps(e) for e in store.read_journal(run.path)] == expected  # read while the run goes on
    run.seal()
    assert sorted(p.name for p in run.path.glob("*.gz")) == ["blobs.jsonl.gz", "journal.jsonl.gz"]
    assert not (run.path / "journal.jsonl").exists() and not (run.path / "blobs.jsonl").exists()
    assert [json.dumps(e) for e in store.read_journal(run.path)] == expected
    assert [json.dumps(e) for e in store.read_run(tmp_path, "r1")[1]] == expected
    run.append(records(41)[40])  # a sealed run that goes on: unsealed first, nothing hidden
    run.close()
    assert [json.dumps(e) for e in store.read_journal(run.path)] == [*expected, as_read(records(41)[40])]
    with store.open_run(tmp_path, "r1") as again:
        assert [json.dumps(e) for e in again.journal_entries()] == [*expected, as_read(records(41)[40])]
        again.seal()
    assert [r["recorded"] for r in store.list_runs(tmp_path)] == [len(entries) + 1]


def test_a_kill_between_the_steps_of_sealing_keeps_each_record_once(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    for entry in records(10):
        run.append(entry)
    run.close()
    plain = {name: (run.path / name).read_bytes() for name in ("journal.jsonl", "blobs.jsonl")}
    with store.open_run(tmp_path, "r1") as again:
        again.seal()
    for name, data in plain.items():  # killed after writing the .gz files, before removing the plain ones
        (run.path / name).write_bytes(data)
    expected = [as_read(e) for e in records(10)]
    assert [json.dumps(e) for e in store.read_journal(run.path)] == expected
    with store.open_run(tmp_path, "r1") as again:
        assert [json.dumps(e) for e in again.journal_entries()] == expected
        assert not list(run.path.glob("*.gz"))  # the leftovers go: the plain files are the record
        again.append(records(11)[10])
    assert [json.dumps(e) for e in store.read_journal(run.path)] == [*expected, as_read(records(11)[10])]


def test_a_torn_append_at_every_byte_loses_nothing_committed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill at any byte of the last append (its new blobs, then its line): the records before it come back, the
    torn one is counted once, and the next append after it reads back whole."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # about the bytes a kill leaves, not the disk: a thousand appends
    entries = records(7)
    config = ["--tp-size", "8"]  # a short last record: a few hundred cuts
    last = {"phase": "round", "index": 7, "key": Config.from_argv(config).key(), "cached": False,
            "outcome": {"argv": ["--model-path", MODEL, "--trust-remote-code", *config], "config": config,
                        "status": "failed", "traceback_tail": "a failure no record had before it, long enough for a blob"}}
    run = new_run(tmp_path)
    for entry in entries:
        run.append(entry)
    committed = {name: (run.path / name).read_bytes() for name in ("journal.jsonl", "blobs.jsonl")}
    run.append(last)
    run.close()
    full = {name: (run.path / name).read_bytes() for name in committed}
    blob_bytes = full["blobs.jsonl"][len(committed["blobs.jsonl"]):]
    line_bytes = full["journal.jsonl"][len(committed["journal.jsonl"]):]
    assert blob_bytes and line_bytes, "the last append writes a blob and a line"
    written = blob_bytes + line_bytes  # in this order
    expected = [as_read(e) for e in entries]
    for cut in range(len(written)):
        (run.path / "blobs.jsonl").write_bytes(committed["blobs.jsonl"] + written[:cut][:len(blob_bytes)])
        (run.path / "journal.jsonl").write_bytes(committed["journal.jsonl"] + written[len(blob_bytes):cut])
        with store.open_run(tmp_path, "r1") as again:
            assert [json.dumps(e) for e in again.journal_entries()] == expected, cut
            assert again.torn == (cut > len(blob_bytes)), cut
            again.append(last)  # the resume evaluates it again
        assert [json.dumps(e) for e in store.read_journal(run.path)] == [*expected, as_read(last)], cut


def test_a_line_whose_blob_a_power_cut_lost_ends_the_journal_there(tmp_path: Path) -> None:
    """The journal and blobs are fsync'd once a second, the blobs first: after a power cut, a line of the last
    second may be on disk without its blob. The journal ends before it (counted as torn), and appends go on."""
    entries = records(7)
    last = {"phase": "round", "index": 7, "key": "k7", "cached": False,
            "outcome": {"argv": ["--model-path", MODEL], "config": [], "status": "failed",
                        "traceback_tail": "a failure no record had before it, long enough for a blob"}}
    run = new_run(tmp_path)
    for entry in entries:
        run.append(entry)
    blobs_before = (run.path / "blobs.jsonl").read_bytes()
    journal_before = (run.path / "journal.jsonl").read_bytes()
    run.append(last)
    run.append(entries[0])  # a line after it, on disk too
    run.close()
    (run.path / "blobs.jsonl").write_bytes(blobs_before)  # the last blob never reached the disk
    with store.open_run(tmp_path, "r1") as again:
        assert [json.dumps(e) for e in again.journal_entries()] == [as_read(e) for e in entries]
        assert again.torn == 2
        assert (run.path / "journal.jsonl").read_bytes() == journal_before
        again.append(last)  # the resume evaluates it again
    assert [json.dumps(e) for e in store.read_journal(run.path)] == [*map(as_read, entries), as_read(last)]


def test_results_are_gzipped_the_same_each_time_and_older_plain_ones_read(tmp_path: Path) -> None:
    outcomes = [e["outcome"] for e in records(20)]
    run = new_run(tmp_path)
    run.write_results(outcomes)
    first = (run.path / "results.jsonl.gz").read_bytes()
    run.write_results(outcomes)
    assert (run.path / "results.jsonl.gz").read_bytes() == first
    assert [json.dumps(r) for r in store.read_results(run.path, "advice") or []] == [as_read(o) for o in outcomes]
    (run.path / "results.jsonl.gz").unlink()
    assert store.read_results(run.path, "advice") is None
    (run.path / "results.jsonl").write_text("".join(store.canonical_json(o) + "\n" for o in outcomes))
    assert [json.dumps(r) for r in store.read_results(run.path, "advice") or []] == [as_read(o) for o in outcomes]
    run.write_results(outcomes)  # a resumed older run: its plain results go
    assert not (run.path / "results.jsonl").exists()
    run.close()


# -- disk full and unwritable --------------------------------------------------------


def test_disk_full_while_journaling_and_writing_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = new_run(tmp_path, entries=1)

    def full(fd: int) -> NoReturn:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    monkeypatch.setattr(store, "SYNC_SECONDS", 0.0)  # this append syncs (the journal fsyncs once a second)
    assert store_error(run.append, {"key": "k1"}) == (
        f"disk full while writing {run.path / 'journal.jsonl'}: free some space, then resume the run with --resume")
    assert store_error(run.write_json, "summary.json", {"a": 1}) == (
        f"disk full while writing {run.path / 'summary.json'}: free some space, then resume the run with --resume")
    assert not (run.path / "summary.json").exists()
    assert not list(run.path.glob(".summary.json.*"))  # no staging file left
    monkeypatch.undo()
    run.close()


def test_other_write_errors_name_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = new_run(tmp_path)

    def denied(fd: int) -> NoReturn:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "fsync", denied)
    assert store_error(run.write_text, "summary.md", "x") == f"cannot write {run.path / 'summary.md'}: Permission denied"
    monkeypatch.undo()
    run.close()


# -- listing -------------------------------------------------------------------------


def test_list_and_read_runs(tmp_path: Path) -> None:
    assert store.list_runs(tmp_path / "absent") == []
    new_run(tmp_path, "a", entries=2).close()
    done = new_run(tmp_path, "b", entries=3)
    done.write_json("summary.json", {"signatures": [{"id": "x"}, {"id": "y"}]})
    done.close()
    (tmp_path / "not-a-run").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # see test_list_runs_closes_its_files
        rows = store.list_runs(tmp_path)
    assert [(r["id"], r["recorded"], r["planned"], r["complete"], r["signatures"], r["strategy"]) for r in rows] == [
        ("a", 2, 3, False, None, "quick"), ("b", 3, 3, True, 2, "quick")]
    meta, entries, summary = store.read_run(tmp_path, "b")
    assert meta == META and [e["key"] for e in entries] == ["k0", "k1", "k2"] and summary is not None


def test_list_runs_closes_its_files(tmp_path: Path) -> None:
    new_run(tmp_path, "a", entries=2).close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.list_runs(tmp_path)
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


# -- the cross-run cache -------------------------------------------------------------


def test_outcome_cache_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "outcomes.sqlite"
    target = store.OutcomeCache.target_key({"release": "0.5.23", "model": {"a": 1}})
    assert target == store.OutcomeCache.target_key({"model": {"a": 1}, "release": "0.5.23"})  # key order is irrelevant
    other = store.OutcomeCache.target_key({"release": "0.5.12", "model": {"a": 1}})
    assert other != target
    records = {f'[["--page-size",["{i}"]]]': {"status": "passed", "i": i} for i in range(1203)}
    with store.opened_cache(path) as cache:
        for key, record in records.items():
            cache.put(target, key, record)
        assert cache.get_many(target, list(records)) == records  # > 500 keys: chunked queries
    with store.opened_cache(path) as cache:  # committed on close, read back by a new connection
        assert cache.get_many(target, [*records, "missing"]) == records
        assert cache.get_many(other, list(records)) == {}
        cache.put(target, "[]", {"status": "failed"})
        cache.put(target, "[]", {"status": "passed"})
        assert cache.get_many(target, ["[]"]) == {"[]": {"status": "passed"}}


def test_a_cache_held_by_another_command_never_fails_a_run(tmp_path: Path) -> None:
    """Two commands share one cache: a writer that meets the other's lock keeps its outcomes
    for the next write (and reads them itself meanwhile); nothing raises."""
    import sqlite3

    path = tmp_path / "outcomes.sqlite"
    target = store.OutcomeCache.target_key({"release": "0.5.23"})
    cache = store.OutcomeCache(path, timeout=0.05)
    other = sqlite3.connect(str(path))
    other.execute("BEGIN IMMEDIATE")  # the other command is writing
    records = {f"[{i}]": {"status": "passed", "i": i} for i in range(store.OutcomeCache.FLUSH_EVERY + 5)}
    for key, record in records.items():
        cache.put(target, key, record)
    assert cache.flush() is False  # still locked: kept, not lost, not raised
    assert cache.get_many(target, list(records)) == records
    other.rollback()
    other.close()
    assert cache.flush() is True
    cache.close()
    with store.opened_cache(path) as reader:
        assert reader.get_many(target, list(records)) == records


def _open_cache_at_once(path: str, barrier: Any, answers: Any) -> None:
    try:
        barrier.wait()
        store.OutcomeCache(Path(path)).close()
        answers.put("ok")
    except Exception as exc:  # the answer the test reads
        answers.put(f"{type(exc).__name__}: {exc}")


def test_two_commands_opening_a_new_outcome_cache_at_once_both_get_it(tmp_path: Path) -> None:
    """Switching a new database to WAL does not wait for SQLite's busy timeout: 37 of 60 such pairs
    failed with "database is locked" before the set-up was serialised."""
    context = multiprocessing.get_context("fork")
    for attempt in range(20):
        barrier, answers = context.Barrier(2), context.Queue()
        path = str(tmp_path / str(attempt) / "outcomes.sqlite")
        openers = [context.Process(target=_open_cache_at_once, args=(path, barrier, answers)) for _ in range(2)]
        for opener in openers:
            opener.start()
        got = [answers.get(timeout=120) for _ in openers]
        for opener in openers:
            opener.join()
        assert got == ["ok", "ok"], attempt


def test_the_evaluation_digest_covers_every_inside_module_the_worker_imports() -> None:
    # a change to any module that decides an outcome must invalidate cached outcomes (model_classes.py and
    # data_flow.py were once left out of the digest)
    import ast
    import re

    from bisect_spec.runtime.store import EVALUATION_MODULES

    inside = Path(__file__).resolve().parents[2] / "bisect_spec" / "inside"
    seen: set[str] = set()

    def unit(module: str) -> str:  # a module of inside/ by file name; a package (launch/) by its folder's
        return module if (inside / module).is_dir() else f"{module}.py"

    todo = ["worker_main.py"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        files = sorted((inside / name).glob("*.py")) if (inside / name).is_dir() else [inside / name]
        source = "\n".join(path.read_text() for path in files)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == "bisect_spec.inside":
                todo += [unit(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bisect_spec.inside."):
                todo.append(unit((node.module or "").split(".")[2]))
        todo += [unit(m) for m in re.findall(r"""_sibling\(["'](\w+)["']\)""", source)]
    assert {"evaluator.py", "launch", "model_classes.py", "meta_device.py"} <= seen  # the walk itself
    assert seen <= set(EVALUATION_MODULES), sorted(seen - set(EVALUATION_MODULES))


def test_the_evaluation_digest_covers_the_data_files_the_inside_reads() -> None:
    # the stage list (which stages run after the weights is part of an outcome) is read from bisect_spec/data
    import re

    from bisect_spec.runtime.store import INSIDE_DATA

    inside = Path(__file__).resolve().parents[2] / "bisect_spec" / "inside"
    read = {name for path in inside.rglob("*.py") for name in re.findall(r'"data", "([\w.]+)"', path.read_text())}
    assert read == {"stages.json"}
    assert read <= set(INSIDE_DATA)


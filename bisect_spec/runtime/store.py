"""Durable run store: nothing already reported is lost, nothing is evaluated twice.

Layout of ``runs/<run-id>/`` (the location is configurable with ``--runs-dir``)::

    run.json        what was asked: target, strategy, seed, space, plan size (deterministic)
    timing.json     when and how long (kept apart so result files are byte-reproducible)
    journal.jsonl   append-only, one line per result as it arrives, fsync'd: kill -9 safe
    results.jsonl   final results sorted by plan index, without durations (reproducible)
    summary.json    signature and finding tables (reproducible); summary.md for people
    lock            held (flock) by the process working on the run
    worker-*.log    what SGLang printed

A torn last journal line (the process died mid-write) is dropped on reading and its
configuration evaluated again; the caller is told how many.

A run is named by its id (``<time>-<model>-<release>-<salt>``), by ``latest`` (ids begin with
the time, so the greatest id is the newest run), or by the unique beginning of its id or of
its salt (``runs show 3fa2``): :func:`resolve_run_id`.

:class:`OutcomeCache` is the cross-run cache (SQLite under ``environments.home()``):
outcomes keyed by target (release, profile contents, hardware, tool version) and
canonical configuration key, so a configuration is never evaluated twice across runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bisect_spec import __version__
from bisect_spec.errors import StoreError, UsageError
from bisect_spec.runtime.files import atomic_write, store_error

logger = logging.getLogger(__name__)

#: Bump when the meaning of a cached outcome changes.
CACHE_SCHEMA = 2


def read_json(path: Path, advice: str) -> Any:
    """A stored JSON file, or one line saying where it is corrupt and what to do (``advice``).

    :raises StoreError: unreadable or not JSON.
    """
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        where = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise StoreError(f"{path} is corrupt ({where}): {advice}") from None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Run:
    """An open run directory, locked for this process."""

    path: Path
    meta: dict[str, Any]
    _lock: IO[str] | None = field(default=None, repr=False)
    _journal: IO[str] | None = field(default=None, repr=False)
    torn: int = 0

    @property
    def id(self) -> str:
        return self.path.name

    def journal_entries(self) -> list[dict[str, Any]]:
        """Entries already recorded; a torn (partial) last line is dropped and counted in ``torn``."""
        path = self.path / "journal.jsonl"
        if not path.exists():
            return []
        entries = []
        text = path.read_text()
        lines = text.split("\n")
        for number, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                if number == len(lines) - 1:  # no newline after it: the write did not finish
                    raise ValueError("unterminated")
                entries.append(json.loads(line))
            except ValueError:
                if number >= len(lines) - 2:  # only the last line may be torn
                    self.torn += 1
                    self._truncate_torn_tail()
                    continue
                raise StoreError(f"{path} line {number + 1} is corrupt: move the run aside and start a new one") from None
        return entries

    def _truncate_torn_tail(self) -> None:
        path = self.path / "journal.jsonl"
        data = path.read_bytes()
        cut = data.rfind(b"\n") if not data.endswith(b"\n") else data.rstrip(b"\n").rfind(b"\n")
        with open(path, "r+b") as handle:
            handle.truncate(cut + 1 if cut >= 0 else 0)

    def append(self, entry: dict[str, Any]) -> None:
        """Record one result durably (one line, flushed and fsync'd)."""
        if self._journal is None:
            self._journal = open(self.path / "journal.jsonl", "a")  # noqa: SIM115 - lives with the run
        try:
            self._journal.write(canonical_json(entry) + "\n")
            self._journal.flush()
            os.fsync(self._journal.fileno())
        except OSError as exc:
            raise store_error(exc, self.path / "journal.jsonl") from exc

    def write_json(self, name: str, data: Any) -> None:
        atomic_write(self.path / name, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.path / name, text)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock is not None:  # the file goes while still held: no lock survives a run, finished or stopped
            with contextlib.suppress(OSError):
                (self.path / "lock").unlink()
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lock(path: Path) -> IO[str]:
    handle = open(path / "lock", "a+")  # noqa: SIM115 - held for the run's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise StoreError(f"run {path.name} is in use by another bisect-spec process (pid {holder}); "
                         "wait for it to finish or start a new run") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def new_run_id(meta: dict[str, Any]) -> str:
    target = meta.get("target", {})
    stamp = time.strftime("%Y%m%d-%H%M%S")
    salt = hashlib.sha1(f"{time.time_ns()}{os.getpid()}".encode()).hexdigest()[:4]
    return f"{stamp}-{target.get('model', 'model')}-{target.get('release', '')}-{salt}"


def create_run(runs_dir: Path, meta: dict[str, Any], run_id: str | None = None) -> Run:
    """Create and lock a new run directory.

    :raises StoreError: the directory cannot be created, or the id exists already.
    """
    run_id = run_id or new_run_id(meta)
    path = runs_dir / run_id
    try:
        path.mkdir(parents=True, exist_ok=False)
    except FileExistsError:
        raise StoreError(f"run {run_id} exists already in {runs_dir}: resume it with --resume {run_id}") from None
    except OSError as exc:
        raise store_error(exc, path) from exc
    run = Run(path, meta, _lock(path))
    run.write_json("run.json", meta)
    return run


def open_run(runs_dir: Path, run_id: str) -> Run:
    """Open and lock an existing run (to resume it).

    :raises StoreError: no such run, not a run directory, unreadable metadata, or locked.
    """
    path = Path(run_id) if ("/" in run_id and Path(run_id).is_dir()) else runs_dir / run_id
    if not path.is_dir() and "/" not in run_id and any(
            run_id == "latest" or i.startswith(run_id) or i.rsplit("-", 1)[-1].startswith(run_id) for i in run_ids(runs_dir)):
        path = runs_dir / resolve_run_id(runs_dir, run_id)  # latest, or a unique prefix (an ambiguous one is refused)
    if not path.is_dir():
        known = list_runs(runs_dir)
        hint = f"; recent runs: {', '.join(r['id'] for r in known[-3:])}" if known else ""
        raise StoreError(f"no run '{run_id}' in {runs_dir}{hint}")
    if not (path / "run.json").is_file():
        raise StoreError(f"{path} is not a bisect-spec run (no run.json)")
    try:
        meta = json.loads((path / "run.json").read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path / 'run.json'} is unreadable ({exc}): the run cannot be resumed") from exc
    return Run(path, meta, _lock(path))


def read_run(runs_dir: Path, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """Metadata, journal entries and summary of a run, without locking (for ``runs show``)."""
    path = Path(run_id) if ("/" in run_id and Path(run_id).is_dir()) else runs_dir / run_id
    if not path.is_dir():
        raise StoreError(f"no run '{run_id}' in {runs_dir}")
    if not (path / "run.json").is_file():
        raise StoreError(f"{path} is not a bisect-spec run (no run.json)")
    run = Run(path, json.loads((path / "run.json").read_text()))
    entries = []
    for line in (path / "journal.jsonl").read_text().splitlines() if (path / "journal.jsonl").exists() else []:
        with contextlib.suppress(ValueError):
            entries.append(json.loads(line))
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else None
    return run.meta, entries, summary


def run_ids(runs_dir: Path) -> list[str]:
    """Ids of the runs under ``runs_dir``, oldest first."""
    if not runs_dir.is_dir():
        return []
    return sorted(p.name for p in runs_dir.iterdir() if (p / "run.json").is_file())


def resolve_run_id(runs_dir: Path, name: str) -> str:
    """The run ``name`` means: an id, ``latest``, or the unique beginning of an id or of its salt.

    A path to a run directory is returned unchanged.
    :raises UsageError: no run matches, or several do (listed).
    """
    if ("/" in name and Path(name).is_dir()) or (runs_dir / name).is_dir():
        return name  # a directory: the caller says whether it is a run
    ids = run_ids(runs_dir)
    if name in ids:
        return name
    if name == "latest":
        if not ids:
            raise UsageError(f"no runs in {runs_dir}: 'latest' names the newest run there (see --runs-dir)")
        return ids[-1]
    matches = [i for i in ids if i.startswith(name) or i.rsplit("-", 1)[-1].startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:5]) + (f" and {len(matches) - 5} more" if len(matches) > 5 else "")
        raise UsageError(f"run '{name}' is ambiguous in {runs_dir}: it could be {shown}; type more of the id")
    recent = f"; recent runs: {', '.join(ids[-3:])}" if ids else f"; {runs_dir} has no runs"
    raise UsageError(f"no run '{name}' in {runs_dir}{recent}")


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    """Runs under ``runs_dir``, oldest first, with their state."""
    if not runs_dir.is_dir():
        return []
    rows = []
    for path in sorted(p for p in runs_dir.iterdir() if (p / "run.json").is_file()):
        try:
            meta = json.loads((path / "run.json").read_text())
        except ValueError:
            continue
        journal = path / "journal.jsonl"
        done = 0
        if journal.exists():
            with journal.open() as handle:
                done = sum(1 for _ in handle)
        summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else None
        rows.append({"id": path.name, "target": meta.get("target", {}), "strategy": meta.get("strategy", {}).get("name"),
                     "planned": meta.get("plan_size"), "recorded": done, "complete": summary is not None,
                     "signatures": len(summary["signatures"]) if summary else None})
    return rows


#: The modules whose code decides an evaluation's outcome inside a release environment: the worker and every
#: module of ``inside/`` it imports (tests/unit/test_store.py checks the closure).
EVALUATION_MODULES = ("evaluator.py", "statements.py", "launch", "simulated_gpu.py", "version_shims.py", "worker_main.py",
                      "data_flow.py", "model_classes.py", "meta_device.py")
#: The files of ``bisect_spec/data`` that code inside a release environment reads: the launch path's stages
#: (``inside/launch/stage.py``; which run after the weights is part of an outcome).
INSIDE_DATA = ("stages.json",)


@functools.cache
def inside_digest(names: tuple[str, ...], data: tuple[str, ...] = ()) -> str:
    """SHA-1 (hex) of the named modules of ``bisect_spec/inside``, names included, in order (a package: its
    modules, by name), then of the named files of ``bisect_spec/data``."""
    digest = hashlib.sha1()
    here = Path(__file__).parent.parent / "inside"
    for name in names:
        for path in sorted((here / name).glob("*.py")) if (here / name).is_dir() else [here / name]:
            digest.update(path.relative_to(here).as_posix().encode() + b"\0" + path.read_bytes())
    for name in data:
        digest.update(f"data/{name}".encode() + b"\0" + (here.parent / "data" / name).read_bytes())
    return digest.hexdigest()


def evaluation_digest() -> str:
    """Digest of the code that evaluates a configuration (:data:`EVALUATION_MODULES`, :data:`INSIDE_DATA`)."""
    return inside_digest(EVALUATION_MODULES, INSIDE_DATA)[:16]


class OutcomeCache:
    """Outcomes across runs, keyed by target and canonical configuration (SQLite, WAL).

    Many bisect-spec commands share one cache (a sweep, a probe, CI jobs of one user), so a
    writer never holds the database: outcomes wait in memory and are written in one short
    transaction every :data:`FLUSH_EVERY` records or :data:`FLUSH_SECONDS` seconds, and at
    close. The cache is an optimisation, the run journal the durable record: when another
    command holds the lock past SQLite's timeout, the records wait for the next flush, and
    what cannot be written at close is only left uncached (logged), never an error of the run.
    """

    FLUSH_EVERY = 100
    FLUSH_SECONDS = 2.0

    def __init__(self, path: Path, *, timeout: float = 30.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Two commands opening a new cache at once: switching it to WAL does not wait for SQLite's
        # busy timeout ("database is locked" at once, 37 times in 60 such pairs), so the set-up is
        # serialised by a lock file next to it.
        with open(path.parent / f"{path.name}.setup-lock", "a") as setup:
            fcntl.flock(setup, fcntl.LOCK_EX)
            self._db = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS outcomes (target TEXT, config TEXT, record TEXT, "
                             "PRIMARY KEY (target, config))")
            self._db.commit()
        self._pending: dict[tuple[str, str], str] = {}  # (target, config) -> record, not yet written
        self._flushed = time.monotonic()

    @staticmethod
    def target_key(target: dict[str, Any]) -> str:
        """Stable key of everything that determines an outcome besides the flags.

        ``target`` holds the release, the profiles, the box and the environment variables;
        the evaluation's own semantics enter as :func:`evaluation_digest`, so outcomes of an
        older evaluator (a shorter launch path, say) are never reused.
        """
        keyed = {**target, "tool": __version__, "schema": CACHE_SCHEMA, "evaluation": evaluation_digest()}
        return hashlib.sha1(canonical_json(keyed).encode()).hexdigest()

    def get_many(self, target: str, configs: list[str]) -> dict[str, dict[str, Any]]:
        """Cached outcomes of ``configs`` (those the cache has; none when it cannot be read now)."""
        found: dict[str, dict[str, Any]] = {}
        try:
            for start in range(0, len(configs), 500):
                chunk = configs[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for config, record in self._db.execute(
                        f"SELECT config, record FROM outcomes WHERE target = ? AND config IN ({marks})",
                        [target, *chunk]):
                    found[config] = json.loads(record)
        except sqlite3.OperationalError as exc:
            logger.info("outcome cache %s: %s (evaluating instead)", self.path, exc)
        for config in configs:  # this command's own outcomes, written or not
            if (target, config) in self._pending:
                found[config] = json.loads(self._pending[target, config])
        return found

    def put(self, target: str, config: str, record: dict[str, Any]) -> None:
        """Remember an outcome (written in batches, see the class docstring)."""
        self._pending[target, config] = canonical_json(record)
        if len(self._pending) >= self.FLUSH_EVERY or time.monotonic() - self._flushed >= self.FLUSH_SECONDS:
            self.flush()

    def flush(self) -> bool:
        """Write the waiting outcomes in one short transaction; False when the database stayed locked."""
        self._flushed = time.monotonic()
        if not self._pending:
            return True
        try:
            with self._db:  # one transaction: committed, or rolled back on error
                self._db.executemany("INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?)",
                                     [(target, config, record) for (target, config), record in self._pending.items()])
        except sqlite3.OperationalError as exc:
            logger.info("outcome cache %s: %s (%d outcomes wait for the next write)", self.path, exc, len(self._pending))
            return False
        self._pending.clear()
        return True

    def close(self) -> None:
        if not self.flush():
            logger.warning("outcome cache %s stayed locked: %d outcomes were not cached", self.path, len(self._pending))
        self._db.close()


@contextlib.contextmanager
def opened_cache(path: Path) -> Iterator[OutcomeCache]:
    cache = OutcomeCache(path)
    try:
        yield cache
    finally:
        cache.close()

"""Durable run store: nothing already reported is lost, nothing is evaluated twice.

Layout of ``runs/<run-id>/`` (the location is configurable with ``--runs-dir``)::

    run.json          what was asked: target, strategy, seed, space, plan size (deterministic)
    timing.json       when and how long (kept apart so result files are byte-reproducible)
    journal.jsonl     append-only, one line per result as it arrives, flushed at once (kill -9 safe) and fsync'd
                      at most once a second (:data:`SYNC_SECONDS`: a power cut loses at most that much)
    blobs.jsonl       append-only: what several journal lines share, once (written before the line that needs it)
    results.jsonl.gz  final results sorted by plan index, without durations (reproducible; gzip, read with zcat)
    summary.json      signature and finding tables (reproducible); summary.md for people
    lock              held (flock) by the process working on the run
    worker-*.log      what SGLang printed

A journal line is a record in its stored form (:mod:`bisect_spec.runtime.compact`: what it repeats
of its configuration or of other records left out, shared values in ``blobs.jsonl``);
:func:`read_journal` and :meth:`Run.journal_entries` give the records back as they were appended.
A finished run's journal and blobs are read rarely (``runs show``, a resume): :meth:`Run.seal`
gzips them (``journal.jsonl.gz``, ``blobs.jsonl.gz``), and a resume that appends unseals them first.
Where a file and its ``.gz`` both exist (a kill between the two steps), the plain file is the record.

A torn last journal line (the process died mid-write) is dropped on reading and its
configuration evaluated again; the caller is told how many. A torn last blob line is dropped too:
no journal line refers to it. After a power cut, a journal line whose blob did not reach the disk
ends the journal there, as a torn line does (the blob file is synced first, so it can only be one
of the last second's lines).

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
import gzip
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
from bisect_spec.runtime import compact
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


canonical_json = compact.canonical_json

JOURNAL = "journal.jsonl"
BLOBS = "blobs.jsonl"
RESULTS = "results.jsonl.gz"
#: Older runs' results (before gzip): read where no ``results.jsonl.gz`` is.
PLAIN_RESULTS = "results.jsonl"
#: The most a power cut loses of a run's journal: records are flushed at once and fsync'd this often.
SYNC_SECONDS = 1.0


def gzipped(data: bytes) -> bytes:
    """``data`` gzipped the same way each time (no time or name in the header): result files stay byte-reproducible."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def stored_bytes(path: Path) -> bytes | None:
    """What ``path`` holds, from the file or, once sealed, from ``path.gz``; None if neither exists. The plain
    file is read first: where both exist it is the record (see the module docstring)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    try:
        return gzip.decompress(path.with_name(path.name + ".gz").read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise StoreError(f"{path}.gz is corrupt ({exc}): move the run aside and start a new one") from None


def _complete_lines(data: bytes) -> tuple[list[bytes], bool]:
    """The lines of ``data`` that end with a newline (blank ones left out), and whether a last one does not."""
    lines = data.split(b"\n")
    return [line for line in lines[:-1] if line.strip()], bool(lines[-1].strip())


def _blob_table(data: bytes | None, path: Path, *, strict: bool) -> dict[str, str]:
    """digest -> canonical text of the blobs in ``data`` (a torn last line left out).

    :raises StoreError: ``strict`` and a line before the last is not a blob.
    """
    table: dict[str, str] = {}
    lines, _torn = _complete_lines(data or b"")
    for number, line in enumerate(lines, 1):
        try:
            blob = json.loads(line)
            table[blob["digest"]] = canonical_json(blob["value"])
        except (ValueError, KeyError, TypeError):
            if strict:
                raise StoreError(f"{path} line {number} is corrupt: move the run aside and start a new one") from None
    return table


def _expanded(packed: dict[str, Any], blobs: dict[str, str], path: Path, number: int) -> dict[str, Any]:
    try:
        return compact.expand(packed, blobs)
    except KeyError as exc:
        raise StoreError(f"{path} line {number} refers to {exc} that {BLOBS} does not hold: "
                         "move the run aside and start a new one") from None


def read_journal(run_path: Path) -> list[dict[str, Any]]:
    """The records of a run's journal as they were appended, without locking or repairing it (a run in progress
    may be read): a torn or unreadable line is left out.

    The journal is read before the blobs: every blob a line refers to was written before that line.
    :raises StoreError: a line refers to a blob the run does not hold, or a sealed file is corrupt.
    """
    journal = stored_bytes(run_path / JOURNAL) or b""
    blobs = _blob_table(stored_bytes(run_path / BLOBS), run_path / BLOBS, strict=False)
    entries = []
    for number, line in enumerate(journal.split(b"\n"), 1):
        with contextlib.suppress(ValueError):
            entries.append(_expanded(json.loads(line), blobs, run_path / JOURNAL, number))
    return entries


def read_results(run_path: Path, advice: str) -> list[dict[str, Any]] | None:
    """A finished run's results (``results.jsonl.gz``, or an older run's ``results.jsonl``); None if it has none.

    :raises StoreError: a line is not JSON, or the file cannot be read (one line naming it, then ``advice``).
    """
    path = run_path / RESULTS
    try:
        data = gzip.decompress(path.read_bytes())
    except FileNotFoundError:
        path = run_path / PLAIN_RESULTS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
    except (OSError, EOFError) as exc:
        raise StoreError(f"{path} is corrupt ({exc}): {advice}") from None
    results = []
    for number, line in enumerate(data.decode().splitlines(), 1):
        try:
            results.append(json.loads(line))
        except ValueError:
            raise StoreError(f"{path} line {number} is corrupt: {advice}") from None
    return results


@dataclass
class Run:
    """An open run directory, locked for this process."""

    path: Path
    meta: dict[str, Any]
    _lock: IO[str] | None = field(default=None, repr=False)
    _journal: IO[str] | None = field(default=None, repr=False)
    _blob_file: IO[str] | None = field(default=None, repr=False)
    _blobs: dict[str, str] | None = field(default=None, repr=False)
    torn: int = 0
    _synced: float = field(default=0.0, repr=False)

    @property
    def id(self) -> str:
        return self.path.name

    def journal_entries(self) -> list[dict[str, Any]]:
        """Entries already recorded, as appended; a torn (partial) last line is dropped and counted in ``torn``.

        A sealed run is unsealed first (this run is about to go on), and a torn last line is cut off the
        file, so that the next append starts a line of its own.
        """
        self._unseal()
        path = self.path / JOURNAL
        if not path.exists():
            return []
        blobs = self._stored_blobs()
        entries = []
        lines = path.read_bytes().split(b"\n")
        for number, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                if number == len(lines) - 1:  # no newline after it: the write did not finish
                    raise ValueError("unterminated")
                packed = json.loads(line)
            except ValueError:
                if number >= len(lines) - 2:  # only the last line may be torn
                    self.torn += 1
                    _truncate_torn_tail(path)
                    continue
                raise StoreError(f"{path} line {number + 1} is corrupt: move the run aside and start a new one") from None
            try:
                entries.append(_expanded(packed, blobs, path, number + 1))
            except StoreError:  # a power cut kept the line and lost its blob: the journal ends before it
                self.torn += sum(1 for rest in lines[number:] if rest.strip())
                _truncate_at_line(path, number)
                break
        return entries

    def _stored_blobs(self) -> dict[str, str]:
        """The blobs stored so far (read once); a torn last blob line is cut off the file (no line refers to it)."""
        if self._blobs is None:
            path = self.path / BLOBS
            data = path.read_bytes() if path.exists() else b""
            if _complete_lines(data)[1]:
                _truncate_torn_tail(path)
                data = path.read_bytes()
            self._blobs = _blob_table(data, path, strict=True)
        return self._blobs

    def _unseal(self) -> None:
        """The journal and blobs as plain files again, to append to (:meth:`seal` undone): each written whole, then
        its ``.gz`` removed; a ``.gz`` beside its plain file is a leftover of a kill and goes."""
        for name in (JOURNAL, BLOBS):
            plain, sealed = self.path / name, self.path / f"{name}.gz"
            if not sealed.exists():
                continue
            if not plain.exists():
                atomic_write(plain, stored_bytes(plain) or b"")
                self._blobs = None
            sealed.unlink()

    def seal(self) -> None:
        """Gzip the journal and blobs of a finished run (read rarely from now on): each ``.gz`` written whole,
        then the plain file removed. A kill between the two leaves both, the same records: the plain file is read."""
        self._close_files()
        for name in (JOURNAL, BLOBS):
            plain = self.path / name
            if plain.exists():
                atomic_write(self.path / f"{name}.gz", gzipped(plain.read_bytes()))
                plain.unlink()

    def append(self, entry: dict[str, Any]) -> None:
        """Record one result durably: the blobs its stored form needs first, then its line (each flushed and
        fsync'd), so that a kill between the two leaves a blob no line refers to, never a line without its blob."""
        if self._journal is None:
            self._unseal()  # appending to a sealed journal's empty plain file would hide the sealed records
        blobs = self._stored_blobs()
        packed, new = compact.pack(entry, blobs)
        if new:
            if self._blob_file is None:
                self._blob_file = open(self.path / BLOBS, "a")  # noqa: SIM115 - lives with the run
            self._write(self._blob_file, "".join(canonical_json({"digest": name, "value": json.loads(text)}) + "\n"
                                                 for name, text in new.items()), self.path / BLOBS)
            blobs.update(new)
        if self._journal is None:
            self._journal = open(self.path / JOURNAL, "a")  # noqa: SIM115 - lives with the run
        self._write(self._journal, canonical_json(packed) + "\n", self.path / JOURNAL)

    def _write(self, handle: IO[str], text: str, path: Path) -> None:
        """``text`` written and flushed (a kill loses nothing written); both files fsync'd, the blobs first, once
        :data:`SYNC_SECONDS` have passed since they last were (an fsync per record cost the main job 16 % of its
        orchestrator's time)."""
        try:
            handle.write(text)
            handle.flush()
            if time.monotonic() - self._synced >= SYNC_SECONDS:
                self.sync()
        except OSError as exc:
            raise store_error(exc, path) from exc

    def sync(self) -> None:
        """fsync the blobs, then the journal."""
        for handle in (self._blob_file, self._journal):
            if handle is not None:
                os.fsync(handle.fileno())
        self._synced = time.monotonic()

    def write_results(self, records: list[dict[str, Any]]) -> None:
        """``results.jsonl.gz``: one canonical JSON line per record, gzipped reproducibly (an older run's plain
        ``results.jsonl``, left by a resume, goes)."""
        atomic_write(self.path / RESULTS, gzipped("".join(canonical_json(r) + "\n" for r in records).encode()))
        with contextlib.suppress(FileNotFoundError):
            (self.path / PLAIN_RESULTS).unlink()

    def write_json(self, name: str, data: Any) -> None:
        atomic_write(self.path / name, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.path / name, text)

    def _close_files(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.sync()
        for handle in (self._journal, self._blob_file):
            if handle is not None:
                handle.close()
        self._journal = self._blob_file = None

    def close(self) -> None:
        self._close_files()
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


def _truncate_at_line(path: Path, number: int) -> None:
    """Cut ``path`` before its line ``number`` (0-based)."""
    data = path.read_bytes()
    offset = sum(len(line) + 1 for line in data.split(b"\n")[:number])
    with open(path, "r+b") as handle:
        handle.truncate(offset)
        handle.flush()
        os.fsync(handle.fileno())


def _truncate_torn_tail(path: Path) -> None:
    """Cut ``path`` after its last complete line (the line after it was torn by a kill)."""
    data = path.read_bytes()
    cut = data.rfind(b"\n") if not data.endswith(b"\n") else data.rstrip(b"\n").rfind(b"\n")
    with open(path, "r+b") as handle:
        handle.truncate(cut + 1 if cut >= 0 else 0)


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
    entries = read_journal(path)
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
        done = (stored_bytes(path / JOURNAL) or b"").count(b"\n")
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


#: outcome statuses that evaluating again would repeat: cached across runs, shared by one sweep's shrinks
DURABLE = ("passed", "failed", "usage")


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

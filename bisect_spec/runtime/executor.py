"""Where evaluations run: the executor a :class:`~bisect_spec.runtime.session.Session` is built with.

``local`` (the default) is :class:`~bisect_spec.runtime.worker.WorkerPool`: worker processes on
this machine. ``ray`` is :class:`~bisect_spec.runtime.ray_executor.RayPool`: one Ray actor per
worker slot, each owning a worker process on whichever node Ray places it, for when one
machine is not enough (a nightly over many releases and hardware profiles). Both have
the interface of :class:`EvaluationPool`, so a session, ``api.sweep`` and the run store
do not know which one evaluates: only the constructor differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from bisect_spec.errors import UsageError
from bisect_spec.runtime.worker import WorkerPool, WorkerSpec

LOCAL = "local"
RAY = "ray"
EXECUTORS = (LOCAL, RAY)


class EvaluationPool(Protocol):
    """What a session needs from its workers (implemented by ``WorkerPool`` and ``RayPool``).

    ``spec`` may be replaced before :meth:`start` (a sweep points the worker log into its run).
    """

    spec: WorkerSpec
    jobs: int
    timeout: float
    info: dict[str, Any]

    @property
    def replaced(self) -> int:
        """Workers started afresh after a crash or a hang."""
        ...

    def start(self) -> dict[str, Any]: ...

    def evaluate(self, argv: Sequence[str]) -> dict[str, Any]: ...

    def request(self, payload: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]: ...

    def imap_unordered(self, items: Iterable[tuple[Any, Sequence[str]]], *,
                       depth: int = 2) -> Iterator[tuple[Any, dict[str, Any]]]: ...

    def worker_pids(self) -> list[int]: ...

    def close(self) -> None: ...


def make_pool(spec: WorkerSpec, *, jobs: int | None, timeout: float, executor: str = LOCAL,
              address: str | None = None) -> EvaluationPool:
    """The worker pool of ``executor``.

    :param jobs: workers; ``None`` = this machine's cores (local) or the Ray cluster's CPUs (ray).
    :param address: Ray only: ``None`` starts a local Ray instance, ``auto`` joins the
        cluster this machine belongs to, ``HOST:PORT`` / ``ray://HOST:PORT`` a given one.
    :raises UsageError: unknown executor, or ``address`` given to the local executor.
    :raises ExecutorError: Ray is not installed, or nothing listens at ``address``.
    """
    if executor == LOCAL:
        if address is not None:
            raise UsageError("--address is for --executor ray; the local executor runs on this machine")
        return WorkerPool(spec, jobs=jobs or default_local_jobs(), timeout=timeout)
    if executor == RAY:
        from bisect_spec.runtime.ray_executor import RayPool, check_reachable, import_ray

        import_ray()  # fail before a run is created, not when its first evaluation is due
        if address is not None:
            check_reachable(address)
        return RayPool(spec, jobs=jobs or 0, timeout=timeout, address=address)
    raise UsageError(f"unknown executor {executor!r}: choose {' or '.join(EXECUTORS)}")


#: The environment variable that sets the default number of local workers (``--jobs`` overrides it).
JOBS_ENV = "BISECT_SPEC_JOBS"


def default_local_jobs() -> int:
    """One worker per core, at most 8 (each holds SGLang in memory), unless ``BISECT_SPEC_JOBS`` says how many (a
    machine shared with other work).

    :raises UsageError: ``BISECT_SPEC_JOBS`` is not a whole number of at least 1.
    """
    import os

    given = os.environ.get(JOBS_ENV, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise UsageError(f"{JOBS_ENV}={given!r} is not a number of workers: set it to 1 or more, or unset it")
        return int(given)
    return max(1, min(os.cpu_count() or 1, 8))

"""The Ray executor: evaluation workers as Ray actors, for when one machine is not enough.

Each worker slot of a :class:`RayPool` is one Ray actor (:class:`WorkerActor`, one CPU)
that owns a one-worker :class:`~bisect_spec.runtime.worker.WorkerPool`: the worker process is
started inside the actor by ``worker.py``, and pipelining (two requests in flight),
timeouts and faults are handled by the very code the local executor runs. A worker that
segfaults, exits or hangs becomes the same ``crashed`` / ``timeout`` record as locally
and the actor starts a fresh one; an actor that dies itself (its node lost) is replaced
by the pool and its unanswered configurations are evaluated again.

Work is handed out in small chunks to whichever actor is free, and each chunk's results
stream back (a Ray generator, a few results per object) as they finish, so :meth:`RayPool.imap_unordered` yields
in completion order, like :class:`~bisect_spec.runtime.worker.WorkerPool`, and ``api.sweep``
journals them with the same code.

Ray is an optional extra and is imported only when this executor is used. Every node
needs bisect-spec and the release environments at the driver's paths (the same
``BISECT_SPEC_HOME`` layout); a node without them fails the start with a line naming it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.errors import BisectSpecError, ExecutorError, UsageError, WorkerError
from bisect_spec.runtime.worker import WorkerPool, WorkerSpec

log = logging.getLogger(__name__)

INSTALL_HINT = "install the extra: pip install 'bisect-spec[ray]'"
#: Object store of a Ray instance this module starts itself: results are small JSON records.
LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024
#: Most configurations handed to one actor at once (results stream back one by one).
MAX_CHUNK = 32
#: How often one configuration is handed out again after the actor evaluating it died.
ACTOR_RETRIES = 2
CONNECT_TIMEOUT = 10.0
#: Results an actor sends back at once, and the longest a finished result waits for company.
STREAM_BATCH = 8
STREAM_DELAY = 0.05


def import_ray() -> Any:
    """The ``ray`` module. :raises ExecutorError: Ray is not installed (naming the extra)."""
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(f"the ray executor needs Ray, which is not installed: {INSTALL_HINT}") from exc
    return ray


def connect(address: str | None = None) -> Any:
    """Connect this process to Ray once and return the ``ray`` module.

    :param address: ``None`` starts a local Ray instance (no dashboard, a small object
        store); ``auto`` joins the cluster this machine belongs to; ``HOST:PORT`` or
        ``ray://HOST:PORT`` a given one. A process already connected stays connected.
    :raises ExecutorError: Ray is missing, or there is no Ray at ``address``.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:
        options.update(address="local", object_store_memory=LOCAL_OBJECT_STORE_BYTES)
    else:
        check_reachable(address)
        options["address"] = address
    try:
        ray.init(**options)
    except (ConnectionError, TimeoutError) as exc:
        where = "no running Ray cluster on this machine (start one with `ray start --head`)" if address == "auto" else str(exc)
        raise ExecutorError(f"cannot connect to Ray at {address}: {where.splitlines()[0]}") from exc
    return ray


def check_reachable(address: str) -> None:
    """Fail fast on an address nothing listens at (Ray itself retries for minutes).

    :raises ExecutorError: the TCP connection is refused or times out.
    """
    host_port = address.removeprefix("ray://").rsplit("/", 1)[0]
    if address == "auto" or ":" not in host_port:
        return
    host, _, port = host_port.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"--address {address}: expected HOST:PORT, ray://HOST:PORT or auto") from None
    try:
        with socket.create_connection((host.strip("[]"), number), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ExecutorError(f"cannot connect to Ray at {address}: {reason} (is `ray start --head` running there?)") from exc


class ActorDied(Exception):
    """The Ray actor (not its worker process) is gone: its node was lost or it was killed."""


def ray_get(ray: Any, ref: Any, timeout: float | None = None) -> Any:
    """``ray.get`` with bisect-spec's errors: an error raised in the actor comes back as itself.

    :raises ActorDied: the actor is gone. :raises BisectSpecError: raised by the actor.
    :raises ExecutorError: anything else Ray reports.
    """
    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.RayActorError as exc:
        raise ActorDied(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, BisectSpecError):
            raise cause from None
        raise ExecutorError(f"Ray task failed: {type(cause).__name__}: {cause}") from exc
    except ray.exceptions.GetTimeoutError as exc:
        raise ExecutorError(f"Ray did not answer within {timeout:g} s") from exc


class WorkerActor:
    """Body of one Ray actor: a one-worker :class:`WorkerPool` on the actor's node.

    Only plain data crosses Ray: argv lists in, worker records out.
    """

    def __init__(self, spec: WorkerSpec, timeout: float) -> None:
        self.pool = WorkerPool(spec, jobs=1, timeout=timeout)

    def start(self) -> dict[str, Any]:
        python = self.pool.spec.python
        if not Path(python).exists():
            raise WorkerError(f"Ray node {socket.gethostname()} has no release environment at {python}: "
                              "install it there (bisect-spec env install) with the same BISECT_SPEC_HOME")
        return self.pool.start()

    def evaluate(self, argv: list[str]) -> dict[str, Any]:
        return self.pool.evaluate(argv)

    def request(self, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.pool.request(payload, timeout)

    def stream(self, items: list[tuple[int, list[str]]], depth: int) -> Iterator[list[tuple[int, dict[str, Any]]]]:
        """Evaluate ``(index, argv)`` pairs, yielding results in completion order (a Ray generator).

        Results go out in small batches (each Ray object costs more than an evaluation's
        reply): a batch is sent once it holds :data:`STREAM_BATCH` results or its oldest
        is :data:`STREAM_DELAY` seconds old, and always at the end of the chunk.
        """
        batch: list[tuple[int, dict[str, Any]]] = []
        oldest = 0.0
        for result in self.pool.imap_unordered(items, depth=depth):
            if not batch:
                oldest = time.monotonic()
            batch.append(result)
            if len(batch) >= STREAM_BATCH or time.monotonic() - oldest >= STREAM_DELAY:
                yield batch
                batch = []
        if batch:
            yield batch

    def replaced(self) -> int:
        return self.pool.replaced

    def where(self) -> dict[str, Any]:
        """Node, actor process and worker process (for tests and reports)."""
        workers = self.pool._all
        return {"node": socket.gethostname(), "actor_pid": os.getpid(), "worker_pid": workers[0].pid if workers else None}

    def close(self) -> None:
        self.pool.close()


_ACTOR_CLASS: Any = None


def actor_class() -> Any:
    """:class:`WorkerActor` as a Ray actor class (built on first use: Ray is imported lazily)."""
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        ray = import_ray()
        _ACTOR_CLASS = ray.remote(num_cpus=1, max_restarts=0)(WorkerActor)
    return _ACTOR_CLASS


@dataclass
class RayPool:
    """``jobs`` evaluation workers as Ray actors: the interface of :class:`WorkerPool`.

    :param jobs: actors, one CPU each; ``0`` = every CPU of the cluster.
    :param address: see :func:`connect`.
    """

    spec: WorkerSpec
    jobs: int = 0
    timeout: float = 60.0
    address: str | None = None
    info: dict[str, Any] = field(default_factory=dict, init=False)
    actors_replaced: int = field(default=0, init=False)
    _idle: queue.Queue[Any] = field(default_factory=queue.Queue, init=False)
    _all: list[Any] = field(default_factory=list, init=False)
    _ray: Any = field(default=None, init=False)
    _started_spec: WorkerSpec | None = field(default=None, init=False)

    def start(self) -> dict[str, Any]:
        """Place the actors and start every worker (in parallel); return the first one's self-description.

        :raises UsageError: more jobs than the cluster has CPUs. :raises WorkerError: a worker did not start.
        """
        ray = self._ray = connect(self.address)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if self.jobs <= 0:
            self.jobs = max(1, cpus)
        if self.jobs > cpus:
            raise UsageError(f"--jobs {self.jobs} needs {self.jobs} CPUs but the Ray cluster has {cpus} "
                             "(one per worker): lower --jobs")
        log_path = self.spec.log_path
        # actors run elsewhere (another cwd, another node): relative paths would land anywhere
        self._started_spec = dataclasses.replace(self.spec, log_path=str(Path(log_path).resolve()) if log_path else None)
        actors = [actor_class().remote(self._started_spec, self.timeout) for _ in range(self.jobs)]
        try:
            infos = [ray_get(ray, ref) for ref in [actor.start.remote() for actor in actors]]
        except (ActorDied, BisectSpecError) as exc:
            for actor in actors:
                ray.kill(actor)
            if isinstance(exc, ActorDied):
                raise ExecutorError(f"a Ray evaluation actor died while starting: {exc}") from exc
            raise
        for actor in actors:
            self._all.append(actor)
            self._idle.put(actor)
        self.info = infos[0]
        return self.info

    @property
    def replaced(self) -> int:
        """Workers started afresh after a crash or a hang, plus actors replaced after dying."""
        if not self._all:
            return self.actors_replaced
        counts: list[int] = [ray_get(self._ray, actor.replaced.remote()) for actor in self._all]
        return sum(counts) + self.actors_replaced

    def placements(self) -> list[dict[str, Any]]:
        """Where each actor and its worker run (node, actor pid, worker pid)."""
        return [ray_get(self._ray, actor.where.remote()) for actor in self._all]

    def worker_pids(self) -> list[int]:
        """Process ids of the workers, on the nodes that run them."""
        return [p["worker_pid"] for p in self.placements() if p["worker_pid"] is not None]

    def _replace(self, actor: Any) -> Any:
        """A started actor in place of a dead one. :raises WorkerError: the fresh worker did not start."""
        self._ray.kill(actor)
        self._all.remove(actor)
        fresh = actor_class().remote(self._started_spec, self.timeout)
        ray_get(self._ray, fresh.start.remote())
        self._all.append(fresh)
        self.actors_replaced += 1
        log.warning("a Ray evaluation actor died and was replaced")
        return fresh

    def evaluate(self, argv: Sequence[str]) -> dict[str, Any]:
        """Evaluate one configuration on any idle actor; worker faults come back as records."""
        actor = self._idle.get()
        try:
            for attempt in range(ACTOR_RETRIES + 1):
                try:
                    record: dict[str, Any] = ray_get(self._ray, actor.evaluate.remote(list(argv)))
                    return record
                except ActorDied as exc:
                    if attempt == ACTOR_RETRIES:
                        raise ExecutorError(f"Ray evaluation actors keep dying: {exc}") from exc
                    actor = self._replace(actor)
            raise AssertionError("unreachable")
        finally:
            self._idle.put(actor)

    def request(self, payload: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Send a non-evaluation request (flags, source, info) to one actor's worker."""
        actor = self._idle.get()
        try:
            reply: dict[str, Any] = ray_get(self._ray, actor.request.remote(payload, timeout))
            return reply
        except ActorDied as exc:
            raise ExecutorError(f"the Ray evaluation actor died answering {payload.get('op')}: {exc}") from exc
        finally:
            self._idle.put(actor)

    def imap_unordered(self, items: Iterable[tuple[Any, Sequence[str]]], *,
                       depth: int = 2) -> Iterator[tuple[Any, dict[str, Any]]]:
        """Evaluate ``(key, argv)`` pairs on every actor, yielding ``(key, record)`` as they finish.

        Keys stay here (only an index and the argv travel); each actor keeps ``depth``
        requests in flight in its worker, exactly as :meth:`WorkerPool.imap_unordered`.
        """
        keyed = list(items)
        keys = [key for key, _ in keyed]
        pending: deque[tuple[int, list[str]]] = deque((index, list(argv)) for index, (_, argv) in enumerate(keyed))
        tries = [0] * len(keyed)
        lock = threading.Lock()
        stop = threading.Event()
        done: queue.Queue[tuple[int, dict[str, Any]] | BaseException] = queue.Queue()
        runners = max(1, min(len(self._all), len(keyed)))

        def take() -> list[tuple[int, list[str]]]:
            with lock:
                size = max(1, min(MAX_CHUNK, len(pending) // (2 * runners)))
                return [pending.popleft() for _ in range(min(size, len(pending)))]

        def drain() -> None:
            actor = self._idle.get()
            try:
                while not stop.is_set():
                    chunk = take()
                    if not chunk:
                        return
                    answered: set[int] = set()
                    try:
                        for ref in actor.stream.remote(chunk, depth):
                            for index, record in ray_get(self._ray, ref):
                                answered.add(index)
                                done.put((index, record))
                    except (ActorDied, self._ray.exceptions.RayActorError) as exc:  # the stream itself may raise it
                        unanswered = [item for item in chunk if item[0] not in answered]
                        for index, _ in unanswered:
                            tries[index] += 1
                            if tries[index] > ACTOR_RETRIES:
                                raise ExecutorError(f"Ray evaluation actors keep dying: {exc}") from exc
                        with lock:
                            pending.extendleft(reversed(unanswered))
                        actor = self._replace(actor)
            except BaseException as exc:
                done.put(exc)
            finally:
                self._idle.put(actor)

        threads = [threading.Thread(target=drain, daemon=True) for _ in range(runners)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(len(keyed)):
                result = done.get()
                if isinstance(result, BaseException):
                    raise result
                index, record = result
                yield keys[index], record
        finally:
            stop.set()

    def close(self) -> None:
        """Stop every worker and its actor."""
        if self._ray is None:
            return
        closing = [actor.close.remote() for actor in self._all]
        for actor, ref in zip(self._all, closing, strict=True):
            try:
                ray_get(self._ray, ref, timeout=30.0)
            except (ActorDied, BisectSpecError) as exc:
                log.debug("closing a Ray evaluation actor: %s", exc)
            self._ray.kill(actor)
        self._all.clear()
        self._idle = queue.Queue()

    def __enter__(self) -> RayPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


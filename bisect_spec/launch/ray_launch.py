"""Real server launches as Ray tasks, each reserving the GPUs its flags need.

A launch of ``--tp-size 4 --dp-size 2`` occupies 8 GPUs of one node; submitted as a Ray
task with ``num_gpus=8`` it waits until a node has 8 free, and Ray sets
``CUDA_VISIBLE_DEVICES`` to them, so many launches share a GPU cluster without
colliding. The task calls :func:`bisect_spec.launch.server.launch_server` on the node and sends
back :meth:`LaunchOutcome.to_dict` (plain data); :func:`launch_many` yields outcomes in
completion order. Ray and the launch module are imported lazily.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.runtime.ray_executor import connect, ray_get

TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")
DP_FLAGS = ("--dp-size", "--dp", "--data-parallel-size")
PP_FLAGS = ("--pp-size", "--pipeline-parallel-size")


def _last_value(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of ``names`` in ``argv`` (``--flag V`` or ``--flag=V``), as argparse keeps it."""
    value: str | None = None
    for index, token in enumerate(argv):
        name, equals, inline = token.partition("=")
        if name in names:
            value = inline if equals else (argv[index + 1] if index + 1 < len(argv) else None)
    return value


def _size(argv: Sequence[str], names: Sequence[str]) -> int:
    raw = _last_value(argv, names)
    if raw is None:
        return 1
    try:
        size = int(raw)
    except ValueError:
        raise UsageError(f"{names[0]} {raw}: not a number of GPUs") from None
    if size < 1:
        raise UsageError(f"{names[0]} {raw}: needs at least 1")
    return size


def gpus_needed(argv: Sequence[str]) -> int:
    """GPUs one launch of ``argv`` occupies on its node.

    Tensor parallel × pipeline parallel × data parallel replicas; with
    ``--enable-dp-attention`` the data-parallel ranks split the tensor-parallel GPUs
    instead of adding replicas, so ``--dp`` adds none.

    :raises UsageError: a size that is not a positive number, or ``--nnodes`` > 1 (one
        Ray task runs on one node).
    """
    if _size(argv, ("--nnodes",)) > 1:
        raise UsageError("multi-node launches (--nnodes > 1) cannot run as one Ray task: launch them by hand")
    replicas = 1 if "--enable-dp-attention" in argv else _size(argv, DP_FLAGS)
    return _size(argv, TP_FLAGS) * _size(argv, PP_FLAGS) * replicas


@dataclass(frozen=True)
class LaunchRequest:
    """One launch, as plain data that can travel to a Ray node.

    The fields are :func:`bisect_spec.launch.server.launch_server`'s arguments; ``options`` holds
    any further keyword arguments it takes; ``num_gpus`` overrides :func:`gpus_needed`
    (``0`` to launch on a CPU-only cluster, where the launch fails as it would locally).
    """

    argv: tuple[str, ...]
    python: str
    log_path: str
    pythonpath: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] | None = None
    deadline: float = 600.0
    host: str = "127.0.0.1"
    port: int | None = None
    options: tuple[tuple[str, Any], ...] = ()
    num_gpus: int | None = None

    @property
    def gpus(self) -> int:
        return gpus_needed(self.argv) if self.num_gpus is None else self.num_gpus


def run_launch(request: LaunchRequest) -> dict[str, Any]:
    """Body of the Ray task: launch on this node, return the outcome as a dict."""
    from bisect_spec.launch.server import launch_server

    outcome = launch_server(list(request.argv), python=request.python, pythonpath=request.pythonpath,
                            env=dict(request.env) if request.env is not None else None, deadline=request.deadline,
                            log_path=Path(request.log_path), host=request.host, port=request.port, **dict(request.options))
    result: dict[str, Any] = outcome.to_dict()
    return result


def largest_node_gpus(ray: Any) -> int:
    """The most GPUs any alive node of the cluster has (a task's GPUs must be on one node)."""
    return max((int(node.get("Resources", {}).get("GPU", 0)) for node in ray.nodes() if node.get("Alive")), default=0)


def launch_many(requests: Iterable[LaunchRequest], *,
                address: str | None = None) -> Iterator[tuple[LaunchRequest, dict[str, Any]]]:
    """Run every launch as a Ray task reserving its GPUs; yield ``(request, outcome dict)`` as each ends.

    :param address: see :func:`bisect_spec.runtime.ray_executor.connect`.
    :raises UsageError: a launch needs more GPUs than any node of the cluster has (it would wait forever).
    :raises ExecutorError: Ray is missing or unreachable.
    """
    ray = connect(address)
    todo = list(requests)
    largest = largest_node_gpus(ray)
    for request in todo:
        if request.gpus > largest:
            raise UsageError(f"launching {' '.join(request.argv)} needs {request.gpus} GPUs on one node, "
                             f"but the largest node of the Ray cluster has {largest}")
    task = ray.remote(run_launch)
    by_ref = {task.options(num_gpus=request.gpus, num_cpus=1, max_retries=0).remote(request): request
              for request in todo}
    remaining = list(by_ref)
    while remaining:
        ready, remaining = ray.wait(remaining, num_returns=1)
        yield by_ref[ready[0]], ray_get(ray, ready[0])

"""Choosing an executor, and the GPUs a Ray launch reserves (no Ray cluster needed)."""

from __future__ import annotations

import os
import socket

import pytest

from bisect_spec.errors import ExecutorError, UsageError
from bisect_spec.launch.ray_launch import LaunchRequest, gpus_needed
from bisect_spec.runtime.executor import make_pool
from bisect_spec.runtime.ray_executor import check_reachable
from bisect_spec.runtime.worker import WorkerPool, WorkerSpec

SPEC = WorkerSpec(python="/nonexistent/python")


@pytest.mark.parametrize(("argv", "gpus"), [
    ([], 1),
    (["--tp-size", "8"], 8),
    (["--tp", "4", "--dp", "2"], 8),
    (["--tensor-parallel-size=2", "--data-parallel-size=3"], 6),
    (["--tp-size", "4", "--dp-size", "4", "--enable-dp-attention"], 4),  # dp ranks split the tp GPUs
    (["--tp-size", "2", "--pp-size", "2", "--dp-size", "2"], 8),
    (["--tp-size", "2", "--tp-size", "4"], 4),  # argparse keeps the last
    (["--speculative-algorithm", "EAGLE3", "--tp", "8", "--speculative-num-steps", "2"], 8),
])
def test_gpus_needed_is_tp_times_pp_times_dp_replicas(argv: list[str], gpus: int) -> None:
    assert gpus_needed(argv) == gpus


@pytest.mark.parametrize("argv", [["--tp-size", "eight"], ["--dp-size", "0"], ["--tp", "8", "--nnodes", "2"]])
def test_gpus_needed_rejects_what_one_task_cannot_reserve(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        gpus_needed(argv)


def test_a_launch_request_can_override_the_gpu_count() -> None:
    request = LaunchRequest(argv=("--tp-size", "8"), python="python", log_path="x.log")
    assert request.gpus == 8
    assert LaunchRequest(argv=("--tp-size", "8"), python="python", log_path="x.log", num_gpus=0).gpus == 0


def test_local_is_the_default_executor_and_the_unknown_is_a_usage_error() -> None:
    assert isinstance(make_pool(SPEC, jobs=2, timeout=5.0), WorkerPool)
    with pytest.raises(UsageError, match="unknown executor 'dask'"):
        make_pool(SPEC, jobs=2, timeout=5.0, executor="dask")
    with pytest.raises(UsageError, match="--address is for --executor ray"):
        make_pool(SPEC, jobs=2, timeout=5.0, address="auto")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_an_address_nothing_listens_at_fails_at_once_not_after_rays_retries() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(ExecutorError, match=f"cannot connect to Ray at {address}: Connection refused"):
        check_reachable(address)
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        check_reachable("127.0.0.1:port")


def test_bisect_spec_jobs_sets_the_default_number_of_local_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    from bisect_spec.runtime.executor import JOBS_ENV, default_local_jobs

    monkeypatch.setenv(JOBS_ENV, "3")
    assert default_local_jobs() == 3
    monkeypatch.setenv(JOBS_ENV, "0")
    with pytest.raises(UsageError, match="BISECT_SPEC_JOBS='0' is not a number of workers"):
        default_local_jobs()
    monkeypatch.delenv(JOBS_ENV)
    assert default_local_jobs() == max(1, min(os.cpu_count() or 1, 8))

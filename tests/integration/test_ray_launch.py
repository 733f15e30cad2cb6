"""Real launches as Ray tasks: GPUs reserved from the flags, the same outcome as a launch here.

``bisect_spec.launch.server`` (``launch_server``) is written on another branch: the test that
launches skips only while that module is missing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from bisect_spec.errors import UsageError
from bisect_spec.launch.ray_launch import LaunchRequest, launch_many
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments
from tests.conftest import shared_session
from tests.processes import FAKE_SERVER, Janitor, gone, tree_is_up, wait_for

pytestmark = [pytest.mark.usefixtures("ray_cluster")]

#: fails in argument resolution on 0.5.23 (the EAGLE3 draft-tokens assertion)
FAILING = ("--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3")


def test_a_launch_needing_more_gpus_than_any_node_has_is_refused_instead_of_waiting_forever(tmp_path: Path) -> None:
    request = LaunchRequest(argv=("--tp-size", "4", "--dp-size", "2"), python="python", log_path=str(tmp_path / "x.log"))
    with pytest.raises(UsageError, match=r"needs 8 GPUs on one node, but the largest node of the Ray cluster has 0"):
        list(launch_many([request]))


@pytest.mark.sglang
@pytest.mark.slow
def test_a_launch_through_ray_ends_like_the_same_launch_here(tmp_path: Path) -> None:
    """A real 0.5.23 server launch (CPU, simulated hardware) fails in resolution: same outcome, same signature."""
    from bisect_spec.launch.server import launch_server

    session = shared_session("0.5.23")
    target = session.target
    in_process = session.evaluate(session.with_draft(Config.from_argv(list(FAILING))))
    assert in_process.signature is not None
    spec = environments.get("0.5.23").worker_spec(hardware=target.hardware.record, gpus=target.hardware.gpus)
    assert target.draft is not None and target.draft.path is not None
    argv = ("--model-path", str(target.model.path), *target.model.extra_args,
            "--speculative-draft-model-path", str(target.draft.path), *FAILING)
    # as an evaluation worker prepares itself: the torchvision shim, the hardware profile during resolution
    options = (("torchvision_shim", True), ("hardware", target.hardware.record), ("gpus", target.hardware.gpus))
    here: dict[str, Any] = launch_server(list(argv), python=spec.python, pythonpath=spec.pythonpath, deadline=300,
                                         log_path=tmp_path / "here.log", torchvision_shim=True,
                                         hardware=target.hardware.record, gpus=target.hardware.gpus).to_dict()
    request = LaunchRequest(argv=argv, python=spec.python, pythonpath=spec.pythonpath, deadline=300,
                            log_path=str(tmp_path / "ray.log"), options=options,
                            num_gpus=0)  # no GPU here: the launch fails in resolution, as it does here
    [(answered, there)] = list(launch_many([request]))
    assert answered is request
    assert there["log"] == str(tmp_path / "ray.log") and (tmp_path / "ray.log").is_file()
    assert there["status"] == "resolution-failed"
    assert there["signature"]["id"] == in_process.signature.id
    for key in ("status", "classification", "exit", "sub_kind", "signature", "error"):
        assert there[key] == here[key], key


DRIVER = """
import sys, ray
from bisect_spec.launch.ray_launch import LaunchRequest, launch_many
address, fake, pidfile, log = sys.argv[1:]
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
server = (sys.executable, fake, "--fake-mode", "spawn-children", "--fake-delay", "600", "--fake-pidfile", pidfile)
list(launch_many([LaunchRequest(argv=(), python=sys.executable, log_path=log, deadline=600, num_gpus=0,
                                options=(("server_command", server),))]))
"""


def test_a_launch_task_whose_driver_dies_ends_its_server(tmp_path: Path, janitor: Janitor) -> None:
    """The driver is SIGKILLed while its task's server tree (daemons included) is up; the cluster lives on."""
    import ray

    pidfile = janitor.pidfile(tmp_path / "pids")
    driver = janitor.tool(subprocess.Popen([sys.executable, "-c", DRIVER, ray.get_runtime_context().gcs_address,
                                            str(FAKE_SERVER), str(pidfile), str(tmp_path / "server.log")]))
    started = tree_is_up(pidfile, "spawn-children")
    supervisor = psutil.Process(started[0]).parent()
    assert supervisor is not None
    everything = janitor.snapshot(supervisor)
    driver.kill()
    driver.wait()
    wait_for("every process of the task's server tree to be gone", lambda: gone(started, everything))

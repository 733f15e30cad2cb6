"""The warm worker daemon's answers when its pool fails: the client reads why, not a closed connection."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

from bisect_spec.errors import WorkerError
from bisect_spec.runtime.warm_daemon import Daemon

CONFIG = {"spec": {"python": "/nonexistent/python"}, "idle": 60, "label": "test", "timeout": 5}


class FailingPool:
    """Stands for a worker pool whose replacement worker does not start (nothing here runs SGLang)."""

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}

    def evaluate(self, argv: list[str], timeout: float | None = None) -> dict[str, Any]:
        raise WorkerError("worker did not start: ImportError: no module named sglang")

    def worker_pids(self) -> list[int]:
        return []

    def close(self) -> None:
        pass


def test_an_evaluation_the_pool_cannot_run_is_answered_with_its_reason(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, CONFIG)
    daemon.pool = FailingPool()  # type: ignore[assignment]
    daemon.ready.set()
    ours, theirs = socket.socketpair()
    client = threading.Thread(target=daemon._client, args=(theirs,))
    client.start()
    with ours, ours.makefile("rb") as reader:
        ours.sendall(json.dumps({"op": "eval", "argv": ["--tp-size", "2"]}).encode() + b"\n")
        reply = json.loads(reader.readline())
        assert reply == {"ok": False, "error": "WorkerError: worker did not start: ImportError: no module named sglang"}
        ours.sendall(json.dumps({"op": "status"}).encode() + b"\n")  # the connection still serves
        assert json.loads(reader.readline())["state"] == "ready"
    client.join()

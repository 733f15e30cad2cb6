#!/usr/bin/env python3
"""The last step of ``.ci/run``: no process this CI run started may still be alive.

A process belongs to the run when it started after ``--since-pid`` (``.ci/run`` itself)
and either carries the run's marker in its environment (``BISECT_SPEC_CI_RUN``, exported
by ``.ci/run`` and inherited by everything it starts: pytest, the tool, evaluation
workers, supervisors, servers, Ray's processes) or, having dropped its whole environment
(a double-forked daemon does), names this checkout or ``BISECT_SPEC_HOME`` in its command
line or working directory. This script and its ancestors are not counted.

Processes still ending get ``--grace`` seconds: the check waits for the list to be empty
(an event, polled) and fails only if it is not by then. It then prints one line per
process left (pid, parent, age, working directory, command), SIGKILLs them (they are
this run's own) and exits 1. Linux only (``/proc``); standard library only, so it runs
whether or not the virtual environment was built.

Usage: python3 scripts/ci_leftovers.py --since-pid PID [--grace 30] [--checkout DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import NamedTuple

MARKER = "BISECT_SPEC_CI_RUN"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, parent pid, start time in clock ticks since boot)``, None when it is gone."""
    text = _read(f"/proc/{pid}/stat").decode(errors="replace")
    if not text:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces or ')'
    return fields[0], int(fields[1]), int(fields[19])


def _ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 1 and pid not in found:
        found.add(pid)
        stat = _stat(pid)
        pid = stat[1] if stat else 0
    return found


class Leftover(NamedTuple):
    pid: int
    ppid: int
    age: float
    cwd: str
    command: str
    why: str

    def line(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}, {self.age:.0f} s old, {self.why}) in {self.cwd}: {self.command[:300]}"


def leftovers(since: int, marker: str, places: list[str]) -> list[Leftover]:
    """Live processes of this run (see the module docstring)."""
    anchor = _stat(since)
    if anchor is None:
        raise SystemExit(f"ci_leftovers: no process {since} to date the run from")
    mine = _ancestors(os.getpid())
    now = float(_read("/proc/uptime").split()[0])
    ticks = os.sysconf("SC_CLK_TCK")
    found: list[Leftover] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        pid = int(entry)
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X") or stat[2] < anchor[2]:
            continue
        environ = _read(f"/proc/{pid}/environ").split(b"\0")
        command = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = "?"
        if f"{MARKER}={marker}".encode() in environ:
            why = "carries the run's marker"
        elif not any(environ) and any(place in command or cwd.startswith(place) for place in places):
            why = "no environment; names this checkout"
        else:
            continue
        found.append(Leftover(pid, stat[1], now - stat[2] / ticks, cwd, command, why))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since-pid", type=int, required=True, help="the CI run's own process (.ci/run)")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds processes still ending may take")
    parser.add_argument("--checkout", default=str(Path(__file__).resolve().parents[1]))
    options = parser.parse_args()
    marker = os.environ.get(MARKER)
    if not marker:
        print(f"ci_leftovers: {MARKER} is not set: nothing marks this run's processes", file=sys.stderr)
        return 2
    places = [str(Path(options.checkout).resolve())]
    if os.environ.get("BISECT_SPEC_HOME"):
        places.append(str(Path(os.environ["BISECT_SPEC_HOME"]).resolve()))
    deadline = time.monotonic() + options.grace
    while True:
        found = leftovers(options.since_pid, marker, places)
        if not found or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if not found:
        print("no process of this CI run is left")
        return 0
    print(f"{len(found)} process(es) of this CI run outlived it ({options.grace:g} s after the tests ended):")
    for proc in found:
        print(f"  {proc.line()}")
    for proc in found:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGKILL)
    print("they were SIGKILLed (this run started them)")
    return 1


if __name__ == "__main__":
    sys.exit(main())

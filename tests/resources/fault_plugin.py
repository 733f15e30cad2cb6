"""Test-only worker plugin: real faults, triggered by ``--served-model-name fault:<kind>``.

Loaded into an evaluation worker through ``BISECT_SPEC_WORKER_PLUGIN``. Every fault is
real: a segfault through ctypes, a hang, ``os._exit``, a real failed allocation, garbage
written on the worker's protocol pipe, a real attempt to reach a model hub.

With ``BISECT_SPEC_FAULT_NOTES=FILE`` each fault first appends ``KIND PID`` to FILE, so a
test waits for "the worker is in its hang" as an event.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time


def before_evaluate(argv: list[str]) -> list[str]:
    kind = ""
    for index, token in enumerate(argv[:-1]):
        if token == "--served-model-name" and argv[index + 1].startswith("fault:"):
            kind = argv[index + 1].removeprefix("fault:")
    notes = os.environ.get("BISECT_SPEC_FAULT_NOTES")
    if kind and notes:
        with open(notes, "a") as handle:
            handle.write(f"{kind} {os.getpid()}\n")
    if kind == "segfault":
        ctypes.string_at(0)
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "exit":
        os._exit(7)
    elif kind == "sysexit":
        sys.exit(4)
    elif kind == "memory":
        bytearray(1 << 46)  # 64 TiB: a real MemoryError from the allocator
    elif kind == "network":
        import urllib.request

        urllib.request.urlopen("http://huggingface.co/api/models/moonshotai/Kimi-K2.6", timeout=30)
    elif kind == "stand_in":
        # a stand-in of the emulation read where no stage stops on it: a BaseException of bisect-spec's own
        from bisect_spec.inside.model_classes import NotLoaded

        raise NotLoaded("reads the loaded target worker's model (a plugin's fault)")
    elif kind == "garbage":
        os.write(int(os.environ["BISECT_SPEC_PROTOCOL_FD"]), b"this is not json\n")
        time.sleep(3600)
    return argv


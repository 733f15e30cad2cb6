"""The target worker's checks on its built runner (``target_worker`` stage; mirrors ``TpModelWorker``):
the request pool's size against the running requests.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .device_stops import _stop_words
from .faults import _refused_in
from .sglang_lookup import _imported
from .siblings import model_classes
from .stage import Progress, Stage, _NotLoaded
from .standins import _Shell


def _requests_refusal(runner: Any, progress: Progress, refusals: list[BaseException]) -> BaseException | None:
    """The target worker's own check that the runner it built has room for a request (``TpModelWorker.__init__``:
    ``assert self.max_running_requests > 0, "max_running_request is zero"``), run on the runner once SGLang sized
    its pool: every launch passes it before it serves (:func:`model_classes.requests_check_statements`).

    What SGLang's sizing set is checked: ``--max-running-requests`` divided by the attention-DP width can leave
    none (1 // 8 = 0: a public benchmark script records the assert on eight schedulers with ``--dp 8
    --enable-dp-attention --max-running-requests 1``). Its refusal is SGLang's verdict, sound: a launch that
    gets past the runner meets it (stage ``target_worker``). Before it, in launch order, the CUDA graphs' batch
    sizes are chosen against the same request pool (:func:`_capture_sizes`: 0.5.10+ size that pool at zero too,
    and refuse there first, ``capture_bs=[0]``); the attention backends and the kernel warm-up between are not
    run here. Run where the runner's figure is set: 0.5.10+ in the sizing itself; up to 0.5.9 by the runner's
    own statements right after it (:func:`model_classes.running_requests_statements`), run here once the request
    pool exists, also where building the other pools stopped at a value only a GPU holds (a GPU builds them and
    goes on to those statements). The refusal is returned, and listed in ``refusals``; None where the check
    passes or is not run."""
    taken = model_classes.running_requests_statements(type(runner).__mro__[1])
    if taken is not None and _request_pool_size(runner) is not None:
        with contextlib.suppress(Exception, _NotLoaded):  # the runner's own statements after the sizing (0.4.6 … 0.5.9)
            model_classes.run(taken, self=runner)
    worker_cls = getattr(_imported("sglang.srt.managers.tp_worker"), "TpModelWorker", None)
    checks = model_classes.requests_check_statements(worker_cls) if isinstance(worker_cls, type) else None
    running = vars(runner).get("max_running_requests")
    if checks is None or not isinstance(running, int) or isinstance(running, bool):
        return None
    progress.enter(TARGET_WORKER.name)
    unbuilt = len(checks.nodes) > 1 and vars(runner).get("req_to_token_pool") is None
    if unbuilt:  # 0.5.16+'s pools stopped before the runner took them: the checks after the first read them
        checks = model_classes.Statements(checks.filename, checks.function, checks.nodes[:1], checks.module,
                                          checks.owner)
    try:
        held = {name: vars(runner)[name] for name in ("model_config", "ps") if name in vars(runner)}  # the worker's too
        model_classes.run(checks, self=_Shell("the target worker", model_runner=runner, **held))
    except AssertionError as exc:
        if not _refused_in(exc, checks.filename):
            raise
        refusals.append(exc)
        return exc
    except Exception as exc:
        raise _NotLoaded(f"the target worker's checks stopped at {_stop_words(exc)}") from None
    if unbuilt:
        progress.needs_gpu[TARGET_WORKER.name] = ("its checks after the first read the request pool, which building the "
                                               "pools did not reach here (the memory pool's stop)")
    return None


def _request_slots(runner: Any, args: Any) -> int | None:
    """The request slots SGLang sized the pool for: the request pool's size, or (where building the pools stopped
    before it) what the sizing wrote into the server arguments for the draft (``max_num_reqs``)."""
    size = _request_pool_size(runner)
    if size is None:
        size = getattr(args, "max_num_reqs", None)
    return size if isinstance(size, int) else None


def _request_pool_size(runner: Any) -> int | None:
    """The size of the request pool the runner built, or None before it exists."""
    size = getattr(vars(runner).get("req_to_token_pool"), "size", None)
    return size if isinstance(size, int) else None


TARGET_WORKER = Stage("target_worker", "the target worker's checks on its built runner",
                      "TpModelWorker.__init__'s checks on its runner (managers/tp_worker.py), on the sized pool",
                      run=lambda launch: _requests_refusal(launch.runner, launch.progress, launch.refusals))

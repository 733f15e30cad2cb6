"""What ``launch_server`` checks of the server arguments before the device step (mirrors
``srt/server_args.py``): the GPUs a configuration needs.
"""

from __future__ import annotations

from typing import Any

from .sglang_lookup import _view
from .stage import FIRST_STAGE, Launch, Stage, WillNotStart


def gpus_needed(view: Any) -> int:
    """GPUs one node gives the launch: ``tp × pp`` ranks per node (times ``dp`` without DP attention, whose replicas
    each hold their own), placed from ``--base-gpu-id`` every ``--gpu-id-step`` as SGLang's scheduler places them
    (``gpu_id = base_gpu_id + rank * gpu_id_step``): the highest GPU id used, plus one."""
    nnodes = max(int(getattr(view, "nnodes", 1) or 1), 1)
    ranks = int(getattr(view, "tp_size", 1) or 1) * int(getattr(view, "pp_size", 1) or 1)
    if not getattr(view, "enable_dp_attention", False):
        ranks *= int(getattr(view, "dp_size", 1) or 1)
    per_node = max(ranks // nnodes, 1)
    base = int(getattr(view, "base_gpu_id", 0) or 0)
    step = int(getattr(view, "gpu_id_step", 1) or 1)
    return base + (per_node - 1) * step + 1


def _gpus_checked(args: Any) -> None:
    """The box has the GPUs the parallel layout places its ranks on (:func:`gpus_needed`), else it will not start."""
    import torch

    view = _view(args)
    have = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    need = gpus_needed(view)
    if have and need > have:
        layout = ", ".join(f"{name} {getattr(view, name, 1)}" for name in ("tp_size", "pp_size", "dp_size", "nnodes")
                           if int(getattr(view, name, 1) or 1) > 1)
        raise WillNotStart("gpus", f"the parallel layout ({layout}) places ranks on {need} GPUs per node; the box has "
                           f"{have}: a real launch cannot set the device of the ranks past GPU {have - 1}",
                           needed=need, available=have)


def _check_server_args(launch: Launch) -> None:
    launch.progress.enter(CHECK_SERVER_ARGS.name)
    launch.args.check_server_args()


PARSE = Stage(FIRST_STAGE, "argument parsing", "argparse in prepare_server_args (srt/server_args.py); run by the evaluator")
RESOLVE = Stage("resolve", "argument resolution",
                "ServerArgs.__post_init__ and resolve_once() (srt/server_args.py, arg_groups/); run by the evaluator")
CHECK_SERVER_ARGS = Stage("check_server_args", "check_server_args",
                          "ServerArgs.check_server_args(), from Engine._launch_subprocesses (srt/server_args.py)",
                          run=_check_server_args)

"""The fidelity oracle's reading of a launch: markers, when the tree has settled, the verdict (no process started)."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path
from typing import Any

from bisect_spec.inside import launch_oracle
from bisect_spec.inside.launch_oracle import MARKER


def load_bench() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_fidelity", Path(__file__).resolve().parents[2] / "scripts" / "bench_fidelity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def marker(pid: int, t: float, **event: Any) -> str:
    return MARKER + json.dumps({**event, "pid": pid, "t": t, "seq": 1, "main_thread": event.pop("main_thread", True)})


def launch_logs(*, scheduler_stop: str | None = "set_device", main_waits: bool = True, detokenizer_waits: bool = True,
                ranks: int = 2) -> dict[str, str]:
    """A launcher (pid 10) that forked ``ranks`` schedulers (20, 21, ...) and a detokenizer (30)."""
    main = [marker(10, 1.0, e="start", role="main")]
    main += [marker(10, 1.1 + rank / 10, e="spawn", child=20 + rank, target="run_scheduler_process") for rank in range(ranks)]
    main.append(marker(10, 1.5, e="spawn", child=30, target="run_detokenizer_process"))
    if main_waits:
        main.append(marker(10, 2.0, e="reached", what="wait-children"))
    logs = {"main.log": "\n".join(["[2026] server_args=...", *main]) + "\n"}
    for rank in range(ranks):
        lines = [marker(20 + rank, 1.2, e="start", role="run_scheduler_process")]
        if scheduler_stop:
            lines.append(marker(20 + rank, 1.8, e="reached", what=scheduler_stop))
        logs[f"{20 + rank}.log"] = "\n".join(lines) + "\n"
    detokenizer = [marker(30, 1.6, e="start", role="run_detokenizer_process")]
    if detokenizer_waits:
        detokenizer.append(marker(30, 1.7, e="reached", what="wait-ipc"))
    logs["30.log"] = "\n".join(detokenizer) + "\n"
    return logs


def settled(logs: dict[str, str]) -> bool:
    return launch_oracle.settled(launch_oracle.events_of(logs))


def test_the_tree_settles_when_every_process_reached_its_stop() -> None:
    assert settled(launch_logs())
    assert launch_oracle.verdict(launch_logs(), ended="reached")["stop"] == "set_device"


def test_it_has_not_settled_while_any_process_is_still_on_its_way() -> None:
    assert not settled(launch_logs(main_waits=False))  # the launcher still builds its tokenizer manager
    assert not settled(launch_logs(detokenizer_waits=False))
    assert not settled(launch_logs(scheduler_stop=None))
    partial = launch_logs(ranks=3)
    partial["22.log"] = marker(22, 1.2, e="start", role="run_scheduler_process") + "\n"
    assert not settled(partial)


def test_a_scheduler_settles_only_at_a_device_weights_or_network_stop() -> None:
    # a scheduler that waits on a pipe (the DP controller's init pipe) has not reached device work yet
    assert not settled(launch_logs(scheduler_stop="wait-children"))
    for stop in ("init_process_group", "load_model", "init_torch_distributed", "network"):
        assert settled(launch_logs(scheduler_stop=stop))


def test_a_stop_seen_from_a_background_thread_does_not_count() -> None:
    logs = launch_logs(main_waits=False)
    logs["main.log"] += marker(10, 2.0, e="reached", what="network", main_thread=False) + "\n"
    assert not settled(logs)


def test_a_helper_that_exited_cleanly_has_settled_and_a_marker_cut_by_a_kill_is_skipped() -> None:
    logs = launch_logs()
    logs["main.log"] += marker(10, 1.9, e="spawn", child=40, target="helper") + "\n" + MARKER + '{"e": "rea'
    logs["40.log"] = marker(40, 1.95, e="start", role="helper") + "\n" + marker(40, 1.99, e="exit", code=0) + "\n"
    assert settled(logs)


LAUNCHER_FAILURE = """\
[2026-12-01 01:45:20] server_args=...
Traceback (most recent call last):
  File "/opt/sglang/python/sglang/launch_server.py", line 84, in <module>
    run_server(server_args)
  File "/opt/sglang/python/sglang/srt/entrypoints/engine.py", line 1165, in _launch_subprocesses
    server_args.check_server_args()
  File "/opt/sglang/python/sglang/srt/arg_groups/validation_hook.py", line 133, in check_pipeline_parallel_compat
    assert cfg.speculative_algorithm.upper() == "EAGLE", "Pipeline parallelism currently only supports EAGLE"
AssertionError: Pipeline parallelism currently only supports EAGLE
"""

SCHEDULER_FAILURE = """\
[2026-12-01 01:45:21] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 793, in init_model_config
    self.model_config = ModelConfig.from_server_args(server_args)
  File "/opt/sglang/python/sglang/srt/configs/model_config.py", line 1313, in _derive_context_length
    raise ValueError(f"User-specified context_length ({context_length}) is greater than the derived one")
ValueError: User-specified context_length (999999) is greater than the derived one

"""

LAUNCHER_CONSEQUENCE = """\
Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/entrypoints/engine.py", line 2031, in _wait_for_scheduler_ready
    raise RuntimeError("Initialization failed. Please see the error messages above.")
RuntimeError: Initialization failed. Please see the error messages above.
"""


def test_a_launcher_failure_gives_its_exception_and_failing_statement() -> None:
    result = launch_oracle.verdict({"main.log": LAUNCHER_FAILURE}, ended="exited", returncode=1)
    assert result["verdict"] == "failed" and result["process"] == "main"
    assert result["exception"]["type"] == "AssertionError"
    assert result["frame"]["function"] == "check_pipeline_parallel_compat"
    assert result["frame"]["file"] == "srt/arg_groups/validation_hook.py"


def test_a_scheduler_failure_explains_the_launchers_see_above() -> None:
    logs = launch_logs(scheduler_stop=None, main_waits=False)
    logs["20.log"] += SCHEDULER_FAILURE
    logs["main.log"] += LAUNCHER_CONSEQUENCE
    result = launch_oracle.verdict(logs, ended="exited", returncode=1)
    assert (result["verdict"], result["process"]) == ("failed", "run_scheduler_process")
    assert result["exception"]["type"] == "ValueError"
    assert result["frame"]["function"] == "_derive_context_length"


def test_the_device_answering_counts_as_reaching_device_work() -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 5, in __init__\n'
           "    torch.cuda.Stream()\n"
           '  File "/usr/lib/python3.11/site-packages/torch/cuda/__init__.py", line 403, in _lazy_init\n'
           '    raise AssertionError("Torch not compiled with CUDA enabled")\n'
           "AssertionError: Torch not compiled with CUDA enabled\n")
    result = launch_oracle.verdict({"main.log": log}, ended="exited", returncode=1)
    assert (result["verdict"], result["stop"]) == ("reached", "device-error")


def test_a_launch_that_neither_settles_nor_fails_timed_out() -> None:
    assert launch_oracle.verdict(launch_logs(main_waits=False), ended="timed-out")["verdict"] == "timed-out"


def in_process(status: str, exc_type: str = "", statement: str = "") -> dict[str, Any]:
    return {"status": status, "exception": {"type": exc_type}, "frame": {"statement": statement}}


def oracle(verdict: str, exc_type: str = "", statement: str = "") -> dict[str, Any]:
    return {"verdict": verdict, "exception": {"type": exc_type}, "frame": {"statement": statement}}


def test_agreement_passed_needs_reached_and_failed_needs_the_same_type_and_statement() -> None:
    agreement = load_bench().agreement
    assert agreement(in_process("passed"), oracle("reached"))["agree"]
    assert agreement(in_process("passed"), oracle("failed", "ValueError", "raise X"))["kind"] == \
        "passed-but-launch-failed"
    assert agreement(in_process("passed"), oracle("timed-out"))["kind"] == "passed-but-launch-timed-out"
    # the receiver's name is normalised as in signatures: self.x in one release, cfg.x in another
    assert agreement(in_process("failed", "AssertionError", "assert self.page_size == 1"),
                                   oracle("failed", "AssertionError", "assert cfg.page_size == 1"))["agree"]
    assert agreement(in_process("failed", "AssertionError", "assert _.a"),
                                   oracle("failed", "AssertionError", "assert _.b"))["kind"] == "different-failure"
    assert agreement(in_process("failed", "AssertionError", "assert _.a"),
                                   oracle("failed", "ValueError", "assert _.a"))["kind"] == "different-exception"
    assert agreement(in_process("failed", "ValueError", "x"), oracle("reached"))["kind"] == \
        "failed-but-launch-reached"


def test_the_launch_copys_special_tokens_sit_at_the_ids_the_config_gives() -> None:
    kimi_like = {"bos_token_id": 163584, "eos_token_id": 163585, "pad_token_id": 163839,
                 "media_placeholder_token_id": 163605, "text_config": {"vocab_size": 163840}}
    assert launch_oracle._special_tokens(kimi_like) == {"<s>": 163584, "<pad>": 163839, "<|media_pad|>": 163605,
                                                        "</s>": 163585}
    llama_like = {"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}
    assert launch_oracle._special_tokens(llama_like) == {"<s>": 128000, "</s>": 128001, "<|eos_1|>": 128008,
                                                         "<|eos_2|>": 128009}


def test_a_data_parallel_controller_waits_in_its_rank_threads_and_the_tree_must_then_be_quiet() -> None:
    logs = launch_logs(ranks=0)
    logs["main.log"] += marker(10, 1.05, e="spawn", child=50, target="run_data_parallel_controller_process") + "\n"
    logs["50.log"] = "\n".join([marker(50, 1.1, e="start", role="run_data_parallel_controller_process"),
                                marker(50, 1.2, e="spawn", child=60, target="run_scheduler_process"),
                                marker(50, 1.9, e="reached", what="wait-children", main_thread=False)]) + "\n"
    logs["60.log"] = marker(60, 1.3, e="start", role="run_scheduler_process") + "\n" + \
        marker(60, 1.8, e="reached", what="set_device", detail="(0,)") + "\n"
    events = launch_oracle.events_of(logs)
    assert not launch_oracle.settled(events, quiet=0.2)  # another rank's thread may not have started its schedulers
    assert launch_oracle.settled(events, quiet=launch_oracle.QUIET_SECONDS)
    assert launch_oracle.verdict(logs, ended="reached")["processes"]["60"]["details"] == ["set_device(0,)"]

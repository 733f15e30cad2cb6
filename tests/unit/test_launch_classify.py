"""Classifying a launch's end from its log text (no process started)."""

from __future__ import annotations

import json

from bisect_spec.inside import statements
from bisect_spec.launch import server as launch


def outcome_for(log: str, returncode: int = 1) -> launch.LaunchOutcome:
    outcome = launch.LaunchOutcome(status="timed-out", seconds=1.0, argv=[], command=[], log="x.log", port=1,
                                   returncode=returncode, exit=f"exit({returncode})")
    launch.classify_exit(outcome, log)
    return outcome


RESOLUTION_LOG = """\
[2026-11-30 10:00:00] server_args=ServerArgs(...)
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/opt/sglang/python/sglang/launch_server.py", line 29, in <module>
    server_args = prepare_server_args(sys.argv[1:])
                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/opt/sglang/python/sglang/srt/server_args.py", line 5001, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
  File "/opt/sglang/python/sglang/srt/server_args.py", line 900, in _handle_speculative_decoding
    assert self.page_size == 1
AssertionError: page size must be 1
  with a second line
"""


def test_resolution_traceback_is_resolution_failed_with_the_innermost_sglang_frame() -> None:
    outcome = outcome_for(RESOLUTION_LOG)
    assert outcome.status == "resolution-failed"
    assert outcome.frame["file"] == "srt/server_args.py"
    assert outcome.frame["function"] == "_handle_speculative_decoding"
    assert outcome.signature is not None
    assert outcome.signature.location == "srt/server_args.py::_handle_speculative_decoding"
    assert outcome.signature.statement == "assert _.page_size == 1"
    assert outcome.signature.message == "page size must be <n> with a second line"
    assert outcome.error == "AssertionError: page size must be 1"


def test_subprocess_traceback_is_failed_later_even_through_server_args() -> None:
    log = ("[2026] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/opt/sglang/python/sglang/srt/server_args.py", line 3, in resolve_once\n'
           "    x()\n"
           "RuntimeError: boom\n"
           "[2026] Received sigquit from a child process.\n")
    outcome = outcome_for(log)
    assert (outcome.status, outcome.sub_kind) == ("failed-later", "scheduler")
    assert outcome.signature is None


def test_oom_wins_over_scheduler_and_nccl_over_other() -> None:
    assert outcome_for("x hit an exception: Traceback (most recent call last):\n"
                       "torch.OutOfMemoryError: CUDA out of memory.\n").sub_kind == "cuda-oom"
    assert outcome_for("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled\n").sub_kind == "nccl"
    plain = outcome_for("just died\n", returncode=-9)
    assert (plain.status, plain.sub_kind, plain.error) == ("failed-later", "other", "exit(-9)")


def test_argparse_error_is_a_usage_resolution_failure() -> None:
    outcome = outcome_for("usage: launch_server.py [-h] ...\n"
                          "launch_server.py: error: argument --tp-size: invalid int value: 'x'\n", returncode=2)
    assert outcome.status == "resolution-failed"
    assert outcome.signature is not None and outcome.signature.kind == "usage"
    assert outcome.signature.message == "argument --tp-size: invalid int value: 'x'"
    assert outcome.error == "usage: argument --tp-size: invalid int value: 'x'"


def test_chained_tracebacks_are_separate_blocks_and_the_last_decides() -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/a.py", line 1, in f\n'
           "KeyError: 'k'\n"
           "\n"
           "During handling of the above exception, another exception occurred:\n"
           "\n"
           "Traceback (most recent call last):\n"
           '  File "/b.py", line 2, in g\n'
           "    raise ValueError('v')\n"
           "ValueError: v\n")
    blocks = statements.traceback_blocks(log)
    assert [(b["type"], b["message"]) for b in blocks] == [("KeyError", "'k'"), ("ValueError", "v")]
    assert outcome_for(log).exception == {"type": "ValueError", "message": "v"}


def test_marks_give_the_raising_sub_expression() -> None:
    assert statements._expression_from_marks("    if a.x > 3 and b:", "       ^^^^^^^") == "a.x > 3"


def test_launch_outcome_round_trips_through_json() -> None:
    outcome = outcome_for(RESOLUTION_LOG)
    data = json.loads(json.dumps(outcome.to_dict()))
    assert data["schema"] == "bisect-spec/launch/1"
    assert data["classification"] == f"resolution-failed/{outcome.signature.id if outcome.signature else ''}"
    assert launch.LaunchOutcome.from_dict(data) == outcome


def test_build_command_replaces_host_and_port() -> None:
    command = launch.build_command(["--port", "30000", "--host=0.0.0.0", "--tp", "8"], python="py", port=4242)
    assert command == ["py", "-m", "sglang.launch_server", "--tp", "8", "--host", "127.0.0.1", "--port", "4242"]


def test_after_resolution_the_first_subprocess_traceback_is_the_cause() -> None:
    log = ("[2026] Scheduler hit an exception: Traceback (most recent call last):\n"
           '  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 7, in load_model\n'
           "    self.model = get_model()\n"
           "ValueError: unsupported architecture\n"
           "[2026] Received sigquit from a child process. It usually means the child failed.\n"
           "Traceback (most recent call last):\n"
           '  File "/opt/sglang/python/sglang/launch_server.py", line 33, in <module>\n'
           "    run_server(server_args)\n"
           '  File "/opt/sglang/python/sglang/srt/entrypoints/engine.py", line 2032, in _wait_for_scheduler_ready\n'
           '    raise RuntimeError("Initialization failed. Please see the error messages above.")\n'
           "RuntimeError: Initialization failed. Please see the error messages above.\n")
    outcome = outcome_for(log)
    assert (outcome.status, outcome.sub_kind) == ("failed-later", "scheduler")
    assert outcome.error == "ValueError: unsupported architecture"
    assert outcome.frame["function"] == "load_model"


HYBRID_LOG = """\
[2025-08-18 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2543, in run_scheduler_process
    scheduler = Scheduler(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1444, in _get_attention_backend
    assert (
AssertionError: Currently HybridAttentionBackend does not support speculative decoding.
[2025-08-18] Received sigquit from a child process. It usually means the child failed.
"""


def test_a_failure_after_the_weights_agrees_only_with_a_launch_that_fails_later_in_the_same_words() -> None:
    # sglang#9330's shape: the scheduler dies in the attention-backend choice, after the weights load
    in_process = {"status": "failed", "after_weights": True, "stage": "attention_backend",
                  "exception": {"type": "AssertionError",
                                "message": "Currently HybridAttentionBackend does not support speculative decoding."},
                  "signature": {"id": "d2366e0ac3"}}
    later = outcome_for(HYBRID_LOG)
    assert later.status == "failed-later"
    assert launch.compare(in_process, later) == {"agree": True, "kind": "agree",
                                                 "note": "both fail after the weights load"}
    ready = launch.LaunchOutcome(status="ready", seconds=1.0, argv=[], command=[], log="x.log", port=1)
    assert launch.compare(in_process, ready)["kind"] == "launch-passes-after-weights"
    other = outcome_for(HYBRID_LOG.replace("Currently HybridAttentionBackend", "Some other backend"))
    assert launch.compare(in_process, other)["agree"] is False

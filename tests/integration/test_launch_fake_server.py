"""Real launches, supervised: classification, cleanup of the whole tree, signals, signatures.

The server is ``tests/resources/fake_server.py`` (a real process tree that behaves like
``launch_server`` in each way the launcher cares about), except where a test says it runs
SGLang's real ``launch_server``. The resolution-error mode runs the real installed SGLang
0.5.23 resolution, so its traceback is SGLang's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bisect_spec.errors import WorkerError
from bisect_spec.launch import server as launch
from bisect_spec.launch import supervision
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments
from tests.conftest import require_release, shared_session
from tests.processes import (
    BISECT_SPEC,
    FAKE_SERVER,
    Janitor,
    Tool,
    gone,
    launched_pids,
    running,
    tree_is_up,
    wait_for,
)
from tests.schemas import assert_valid

EAGLE_FAILURE = Config.from_argv(["--tp-size", "8", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                  "@draft", "--speculative-num-draft-tokens", "3"])


def fake(*options: str) -> list[str]:
    return ["{python}", str(FAKE_SERVER), *options]


@pytest.mark.parametrize(("mode", "classification"), [
    ("ready", "ready"),
    ("crash-later-oom", "failed-later/cuda-oom"),
    ("crash-later-nccl", "failed-later/nccl"),
    ("crash-later", "failed-later/scheduler"),
    ("spawn-children", "ready"),
    ("ignore-sigterm", "ready"),
    ("hang", "timed-out"),
])
def test_fake_server_mode_is_classified_and_leaves_nothing_behind(mode: str, classification: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    outcome = launch.launch_server(["--model-path", "m"], python=sys.executable, log_path=tmp_path / "server.log",
                                   server_command=fake("--fake-mode", mode, "--fake-pidfile", str(pidfile)),
                                   deadline=4.0, grace=1.0)
    assert outcome.classification == classification
    assert (outcome.seconds_to_ready is not None) == (classification == "ready")
    assert outcome.leftover_pids == []
    assert outcome.port_freed and supervision.port_is_free(outcome.port)
    started = launched_pids(pidfile)
    assert started, "the fake server records the processes it starts"
    assert [pid for pid in started if running(pid)] == []
    assert "--port" in outcome.command and str(outcome.port) in outcome.command
    assert Path(outcome.log).read_text().startswith("[fake] launch_server mode=")
    assert launch.LaunchOutcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome
    if mode == "spawn-children":  # root, child, re-parented grandchild, the one that left the session
        assert len(set(outcome.pids) & set(started)) >= 4
    if mode.startswith("crash-later"):
        assert outcome.exit == "exit(1)"
        assert "Traceback (most recent call last):" in outcome.traceback_tail.splitlines()[0]
        assert outcome.traceback_tail.splitlines()[-1].startswith(("torch.", "RuntimeError"))
        assert outcome.frame["function"] == "run_scheduler_process"


def supervisors(log: Path) -> list[int]:
    """Running supervisors whose launch logs to ``log`` (its stderr is that log)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.cmdline()[1:2] == [str(supervision.SUPERVISOR_SCRIPT)] and os.readlink(f"/proc/{proc.pid}/fd/2") == str(log):
                found.append(proc.pid)
    return found


def test_a_server_command_that_cannot_start_is_one_error_and_leaves_nothing(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with pytest.raises(WorkerError, match=r"^cannot start the server command /nonexistent/server: No such file or directory$"):
        launch.launch_server([], python=sys.executable, log_path=log, server_command=["/nonexistent/server"])
    assert supervisors(log) == []


def test_fake_server_repeat_reports_flaky_launches(tmp_path: Path) -> None:
    state = tmp_path / "state"
    outcomes = [launch.launch_server([], python=sys.executable, log_path=tmp_path / f"{n}.log", deadline=10.0,
                                     server_command=fake("--fake-mode", "flaky", "--fake-state", str(state)))
                for n in range(3)]
    assert launch.flakiness(outcomes) == {"flaky": True,
                                          "classifications": {"failed-later/cuda-oom": 1, "ready": 2}}
    assert launch.flakiness(outcomes[:1])["flaky"] is False


@pytest.mark.parametrize(("command", "mode", "how"), [
    ("launch", "spawn-children", "sigint"),
    ("launch", "spawn-children", "sigterm"),
    ("launch", "ignore-sigterm", "double-sigint-during-cleanup"),
    ("launch", "spawn-children", "sigkill"),
    ("launch", "ignore-sigterm", "sigkill"),
    ("launch", "spawn-children", "terminal-closed"),
    ("crosscheck", "spawn-children", "sigkill"),  # the path of shrink --launch and sweep --launch too
])
def test_fake_server_tree_is_gone_after_the_tool_is_interrupted(command: str, mode: str, how: str, tmp_path: Path,
                                                               janitor: Janitor) -> None:
    """However ``bisect-spec launch``/``crosscheck`` ends, no process of the server tree survives it (daemons included)."""
    require_release("0.5.23")
    pidfile = janitor.pidfile(tmp_path / "pids")
    server = f"{{python}} {FAKE_SERVER} --fake-mode {mode} --fake-delay 600 --fake-pidfile {pidfile}"
    configs = tmp_path / "configs.txt"
    configs.write_text("--tp 8\n")
    what = ["--", "--tp", "8"] if command == "launch" else [str(configs)]
    tool = Tool([str(BISECT_SPEC), command, "--sglang", "0.5.23", "--launch-without-gpu", "--launch-timeout", "600",
                 "--runs-dir", str(tmp_path / "runs"), "--server-command", server, *what],
                janitor, terminal=how == "terminal-closed")
    started = tree_is_up(pidfile, mode)
    supervisor = psutil.Process(started[0]).parent()
    assert supervisor is not None and supervisor.cmdline()[1] == str(supervision.SUPERVISOR_SCRIPT)
    everything = janitor.snapshot(supervisor)  # the tool, its evaluation worker, the supervisor, the whole server tree
    assert set(started) - {p.pid for p in everything} <= set(started[2:7:3]), "orphans stay under the supervisor"
    if how == "sigkill":
        tool.process.kill()
    elif how == "terminal-closed":
        tool.close_terminal()
    else:
        tool.process.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    if how == "double-sigint-during-cleanup":
        signals = pidfile.with_name("pids.signals")
        wait_for("the server to be sent SIGTERM (cleanup began)", lambda: signals.is_file() and bool(signals.read_text()))
        tool.process.send_signal(signal.SIGINT)
    wait_for("the tool to exit", lambda: tool.process.poll() is not None)
    wait_for("every process of the tree to be gone", lambda: gone(started, everything))
    # an orderly stop exits 130, but after a hang-up its last line cannot be written (EIO): 1
    assert tool.process.returncode == {"sigkill": -signal.SIGKILL, "terminal-closed": 1}.get(how, 130)


DRIVER = """
import sys, threading
from pathlib import Path
from bisect_spec.launch import server as launch
log, fake, mode, pidfile, where = sys.argv[1:]
def run():
    launch.launch_server([], python=sys.executable, log_path=Path(log), deadline=600,
                         server_command=[sys.executable, fake, "--fake-mode", mode, "--fake-delay", "600",
                                         "--fake-pidfile", pidfile])
if where == "thread":
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
else:
    run()
"""


@pytest.mark.parametrize(("mode", "where", "sig"), [
    ("spawn-children", "main", signal.SIGKILL),
    ("ignore-sigterm", "main", signal.SIGKILL),
    ("spawn-children", "thread", signal.SIGTERM),  # no handler off the main thread: SIGTERM kills it outright
], ids=["sigkill", "sigkill-ignore-sigterm", "sigterm-in-a-thread"])
def test_a_launching_process_killed_without_any_cleanup_leaves_no_server(mode: str, where: str, sig: signal.Signals,
                                                                         tmp_path: Path, janitor: Janitor) -> None:
    """``launch_server`` (no SGLang): the supervisor alone ends the tree when its launcher dies."""
    pidfile = janitor.pidfile(tmp_path / "pids")
    driver = janitor.tool(subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "server.log"), str(FAKE_SERVER),
                                            mode, str(pidfile), where]))
    started = tree_is_up(pidfile, mode)
    supervisor = psutil.Process(started[0]).parent()
    assert supervisor is not None and supervisor.cmdline()[1] == str(supervision.SUPERVISOR_SCRIPT)
    assert supervisor.ppid() != driver.pid, "detached: killing the driver's children does not kill it"
    everything = janitor.snapshot(supervisor)
    if mode == "spawn-children":  # the grandchild and the daemon, whose parents exited, are the supervisor's now
        assert [psutil.Process(pid).ppid() for pid in (started[3], started[6])] == [supervisor.pid, supervisor.pid]
    driver.send_signal(sig)
    assert driver.wait(timeout=60) == -sig
    wait_for("every process of the tree to be gone", lambda: gone(started, everything))


def dead_launcher_marker() -> str:
    """The launch marker of a bisect-spec that has since died (a crash of an older version, say)."""
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    marker = f"{launcher.pid}-{int(psutil.Process(launcher.pid).create_time() * 1000)}-1"
    launcher.kill()
    launcher.wait()
    return marker


def fake_server(janitor: Janitor, pidfile: Path, mode: str, port: int, marker: str | None = None) -> list[int]:
    """A fake server started by the test itself (not by bisect-spec), up and answering; its pids."""
    env = {k: v for k, v in os.environ.items() if k != supervision.LAUNCH_MARKER}
    if marker:
        env[supervision.LAUNCH_MARKER] = marker
    janitor.tool(subprocess.Popen([sys.executable, str(FAKE_SERVER), "--fake-mode", mode, "--fake-delay", "0",
                                   "--port", str(port), "--fake-pidfile", str(janitor.pidfile(pidfile))], env=env))
    return tree_is_up(pidfile, mode)


def test_leftover_launches_and_port_holders_are_named_never_killed(tmp_path: Path, janitor: Janitor) -> None:
    left_port, other_port = supervision.free_port(), supervision.free_port()
    leftover = fake_server(janitor, tmp_path / "leftover", "ignore-sigterm", left_port, dead_launcher_marker())
    running_launch = fake_server(janitor, tmp_path / "running", "ready", supervision.free_port(), supervision.new_marker())
    holder = fake_server(janitor, tmp_path / "holder", "ready", other_port)
    found = supervision.leftover_servers([left_port, other_port])
    ours = {f.pid: f for f in found if f.pid in (*leftover, *running_launch, *holder)}
    assert set(ours) == {leftover[0], holder[0]}, "one line per leftover launch, none for a launch still running"
    assert [ours[pid].command for pid in (leftover[0], holder[0])] == [
        shlex.join(psutil.Process(pid).cmdline()) for pid in (leftover[0], holder[0])]
    assert ours[leftover[0]].line().startswith(
        f"left over from an earlier bisect-spec launch, holding port {left_port}: pid {leftover[0]} (and 1 more of its "
        f"processes): {sys.executable} {FAKE_SERVER} --fake-mode ignore-sigterm")
    assert ours[holder[0]].line().startswith(
        f"port {other_port} is held (not started by bisect-spec): pid {holder[0]}: {sys.executable} {FAKE_SERVER}")
    assert all(f.line().endswith("; bisect-spec leaves it alone") and "\n" not in f.line() for f in found)
    assert all(running(pid) for pid in (*leftover, *running_launch, *holder))


def test_launch_names_a_leftover_holding_its_port_and_leaves_it_running(tmp_path: Path, janitor: Janitor) -> None:
    require_release("0.5.23")
    port = supervision.free_port()
    leftover = fake_server(janitor, tmp_path / "leftover", "ignore-sigterm", port, dead_launcher_marker())
    result = subprocess.run([str(BISECT_SPEC), "launch", "--sglang", "0.5.23", "--launch-without-gpu", "--runs-dir",
                             str(tmp_path / "runs"), "--server-command", f"{{python}} {FAKE_SERVER} --fake-mode ready",
                             "--", "--tp", "8", "--port", str(port)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if f"pid {leftover[0]} " in line]
    assert line.startswith(f"note: left over from an earlier bisect-spec launch, holding port {port}: pid {leftover[0]} "
                           f"(and 1 more of its processes): {sys.executable} {FAKE_SERVER} --fake-mode ignore-sigterm")
    assert line.endswith("; bisect-spec leaves it alone")
    assert "ready in" in result.stdout
    assert all(running(pid) for pid in leftover)


@pytest.mark.sglang
@pytest.mark.slow
def test_fake_server_resolution_error_has_the_in_process_signature(tmp_path: Path) -> None:
    session = shared_session("0.5.23")  # kimi-k2.6 + eagle3 on a simulated rtx-pro-6000 box
    in_process = session.evaluate(EAGLE_FAILURE)
    environment = environments.get("0.5.23")
    outcome = launch.launch_server(session.argv(EAGLE_FAILURE), python=environment.python,
                                   pythonpath=environment.pythonpath, log_path=tmp_path / "server.log", deadline=240,
                                   server_command=fake("--fake-mode", "resolution-error", "--fake-hardware", "rtx-pro-6000"))
    assert in_process.signature is not None and outcome.signature is not None
    assert outcome.status == "resolution-failed"
    assert outcome.signature == in_process.signature
    assert outcome.signature.id == in_process.signature.id == "c894a92892"
    assert outcome.frame["statement_lines"] == in_process.frame["statement_lines"]
    assert outcome.leftover_pids == [] and outcome.port_freed


@pytest.mark.sglang
@pytest.mark.slow
def test_real_launch_server_under_a_simulated_box_has_the_in_process_signature(tmp_path: Path) -> None:
    """SGLang's own ``python -m sglang.launch_server`` main, prepared as a worker is (no fake)."""
    session = shared_session("0.5.23")
    in_process = session.evaluate(EAGLE_FAILURE)
    environment = environments.get("0.5.23")
    outcome = launch.launch_server(session.argv(EAGLE_FAILURE), python=environment.python,
                                   pythonpath=environment.pythonpath, log_path=tmp_path / "server.log", deadline=240,
                                   server_command=(), torchvision_shim=True,
                                   hardware=session.target.hardware.record, gpus=8)
    assert "sglang.launch_server" in outcome.command
    assert outcome.status == "resolution-failed"
    assert outcome.signature is not None and in_process.signature is not None
    assert outcome.signature.id == in_process.signature.id


def test_fake_server_crosscheck_reports_a_disagreement(tmp_path: Path) -> None:
    """In-process: the EAGLE3 config fails, the plain one passes; the fake server says ready to both."""
    require_release("0.5.23")
    configs = tmp_path / "configs.txt"
    configs.write_text("# one configuration per line\n--tp 8\n" + " ".join(EAGLE_FAILURE.argv()).replace("@draft", "/x/eagle")
                       + "\n")
    result = subprocess.run([str(BISECT_SPEC), "crosscheck", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--json",
                             "--runs-dir", str(tmp_path / "runs"), "--server-command",
                             f"{{python}} {FAKE_SERVER} --fake-mode ready", str(configs)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "bisect-spec/crosscheck/1"
    assert_valid(report, "crosscheck")
    assert [(r["agree"], r["kind"]) for r in report["rows"]] == [(True, "agree"), (False, "launch-passes-resolution")]
    assert report["rows"][1]["in_process"] == "c894a92892"
    assert Path(report["path"], "crosscheck.json").is_file()


def test_launch_without_gpu_is_refused_unless_asked(tmp_path: Path) -> None:
    if launch.gpus_present():
        pytest.skip("this machine has a GPU")
    require_release("0.5.23")
    result = subprocess.run([str(BISECT_SPEC), "launch", "--sglang", "0.5.23", "--", "--tp", "8"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == ("Error: no GPU found on this machine: a real launch would fail at device detection; "
                                     "pass --launch-without-gpu to launch anyway, or --hardware PROFILE to simulate one "
                                     "during resolution")


def test_fake_server_launch_json_schema(tmp_path: Path) -> None:
    require_release("0.5.23")
    result = subprocess.run([str(BISECT_SPEC), "launch", "--sglang", "0.5.23", "--launch-without-gpu", "--json", "--repeat", "2",
                             "--runs-dir", str(tmp_path / "runs"), "--server-command",
                             f"{{python}} {FAKE_SERVER} --fake-mode ready --fake-delay 0.2", "--", "--tp", "8"],
                            capture_output=True, text=True, timeout=120, env={**os.environ})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "bisect-spec/launch/1"
    assert_valid(report, "launch")
    assert report["flaky"] is False and report["classifications"] == {"ready": 2}
    assert report["config"] == ["--tp-size", "8"]
    assert report["target"]["hardware"] == "cpu"
    outcome = report["outcome"]
    assert outcome["status"] == "ready" and outcome["seconds_to_ready"] > 0
    assert (report["status"], report["classification"], report["signature"]) == ("ready", "ready", None)
    assert outcome["health"]["endpoint"] == "/health" and outcome["health"]["model_info"]["model_path"] == "fake"
    assert outcome["leftover_pids"] == [] and outcome["port_freed"] is True
    assert Path(report["path"], "launch.json").is_file()


@pytest.mark.sglang
@pytest.mark.slow
def test_fake_server_confirms_shrink_result_by_launching(tmp_path: Path) -> None:
    """``shrink --launch``: the minimal reproducer and the nearest fix are launched (the fake crashes later)."""
    require_release("0.5.23")
    env = {**os.environ, launch.SERVER_COMMAND_ENV: f"{{python}} {FAKE_SERVER} --fake-mode crash-later-oom"}
    result = subprocess.run([str(BISECT_SPEC), "shrink", "--sglang", "0.5.23", "--hardware", "rtx-pro-6000", "--launch",
                             "--out", str(tmp_path / "out"), "--", *EAGLE_FAILURE.argv()[:2], *EAGLE_FAILURE.argv()[4:],
                             "--speculative-draft-model-path", "/x/eagle"],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("confirmed by real launches:", 1)[1]
    rows = {line.split("  ")[0]: line for line in table.splitlines() if line.startswith(("minimal", "nearest"))}
    assert set(rows) == {"minimal reproducer", "nearest fix"}
    assert "c894a92892" in rows["minimal reproducer"] and "NO: launch-passes-resolution" in rows["minimal reproducer"]
    assert "failed-later/cuda-oom" in rows["nearest fix"] and " yes " in rows["nearest fix"]
    stored = list((tmp_path / "runs").glob("crosscheck-*/crosscheck.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["disagreements"] == 1

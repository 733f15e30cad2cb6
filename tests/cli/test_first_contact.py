"""What a new user meets first (the ten items of the "your command, your model, your box" issue):
for each, the exact line the tool answers with and its exit status, on a real release.

1 options before the command · 2 a Hugging Face id · 3 the wheel's data · 4 a systemd unit ·
5 a release that does not exist · 6 one name per meaning · 7 warm answers · 8 Ctrl-C ·
9 drafts · 10 bisect's terms and counts (more in ``test_bisect_terms.py``, ``test_warm_workers.py``,
``test_interrupt.py`` and the wheel test in ``tests/quality``).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from tests.cli.helpers import error_line, run
from tests.conftest import require_release
from tests.processes import wait_for

pytestmark = pytest.mark.sglang

UNIT = """[Unit]
Description=SGLang server
After=network.target

[Service]
Environment=SGLANG_ENABLE_TORCH_COMPILE=0
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /models/Kimi-K2.6 --tp 8 \\
    --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3
Restart=always

[Install]
WantedBy=multi-user.target
"""


def lines(output: str) -> list[str]:
    return output.splitlines()


def tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bisect_spec", *args], capture_output=True, text=True, timeout=900)


def test_1_options_before_the_command_are_the_command_s() -> None:
    require_release("0.5.12")
    code, output = run("--sglang", "0.5.12", "--model", "llama-3.1-8b", "--hardware", "h100", "probe", "--",
                       "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1")
    assert code == 3, output
    assert any(re.fullmatch(r"SGLang 0\.5\.12 · llama-3\.1-8b \+ eagle3 · simulated:h100x8 · Python 3\.\d+\.\d+", line)
               for line in lines(output)), output
    assert ("verdict:  FAILED  TypeError: '>' not supported between instances of 'NoneType' and 'int' "
            "(srt/server_args.py:3838 in _handle_speculative_decoding)") in lines(output)


def test_2_a_hugging_face_id_is_that_model_or_one_refusal(tmp_path: Path) -> None:
    require_release("0.5.23")
    code, output = run("probe", "--sglang", "0.5.23", "--hardware", "h100", "--",
                       "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2")
    assert code == 0, output
    assert ("note: model path meta-llama/Llama-3.1-8B-Instruct is not on this machine: using the 'llama-3.1-8b' "
            "profile (its published config.json)") in lines(output)
    assert any(line.startswith("verdict:  PASSED") for line in lines(output)), output
    code, output = run("probe", "--sglang", "0.5.23", "--", "python -m sglang.launch_server --model-path "
                       "some-org/unknown-model --tp 2", env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert code == 2
    assert error_line(output) == ("Error: cannot fetch config.json of some-org/unknown-model from the Hugging Face hub "
                                  "(HF_HUB_OFFLINE is set): pass --model NAME for a shipped profile, or --model-path DIR "
                                  "holding its config.json")
    code, output = run("probe", "--sglang", "0.5.23", "--", "python -m sglang.launch_server --model-path "
                       "meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 --speculative-draft-model-path "
                       "lightseekorg/kimi-k2.6-eagle3", env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert code == 2  # a draft published for another model is never reshaped for this one
    assert error_line(output) == ("Error: cannot fetch config.json of lightseekorg/kimi-k2.6-eagle3 from the Hugging Face "
                                  "hub (HF_HUB_OFFLINE is set): pass --draft NAME for a shipped profile, or --draft-path "
                                  "DIR holding its config.json")


def test_3_the_package_carries_its_strategies_as_files() -> None:
    """The wheel had no strategies (a symlink); the wheel test in tests/quality runs a sweep from one."""
    strategies = resources.files("bisect_spec") / "data" / "strategies"
    shipped = sorted(p.name for p in strategies.iterdir() if p.name.endswith(".toml"))
    assert "default.toml" in shipped
    assert not Path(str(strategies)).is_symlink()
    assert all(not Path(str(strategies / name)).is_symlink() for name in shipped)


def test_4_a_whole_systemd_unit_is_its_exec_start_and_environment(tmp_path: Path) -> None:
    require_release("0.5.23")
    code, output = run("probe", "--sglang", "0.5.23", "--hardware", "h100x8", "--", UNIT)
    assert code == 3, output
    # the unit's command as typed: it names no draft path, and none is added (issue 41)
    assert ("flags:    SGLANG_ENABLE_TORCH_COMPILE=0 --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3 "
            "--tp-size 8") in lines(output)
    assert "verdict:  FAILED  AssertionError (srt/arg_groups/speculative_hook.py:1162 in _handle_eagle_family)" \
        in lines(output)


def test_5_a_release_that_does_not_exist_is_one_line_and_nothing_is_installed() -> None:
    from bisect_spec.runtime import environments

    code, output = run("probe", "--sglang", "0.5.99", "--", "--tp", "2")
    assert code == 2
    assert error_line(output).startswith("Error: SGLang 0.5.99 is not ")
    assert error_line(output).endswith("pick another --sglang")
    assert not (environments.home() / "envs" / "sglang-0.5.99").exists()


def test_6_one_name_per_meaning() -> None:
    code, output = run("shrink", "--out", "a", "--runs-dir", "b", "--", "--tp", "2")
    assert code == 2
    assert error_line(output) == "Error: --out is the old name of --runs-dir: give only --runs-dir"
    # (Kimi-K2.6 at tp 8 on H100s is SGLang's own "Loaded weights leave no GPU memory for the KV cache": its 71.66 GiB
    # of weights per GPU on an 80 GB card; a model that fits says only what the box is named)
    code, output = run("probe", "--sglang", "0.5.23", "--model", "llama-3.3-70b", "--draft", "none", "--hardware",
                       "h100x8", "--", "--tp", "8")
    assert "simulated:h100x8" in output and code == 0, output


def test_7_a_second_probe_is_answered_by_the_warm_worker() -> None:
    require_release("0.5.23")
    args = ("probe", "--json", "--sglang", "0.5.23", "--model", "llama-3.1-8b", "--hardware", "b200", "--gpus", "2",
            "--", "--tp", "2")
    first, second = tool(*args), tool(*args)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    pids = [json.loads(done.stdout)["worker"]["warm_worker"]["pid"] for done in (first, second)]
    assert pids[0] == pids[1]
    assert "starting a warm evaluation worker" not in second.stderr


def test_8_ctrl_c_while_a_worker_starts_exits_130_with_one_line() -> None:
    require_release("0.5.23")
    # a100: a box kind no other test uses (a warm worker serves every count of its kind), so this probe starts one
    probe = subprocess.Popen([sys.executable, "-m", "bisect_spec", "probe", "--sglang", "0.5.23", "--hardware", "a100",
                              "--gpus", "3", "--", "--tp", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert probe.stderr is not None
        first = probe.stderr.readline()  # said at once, before SGLang is imported
        assert first.startswith("starting a warm evaluation worker for SGLang 0.5.23 on a100: importing SGLang"), first
        probe.send_signal(signal.SIGINT)
        _, rest = probe.communicate(timeout=120)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.communicate()  # its pipes closed too: a failure here must not reach the next test as a warning
    assert probe.returncode == 130
    assert rest.strip().splitlines()[-1] == "interrupted" and "Traceback" not in rest

    def gone() -> bool:
        listed = json.loads(tool("workers", "list", "--json").stdout)["workers"]
        return not any(w["label"] == "SGLang 0.5.23 on a100" for w in listed)

    wait_for("the daemon that command started is stopped", gone)


def test_9_drafts_where_the_algorithm_needs_one_and_nowhere_else() -> None:
    require_release("0.5.23")
    code, output = run("probe", "--sglang", "0.5.23", "--hardware", "h100", "--draft", "none", "--",
                       "--speculative-algorithm", "EAGLE3", "--tp", "2")
    assert ("warning: EAGLE3 needs a draft model and none is given: a real launch would load the target checkpoint as "
            "its draft and fail; add --speculative-draft-model-path (or --draft NAME)") in lines(output), output
    # and it does fail, as the warning says: the target's own class is built as the draft (sglang#36528)
    assert code == 3, output
    assert any(line.startswith("verdict:  FAILED  AttributeError: 'KimiK25ForConditionalGeneration' object has no "
                               "attribute 'set_embed'") for line in lines(output)), output
    code, output = run("probe", "--sglang", "0.5.23", "--hardware", "h100", "--", "--speculative-algorithm", "NGRAM",
                       "--tp", "2")
    flags = next(line for line in lines(output) if line.startswith("flags:"))
    assert "--speculative-draft-model-path" not in flags, output


def test_10_bisect_says_how_many_releases_it_evaluated() -> None:
    for release in ("0.5.12", "0.5.23"):
        require_release(release)
    code, output = run("bisect", "--hardware", "h100", "--old", "0.5.12", "--new", "0.5.23", "--releases", "0.5.12,0.5.23",
                       "--", "--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3")
    assert code in (0, 3), output
    assert "releases 0.5.12 … 0.5.23: evaluated 2 of 2 releases, skipped 0, environments built 0" in output, output
    assert "… 0.5.12: failed; 1 release left (roughly 1 step)" in lines(output)

"""Configurations are canonical; pasted launch commands are understood."""

from __future__ import annotations

import pytest

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config, parse_command


def test_config_is_canonical_and_round_trips() -> None:
    a = Config.from_argv(["--tp-size", "8", "--speculative-algorithm", "EAGLE3", "--disable-cuda-graph"])
    b = Config.from_argv(["--disable-cuda-graph", "--speculative-algorithm=EAGLE3", "--tp-size", "8"])
    assert a == b and a.key() == b.key() and hash(a) == hash(b)
    assert Config.from_argv(a.argv()) == a
    assert a.get("--disable-cuda-graph") == ()


def test_negative_numbers_and_multi_value_flags() -> None:
    config = Config.from_argv(["--speculative-num-steps", "-1", "--cuda-graph-bs", "1", "2", "4"])
    assert config.get("--speculative-num-steps") == ("-1",)
    assert config.get("--cuda-graph-bs") == ("1", "2", "4")


def test_duplicate_flag_and_stray_value_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="given twice"):
        Config.from_argv(["--tp-size", "1", "--tp-size", "2"])
    with pytest.raises(UsageError, match="is not a flag"):
        Config.from_argv(["8"])


SYSTEMD = """ExecStart=/usr/bin/python3 -m sglang.launch_server \\
    --model-path /root/models/Kimi-K2.6 --tp 8 --trust-remote-code \\
    --speculative-algorithm EAGLE3 --speculative-draft-model-path /root/models/kimi-k2.6-eagle3 \\
    --speculative-num-draft-tokens 3 --port 30000"""


def test_systemd_execstart_with_continuations() -> None:
    pasted = parse_command([SYSTEMD])
    assert pasted.model_path == "/root/models/Kimi-K2.6"
    assert pasted.draft_path == "/root/models/kimi-k2.6-eagle3"
    assert pasted.config == Config.of({"--tp": "8", "--trust-remote-code": None, "--speculative-algorithm": "EAGLE3",
                                       "--speculative-num-draft-tokens": "3", "--port": "30000"})


@pytest.mark.parametrize("prefix", [
    ["python", "-m", "sglang.launch_server"],
    ["CUDA_VISIBLE_DEVICES=0,1", "python3", "-m", "sglang.launch_server"],
    ["sglang", "serve"],
    ["/opt/venv/bin/sglang", "serve"],
    [],
])
def test_launcher_prefixes(prefix: list[str]) -> None:
    pasted = parse_command([*prefix, "--model-path", "x", "--speculative-algorithm", "NGRAM"])
    assert pasted.config.without("CUDA_VISIBLE_DEVICES") == Config.of({"--speculative-algorithm": "NGRAM"})
    assert pasted.model_path == "x"


def test_not_an_sglang_command() -> None:
    with pytest.raises(UsageError, match="is not an SGLang launch"):
        parse_command(["vllm", "serve", "--model", "x"])


def test_empty_flag_list() -> None:
    with pytest.raises(UsageError, match="no SGLang flags given"):
        parse_command([])


UNIT = """[Unit]
Description=SGLang
[Service]
Environment="SGLANG_ENABLE_SPEC_V2=0" SGLANG_X=1
Environment=SGLANG_X=2
ExecStart=/usr/bin/python3 -m sglang.launch_server \\
    --model-path /root/models/Kimi-K2.6 --tp 8
Restart=always
[Install]
WantedBy=multi-user.target
"""


def test_a_whole_unit_file_keeps_its_environment_and_drops_other_keys() -> None:
    pasted = parse_command([UNIT])
    assert pasted.model_path == "/root/models/Kimi-K2.6"
    assert pasted.config == Config.of({"--tp": "8", "SGLANG_ENABLE_SPEC_V2": "0", "SGLANG_X": "2"})


@pytest.mark.parametrize("command", [
    "SGLANG_ENABLE_SPEC_V2=0 python -m sglang.launch_server --model-path m --tp 8",
    "env SGLANG_ENABLE_SPEC_V2=0 python3 -m sglang.launch_server --model-path m --tp 8",
    "ExecStart=/usr/bin/env SGLANG_ENABLE_SPEC_V2=0 python3 -m sglang.launch_server --model-path m --tp 8",
])
def test_environment_prefixes_are_part_of_the_configuration(command: str) -> None:
    config = parse_command([command]).config
    assert config.env() == {"SGLANG_ENABLE_SPEC_V2": "0"}
    assert config.flag_argv() == ["--tp", "8"]
    assert config.argv() == ["SGLANG_ENABLE_SPEC_V2=0", "--tp", "8"]
    assert Config.from_argv(config.argv()) == config
    assert str(config) == "SGLANG_ENABLE_SPEC_V2=0 --tp 8"


def test_environment_is_only_a_leading_prefix() -> None:
    with pytest.raises(UsageError, match="is not a flag"):
        Config.from_argv(["8", "SGLANG_X=1"])
    assert Config.from_argv(["--json-model-override-args", "A=1"]).env() == {}


def test_a_docker_run_command_keeps_its_container_environment_and_gpus() -> None:
    pasted = parse_command(['docker run --gpus "device=0,1" --shm-size 32g -p 30000:30000 -e SGLANG_X=1 '
                            "--env HF_TOKEN=hf_abc --ipc=host lmsysorg/sglang:latest python3 -m sglang.launch_server "
                            "--model-path meta-llama/Llama-3.1-8B-Instruct --tp 2"])
    assert pasted.model_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert pasted.config == Config.of({"--tp": "2", "SGLANG_X": "1", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert pasted.notes == ("HF_TOKEN left out: a secret, and it does not change how SGLang handles arguments",)
    with pytest.raises(UsageError, match="a 'docker run' command without an SGLang launch in it"):
        parse_command(["docker run -it ubuntu bash"])


@pytest.mark.parametrize(("name", "secret"), [("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("OPENAI_API_KEY", True),
                                              ("AWS_SECRET_ACCESS_KEY", True),
                                              ("SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK", False),
                                              ("SGLANG_ENABLE_SPEC_V2", False)])
def test_only_secrets_are_left_out_of_a_pasted_environment(name: str, secret: bool) -> None:
    pasted = parse_command([f"{name}=1 python -m sglang.launch_server --tp 2"])
    assert (name not in pasted.config.env()) is secret

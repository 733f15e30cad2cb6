"""Which model a pasted --model-path means (no hub: the fetch is refused offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisect_spec.errors import ProfileError
from bisect_spec.model_sources import fetch_config, is_hub_id, profile_named_by
from bisect_spec.profiles import model_names


@pytest.mark.parametrize(("path", "profile"), [
    ("moonshotai/Kimi-K2.6", "kimi-k2.6"),
    ("/root/models/Kimi-K2.6", "kimi-k2.6"),
    ("/data/kimi-k2.5/", "kimi-k2.5"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("/models/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("/data/eagle3/output_100k_sglang/4", None),
    ("Qwen/Qwen3-32B", None),
    ("meta-llama/Llama-3.3-70B-Instruct", None),
])
def test_a_path_or_id_names_a_shipped_profile_or_none(path: str, profile: str | None) -> None:
    assert profile_named_by(path, model_names()) == profile


def test_hub_ids_are_org_slash_name() -> None:
    assert is_hub_id("Qwen/Qwen3-32B")
    assert not is_hub_id("/root/models/Qwen3-32B")
    assert not is_hub_id("./Qwen3-32B")
    assert not is_hub_id("Qwen3-32B")


def test_an_unknown_id_offline_is_one_refusal_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ProfileError) as info:
        fetch_config("some-org/not-a-cached-model", tmp_path)
    message = str(info.value)
    assert message.startswith("cannot fetch config.json of some-org/not-a-cached-model from the Hugging Face hub")
    assert "--model NAME" in message and "--model-path DIR" in message
    assert "\n" not in message


def test_a_fetched_config_is_used_from_the_cache(tmp_path: Path) -> None:
    cached = tmp_path / "some-org--model"
    cached.mkdir()
    (cached / "config.json").write_text("{}")
    assert fetch_config("some-org/model", tmp_path) == cached

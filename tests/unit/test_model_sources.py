"""Which model a pasted --model-path means (no hub: the fetch is refused offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisect_spec.errors import ProfileError
from bisect_spec.runtime.model_sources import fetch_config, is_hub_id, profile_named_by
from bisect_spec.runtime.profiles import model_names


@pytest.mark.parametrize(("path", "profile"), [
    ("moonshotai/Kimi-K2.6", "kimi-k2.6"),
    ("/root/models/Kimi-K2.6", "kimi-k2.6"),
    ("/data/kimi-k2.5/", "kimi-k2.5"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("/models/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
    ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("Qwen/Qwen3-32B", "qwen3-32b"),
    ("/models/Qwen3-32B", "qwen3-32b"),
    ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("/root/models/Llama-3.3-70B-Instruct/", "llama-3.3-70b"),
    ("deepseek-ai/DeepSeek-V3.2", "deepseek-v3.2"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
    ("/data/Kimi-K2-Instruct", "kimi-k2"),
    ("openai/gpt-oss-20b", "gpt-oss-20b"),
    ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ("/data/eagle3/output_100k_sglang/4", None),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", None),  # another config (262144 context): fetched, not a profile
    ("moonshotai/Kimi-K2-Instruct-0905", None),  # likewise
    ("deepseek-ai/DeepSeek-V3.2-Exp", None),  # its own config.json was not found to compare
    ("deepseek-ai/DeepSeek-V3.1", None),
    ("zai-org/GLM-4.6", None),
    ("XiaomiMiMo/MiMo-7B-RL", None),
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


@pytest.mark.parametrize("path", ["moonshotai/Kimi-K2-Base", "Qwen/Qwen3-32B-FP8", "/models/Qwen3-8B-FP8"])
def test_a_variant_with_another_config_names_no_profile(path: str) -> None:
    assert profile_named_by(path, model_names()) is None


def test_offline_is_found_at_once_without_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that does not resolve is refused before huggingface_hub retries (half a minute of notices)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://no-such-host.invalid")
    with pytest.raises(ProfileError) as info:
        fetch_config("some-org/not-a-cached-model", tmp_path)
    assert str(info.value).startswith("cannot fetch config.json of some-org/not-a-cached-model from the Hugging Face "
                                      "hub (no-such-host.invalid: ")


def test_a_published_draft_id_is_its_recipe() -> None:
    from bisect_spec.runtime import profiles

    assert profiles.published_draft_ids()["lightseekorg/kimi-k2.6-eagle3"] == ("eagle3", "kimi-k2.6")

"""Profiles: shipped configs load, drafts are materialised per target, bad names get suggestions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bisect_spec.errors import ProfileError
from bisect_spec.runtime import profiles


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path))


def test_required_profiles_are_shipped() -> None:
    assert {"kimi-k2.6", "kimi-k2.5", "deepseek-v3", "llama-3.1-8b", "qwen3-8b"} <= set(profiles.model_names())
    assert {"eagle3", "eagle", "nextn", "standalone", "ngram"} <= set(profiles.draft_names())
    assert {"rtx-pro-6000", "h100", "h200", "b200", "a100"} <= set(profiles.hardware_names())


def test_kimi_profile_is_the_real_architecture() -> None:
    model = profiles.load_model("kimi-k2.6")
    assert model.architecture == "KimiK25ForConditionalGeneration"
    assert model.config["model_type"] == "kimi_k25"
    text = model.text_config
    assert (text["hidden_size"], text["num_hidden_layers"], text["n_routed_experts"], text["vocab_size"]) == \
        (7168, 61, 384, 163840)
    assert text["kv_lora_rank"] == 512  # MLA
    assert (model.path / "config.json").is_file()


def test_eagle3_draft_matches_its_target() -> None:
    for name in ("kimi-k2.6", "llama-3.1-8b"):
        model = profiles.load_model(name)
        draft = profiles.load_draft("eagle3", model)
        assert draft is not None and draft.path is not None
        config = json.loads((draft.path / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert config["num_hidden_layers"] == 1
        assert config["hidden_size"] == model.text_config["hidden_size"]
        assert config["vocab_size"] == model.text_config["vocab_size"]


def test_a_published_draft_is_its_own_config_for_its_own_target() -> None:
    published = profiles.published_drafts()
    assert len(published) >= 5
    for name, target in published.items():
        assert target in profiles.model_names(), name
        recipe = profiles.draft_recipe(name)
        assert "@target." not in json.dumps(recipe["config"]), name  # nothing borrowed from the target
        draft = profiles.load_draft(name, profiles.load_model(target))
        assert draft is not None and draft.path is not None and draft.algorithm == "EAGLE3"
        assert json.loads((draft.path / "config.json").read_text()) == recipe["config"]
        # an EAGLE3 head reads the target's hidden states: its hidden size is the target's
        assert recipe["config"]["hidden_size"] == profiles.load_model(target).text_config["hidden_size"], name


def test_a_published_draft_refuses_another_target() -> None:
    with pytest.raises(ProfileError, match=r"draft 'specforge-eagle3-qwen3-32b' is the published draft of the "
                                           r"'qwen3-32b' profile, not of 'llama-3.1-8b': pass --model qwen3-32b"):
        profiles.load_draft("specforge-eagle3-qwen3-32b", profiles.load_model("llama-3.1-8b"))


def test_nextn_and_ngram_have_no_draft_path() -> None:
    model = profiles.load_model("deepseek-v3")
    for name in ("nextn", "ngram"):
        draft = profiles.load_draft(name, model)
        assert draft is not None and draft.path is None and draft.draft_args == ()


def test_unknown_names_suggest_the_closest() -> None:
    with pytest.raises(ProfileError, match=r"unknown model 'kimi-k2\.7': did you mean kimi-k2\.6"):
        profiles.load_model("kimi-k2.7")
    with pytest.raises(ProfileError, match="unknown draft 'eagel3': did you mean eagle3"):
        profiles.load_draft("eagel3", profiles.load_model("kimi-k2.6"))
    with pytest.raises(ProfileError, match="unknown hardware profile 'h300'"):
        profiles.load_hardware("h300")


def test_user_directories(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"no config\.json there"):
        profiles.load_model(path=str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ProfileError, match="unreadable"):
        profiles.load_model(path=str(tmp_path))


def test_auto_hardware_defaults_to_the_stated_profile() -> None:
    auto = profiles.load_hardware("auto", 8)
    assert auto.name == profiles.DEFAULT_HARDWARE and auto.record is not None and auto.record["auto"] is True
    assert profiles.load_hardware("none").record is None
    with pytest.raises(ProfileError, match="at least one GPU"):
        profiles.load_hardware("h100", 0)


def test_a_box_label_is_a_hardware_name_too() -> None:
    from bisect_spec.errors import ProfileError
    from bisect_spec.runtime.profiles import load_hardware

    box = load_hardware("h100x2")
    assert (box.name, box.gpus, box.label) == ("h100", 2, "h100x2")
    assert load_hardware("h100x8", 8).label == "h100x8"
    with pytest.raises(ProfileError, match="--hardware h100x2 says 2 GPUs but --gpus says 4: drop one of them"):
        load_hardware("h100x2", 4)

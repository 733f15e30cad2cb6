"""Model, draft and hardware profiles shipped with the package.

A model profile is a real ``config.json`` (no weights, no tokenizer) and a ``profile.json``
naming the Hugging Face id it was published under (``hf_id``; bug reports name the model so). SGLang's
resolution reads the architecture, hidden size, MLA/MoE shape and quantization from it,
and ``model_path="dummy"`` shortcuts would skip most checks. A draft profile is a recipe:
EAGLE/EAGLE3/standalone drafts are materialised per target (an EAGLE3 head's hidden size
must match its target); a recipe's ``published`` maps a target to the Hugging Face id of a
published draft of that kind (a bug report's launch command names it), NEXTN uses the target itself and NGRAM has no draft model.
A draft profile that names a ``target`` is a published draft's own ``config.json`` (no
``@target`` values): it belongs to that one model profile and is refused for any other, since
a head trained for one target does not describe a draft for another.
Hardware profiles describe a GPU box for ``simulated_gpu``.

Everything materialised goes under ``environments.home()/profiles`` with deterministic
contents, so the same profile always yields the same paths and results.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from bisect_spec.errors import ProfileError
from bisect_spec.runtime.environments import home
from bisect_spec.runtime.files import write_if_changed

DEFAULT_HARDWARE = "rtx-pro-6000"
DEFAULT_GPUS = 8


def _data(*parts: str) -> Any:
    return resources.files("bisect_spec").joinpath("data", *parts)


def _names(kind: str) -> list[str]:
    folder = _data(kind)
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir()
                  if not p.name.startswith(("_", ".")) and (p.name.endswith(".json") or p.is_dir()))


def _unknown(kind: str, name: str, names: list[str], extra: str = "") -> ProfileError:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return ProfileError(f"unknown {kind} '{name}': {hint}choose one of {', '.join(names)}{extra}")


def model_names() -> list[str]:
    return _names("models")


def draft_names() -> list[str]:
    return _names("drafts")


def published_drafts() -> dict[str, str]:
    """Draft profiles that are one published draft's ``config.json``: name -> its model profile."""
    recipes = {name: _read_json(_data("drafts", f"{name}.json"), "draft profile") for name in draft_names()}
    return {name: str(recipe["target"]) for name, recipe in recipes.items() if "target" in recipe}


def published_draft_ids() -> dict[str, tuple[str, str]]:
    """Hugging Face ids of published drafts a recipe stands for (its ``published`` map), lower-cased:
    id -> (recipe name, the model profile it was published for)."""
    found: dict[str, tuple[str, str]] = {}
    for name in draft_names():
        recipe = _read_json(_data("drafts", f"{name}.json"), "draft profile")
        for model, hub_id in (recipe.get("published") or {}).items():
            found[str(hub_id).lower()] = (name, str(model))
    return found


def draft_recipe(name: str) -> dict[str, Any]:
    """A shipped draft profile's recipe as written (``config`` may hold ``@target.X`` values)."""
    if name not in draft_names():
        raise _unknown("draft", name, draft_names())
    return _read_json(_data("drafts", f"{name}.json"), "draft profile")


def hardware_names() -> list[str]:
    return _names("hardware")


def _read_json(path: Path | Any, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{what} {path} is unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"{what} {path} is not a JSON object")
    return data


@dataclass(frozen=True)
class ModelProfile:
    """A target model: a directory holding its ``config.json`` and extra launch flags."""

    name: str
    path: Path
    config: dict[str, Any]
    extra_args: tuple[str, ...] = ()
    #: the Hugging Face id of the checkpoint whose config.json this is (``profile.json``'s ``hf_id``)
    hf_id: str | None = None

    @property
    def text_config(self) -> dict[str, Any]:
        inner = self.config.get("text_config")
        return inner if isinstance(inner, dict) else self.config

    @property
    def architecture(self) -> str:
        return str((self.config.get("architectures") or ["?"])[0])


#: the ``--speculative-algorithm`` values a draft of each kind serves: an EAGLE-3 head runs EAGLE3, a model's own
#: NextN/MTP layers run NEXTN (and EAGLE, which SGLang gives the same path), a small model STANDALONE, n-grams NGRAM
SERVES: dict[str, tuple[str, ...]] = {"eagle3": ("EAGLE3",), "eagle": ("EAGLE",), "nextn": ("NEXTN", "EAGLE"),
                                      "standalone": ("STANDALONE",), "ngram": ("NGRAM",)}


@dataclass(frozen=True)
class DraftProfile:
    """A speculative draft: how it is materialised and which flags it implies."""

    name: str
    kind: str  # eagle3 | eagle | standalone | nextn | ngram | user
    algorithm: str
    path: Path | None
    #: the Hugging Face id of a published draft of this kind for the target (the recipe's ``published``)
    hf_id: str | None = None

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms this draft serves (:data:`SERVES`; a user's draft: the one its architecture names)."""
        return SERVES.get(self.kind, (self.algorithm,))

    @property
    def draft_args(self) -> tuple[str, ...]:
        return ("--speculative-draft-model-path", str(self.path)) if self.path else ()


@dataclass(frozen=True)
class HardwareProfile:
    """A GPU box to simulate (``name == 'none'`` is the honest CPU, ``'real'`` the real GPUs)."""

    name: str
    record: dict[str, Any] | None
    gpus: int

    @property
    def label(self) -> str:
        if self.record is None or self.name in ("none", "real"):
            return self.name
        return f"{self.name}x{self.gpus}"


def load_model(name: str | None = None, *, path: str | None = None) -> ModelProfile:
    """A shipped model profile by name, or a user's local config directory.

    :raises ProfileError: unknown name (with the closest names) or unreadable directory.
    """
    if path is not None:
        directory = Path(path).expanduser().resolve()
        if not (directory / "config.json").is_file():
            raise ProfileError(f"--model-path {path}: no config.json there; pass a directory that holds the model's config.json")
        config = _read_json(directory / "config.json", "model config")
        return ModelProfile(directory.name, directory, config, ("--trust-remote-code",))
    assert name is not None
    names = model_names()
    if name not in names:
        raise _unknown("model", name, names, "; or pass --model-path DIR")
    source = _data("models", name)
    meta = _read_json(source.joinpath("profile.json"), "model profile") if source.joinpath("profile.json").is_file() else {}
    config = _read_json(source.joinpath("config.json"), "model profile")
    target = home() / "profiles" / "models" / name
    write_if_changed(target / "config.json", json.dumps(config, indent=2, sort_keys=True))
    return ModelProfile(name, target, config, tuple(meta.get("extra_args", ["--trust-remote-code"])), meta.get("hf_id"))


def load_draft(name: str | None, model: ModelProfile, *, path: str | None = None) -> DraftProfile | None:
    """A draft profile materialised for ``model`` (or a user's draft directory).

    :raises ProfileError: unknown name, unreadable directory, or a published draft of another model.
    """
    if path is not None:
        directory = Path(path).expanduser().resolve()
        if not (directory / "config.json").is_file():
            raise ProfileError(f"--draft-path {path}: no config.json there; pass a directory that holds the draft's config.json")
        config = _read_json(directory / "config.json", "draft config")
        arch = str((config.get("architectures") or [""])[0])
        algorithm = "EAGLE3" if "Eagle3" in arch else "EAGLE" if "Eagle" in arch else "STANDALONE"
        return DraftProfile(directory.name, "user", algorithm, directory)
    if name is None or name == "none":
        return None
    if name not in draft_names():
        raise _unknown("draft", name, draft_names(), "; or pass --draft-path DIR")
    recipe = draft_recipe(name)
    target_name = recipe.get("target")
    if target_name is not None and target_name != model.name:
        raise ProfileError(f"draft '{name}' is the published draft of the '{target_name}' profile, not of "
                           f"'{model.name}': pass --model {target_name}, or --draft eagle3 for {model.name}")
    kind = str(recipe["kind"])
    if kind in ("nextn", "ngram"):
        return DraftProfile(name, kind, str(recipe["algorithm"]), None)
    config = draft_config(recipe, model)
    target = home() / "profiles" / "drafts" / f"{model.name}--{name}"
    write_if_changed(target / "config.json", json.dumps(config, indent=2, sort_keys=True))
    return DraftProfile(name, kind, str(recipe["algorithm"]), target, (recipe.get("published") or {}).get(model.name))


def draft_config(recipe: dict[str, Any], model: ModelProfile) -> dict[str, Any]:
    """The draft's ``config.json`` for ``model``: recipe values, with ``"@target.X"`` taken from the target."""
    text = model.text_config

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("@target."):
            key, _, fallback = value.removeprefix("@target.").partition("|")
            if key not in text and fallback:
                return json.loads(fallback)
            if key not in text:
                raise ProfileError(f"draft profile needs '{key}' from the target's config.json, which {model.name} lacks")
            return text[key]
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return value

    result: dict[str, Any] = resolve(recipe["config"])
    return result


def load_hardware(name: str = "auto", gpus: int = DEFAULT_GPUS) -> HardwareProfile:
    """A hardware profile: a shipped name, ``none`` (CPU) or ``auto``/``real``.

    ``auto`` means the real GPUs when the worker finds any, else :data:`DEFAULT_HARDWARE`;
    the worker decides (it is the process that can see the GPUs).
    :raises ProfileError: unknown name or a GPU count below 1.
    """
    if gpus < 1:
        raise ProfileError(f"--gpus {gpus}: a box needs at least one GPU")
    if name == "none":
        return HardwareProfile("none", None, gpus)
    if name == "real":
        return HardwareProfile("real", {"name": "real"}, gpus)
    if name == "auto":
        record = dict(_read_json(_data("hardware", f"{DEFAULT_HARDWARE}.json"), "hardware profile"))
        record["auto"] = True
        return HardwareProfile(DEFAULT_HARDWARE, record, gpus)
    names = hardware_names()
    counted = re.match(r"^(?P<base>.+)x(?P<count>\d+)$", name)
    if name not in names and counted and counted["base"] in names:
        # the label outputs show (h100x8) names a box too: h100 with 8 GPUs
        count = int(counted["count"])
        if gpus not in (DEFAULT_GPUS, count):
            raise ProfileError(f"--hardware {name} says {count} GPUs but --gpus says {gpus}: drop one of them")
        return load_hardware(counted["base"], count)
    if name not in names:
        raise _unknown("hardware profile", name, [*names, "auto", "none"])
    return HardwareProfile(name, _read_json(_data("hardware", f"{name}.json"), "hardware profile"), gpus)

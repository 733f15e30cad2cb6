"""A user's flags or pasted launch command, understood: the configuration, and the model and draft it names.

A pasted ``--model-path`` is looked up here, in the runtime layer, where the model sources live
(:mod:`bisect_spec.runtime.model_sources`): a local directory, the shipped profile it names, or a hub
id's ``config.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bisect_spec.errors import ProfileError, UsageError
from bisect_spec.model.flags import Config, parse_command
from bisect_spec.runtime import environments, profiles
from bisect_spec.runtime.session import DRAFT
from bisect_spec.runtime.target_spec import TargetSpec


def understand_flags(tokens: Sequence[str], spec: TargetSpec) -> tuple[Config, TargetSpec, list[str]]:
    """Parse flags or a pasted launch command; find the model and draft it names.

    The pasted ``--model-path`` decides the model (see :mod:`bisect_spec.runtime.model_sources`): a local
    directory, the shipped profile it names, or a hub id's fetched ``config.json``; a path that names
    none of these is refused unless ``spec`` chose a profile explicitly. A pasted draft path not on
    this machine becomes the draft profile of the pasted algorithm.

    :return: the configuration, the target spec, notes saying what was used for what.
    :raises ProfileError: a model that cannot be identified, or two choices that disagree.
    """
    pasted = parse_command(tokens)
    notes: list[str] = list(pasted.notes)
    config = pasted.config
    if pasted.model_path is not None:
        spec = _pasted_model(pasted.model_path, spec, notes)
    if pasted.draft_path is not None:
        spec = _pasted_draft(pasted.draft_path, config, spec, notes)
    if pasted.draft_path is not None:
        config = config.with_("--speculative-draft-model-path", DRAFT)
    elif pasted.model_path is not None and not spec.draft_chosen and spec.draft is not None:
        # a pasted command without a draft path is evaluated as typed: no default draft is added (where SGLang fills
        # the draft path itself, from an MTP model's own checkpoint, that is SGLang's doing, evaluated as it does it)
        spec = TargetSpec(**{**spec.__dict__, "draft": None})
    visible = config.env().get("CUDA_VISIBLE_DEVICES")
    if visible is not None:  # the box the command runs on: as many GPUs as it makes visible
        devices = [d for d in visible.split(",") if d.strip()]
        if not devices:
            raise UsageError("CUDA_VISIBLE_DEVICES is empty: no GPU would be visible to SGLang; drop it or name devices")
        spec = TargetSpec(**{**spec.__dict__, "gpus": len(devices)})
        config = config.without("CUDA_VISIBLE_DEVICES")
        notes.append(f"CUDA_VISIBLE_DEVICES={visible}: evaluating on {len(devices)} GPU(s) of the box")
    return config, spec, notes


def _pasted_model(path: str, spec: TargetSpec, notes: list[str]) -> TargetSpec:
    from bisect_spec.runtime.model_sources import fetch_config, is_hub_id, profile_named_by

    if spec.model_path is not None:
        notes.append(f"model: your --model-path {spec.model_path} (the pasted command says {path})")
        return spec
    if (Path(path).expanduser() / "config.json").is_file():
        notes.append(f"using the local model config at {path}")
        return TargetSpec(**{**spec.__dict__, "model_path": path})
    named = profile_named_by(path, profiles.model_names())
    if named is not None:
        if spec.model_chosen and spec.model != named:
            raise ProfileError(f"the pasted command runs {path} (profile '{named}') but --model says '{spec.model}': "
                               "drop one of them")
        notes.append(f"model path {path} is not on this machine: using the '{named}' profile (its published config.json)")
        return TargetSpec(**{**spec.__dict__, "model": named})
    if is_hub_id(path):
        directory = fetch_config(path, environments.home() / "hub" / "models")
        notes.append(f"model {path}: its config.json from the Hugging Face hub (cached in {directory})")
        return TargetSpec(**{**spec.__dict__, "model_path": str(directory)})
    if spec.model_chosen:
        notes.append(f"model path {path} is not on this machine: using the '{spec.model}' profile you chose")
        return spec
    raise ProfileError(f"model path {path} is not on this machine and names no shipped profile: pass --model NAME "
                       f"({', '.join(profiles.model_names())}) or --model-path DIR holding its config.json")


def _pasted_draft(path: str, config: Config, spec: TargetSpec, notes: list[str]) -> TargetSpec:
    from bisect_spec.runtime.model_sources import fetch_config, is_hub_id

    if spec.draft_path is not None:
        notes.append(f"draft: your --draft-path {spec.draft_path} (the pasted command says {path})")
        return spec
    if (Path(path).expanduser() / "config.json").is_file():
        notes.append(f"using the local draft config at {path}")
        return TargetSpec(**{**spec.__dict__, "draft_path": path})
    published = profiles.published_draft_ids().get(path.lower().strip("/"))
    if published is not None and (published[1] != spec.model or spec.model_path is not None):
        published = None  # published for another model: its own config.json (from the hub), never one reshaped
    if published is not None:  # a published draft a shipped recipe stands for, with its own model: no hub needed
        recipe, for_model = published
        if spec.draft_chosen and spec.draft != recipe:
            raise ProfileError(f"the pasted command runs the draft {path} (profile '{recipe}') but --draft says "
                               f"'{spec.draft}': drop one of them")
        notes.append(f"draft {path} is the published {recipe} draft for {for_model}: using the '{recipe}' draft "
                     "profile (its config shaped for the model)")
        return TargetSpec(**{**spec.__dict__, "draft": recipe})
    if path == DRAFT and spec.draft is not None:  # the placeholder for the draft: the one chosen
        return spec
    if spec.draft_chosen and spec.draft is not None:  # --draft beside the pasted id: that profile stands for it
        notes.append(f"draft {path}: evaluated with the '{spec.draft}' draft profile you chose (--draft); "
                     "its own config.json not read")
        return spec
    if is_hub_id(path):
        directory = fetch_config(path, environments.home() / "hub" / "drafts", what="draft")
        notes.append(f"draft {path}: its config.json from the Hugging Face hub (cached in {directory})")
        return TargetSpec(**{**spec.__dict__, "draft_path": str(directory)})
    algorithm = (config.get("--speculative-algorithm") or ("",))[0].upper()
    by_algorithm = {"EAGLE3": "eagle3", "EAGLE": "eagle", "STANDALONE": "standalone", "NEXTN": "nextn", "MTP": "nextn"}
    draft = spec.draft
    if not spec.draft_chosen and algorithm in by_algorithm:
        draft = by_algorithm[algorithm]
    notes.append(f"draft path {path} is not on this machine: using the '{draft}' draft profile "
                 "(a draft derived from the model's config)")
    return TargetSpec(**{**spec.__dict__, "draft": draft})

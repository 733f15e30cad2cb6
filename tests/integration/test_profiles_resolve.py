"""Every shipped model profile resolves on the newest release, on a box big enough for it.

One plain configuration per profile (``--tp-size N`` on a simulated H200 box of N GPUs) runs
launch_server's path up to weight loading on SGLang 0.5.23. Starting the session already
checks that the release has a model class for the profile's architecture (it raises
``ArchitectureUnknown`` otherwise). Each profile gets its own worker, closed after its test,
so the dozen workers are never alive at once.

Every published draft profile (a draft tied to one model profile) is run the same way with
``--speculative-algorithm EAGLE3`` on its target's box: it must reach weight loading with the
draft's config resolved too (stage ``draft_model_config`` passed).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.runtime.profiles import model_names, published_drafts
from bisect_spec.runtime.session import Session
from tests.conftest import require_release

pytestmark = pytest.mark.sglang

RELEASE = "0.5.23"

#: tensor-parallel size (= GPUs on the simulated H200 box, 141 GB each) a deployment of each profile uses
TP = {
    "llama-3.1-8b": 1,
    "qwen3-8b": 1,
    "qwen3-32b": 2,
    "gpt-oss-20b": 1,
    "gpt-oss-120b": 1,
    "llama-3.3-70b": 4,
    "qwen3-235b-a22b": 8,
    "deepseek-v3": 8,
    "deepseek-v3.2": 8,
    "kimi-k2": 8,
    "kimi-k2.5": 8,
    "kimi-k2.6": 8,
}

#: profiles whose checkpoint is MXFP4. SGLang registers ``mxfp4`` in its quantization table at
#: import time, only when ``is_cuda()`` (or a CPU/ROCm/XPU engine) holds then; workers import SGLang
#: with the GPU hidden, so the simulated box never has it (a module-level constant the simulation
#: cannot reach: see ``inside/simulated_gpu.py``). On a real CUDA install the key is present.
MXFP4 = ("gpt-oss-20b", "gpt-oss-120b")


@contextmanager
def _session(model: str, draft: str | None = None) -> Iterator[Session]:
    require_release(RELEASE)
    gpus = TP[model]
    target = TargetSpec(release=RELEASE, model=model, draft=draft, hardware="h200", gpus=gpus).resolve()
    with Session(target, jobs=1, timeout=120) as session:  # start() refuses an unknown architecture
        yield session


def test_every_shipped_profile_has_a_box_size() -> None:
    assert sorted(TP) == model_names()


@pytest.mark.parametrize("model", [name for name in model_names() if name not in MXFP4])
def test_a_plain_configuration_passes_up_to_the_attention_backend(model: str) -> None:
    tp = TP[model]
    with _session(model) as session:
        outcome = session.evaluate(Config.of({"--tp-size": str(tp)}))
    assert outcome.status is Status.PASSED, f"{model} --tp-size {tp}: {outcome.headline}"
    assert "attention_backend" in [*outcome.record["stages_passed"], outcome.record["stage"]]  # 0.5.23: then the pool
    assert outcome.record["attention_backends"], outcome.record
    assert outcome.hardware == f"simulated:h200x{tp}"


@pytest.mark.parametrize("model", MXFP4)
def test_gpt_oss_stops_only_at_the_import_time_mxfp4_registry(model: str) -> None:
    # If this starts passing (the simulation or SGLang changed), move the model to the test above.
    with _session(model) as session:
        outcome = session.evaluate(Config.of({"--tp-size": str(TP[model])}))
    assert outcome.status is Status.FAILED
    assert outcome.record["stage"] == "resolve"
    assert outcome.exception["type"] == "ValueError"
    assert outcome.exception["message"].startswith("Unknown quantization method: mxfp4.")


#: published drafts whose ``max_position_embeddings`` is below their target's context length. SGLang
#: derives the draft's context length from it and refuses a longer target context unless
#: ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`` (``ModelConfig._derive_context_length``): a real
#: launch of this pair with no other flags fails the same way.
SHORT_CONTEXT = {"specforge-eagle3-llama-3.3-70b": (4096, 131072)}


def _eagle3(tp: int, extra: dict[str, str] | None = None) -> Config:
    return Config.of({"--tp-size": str(tp), "--speculative-algorithm": "EAGLE3", **(extra or {})})


@pytest.mark.parametrize("draft", sorted(published_drafts()))
def test_a_published_draft_passes_up_to_its_draft_worker_with_its_target(draft: str) -> None:
    model = published_drafts()[draft]
    tp = TP[model]
    extra = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"} if draft in SHORT_CONTEXT else None
    with _session(model, draft) as session:
        outcome = session.evaluate(session.with_draft(_eagle3(tp, extra)))
    assert outcome.status is Status.PASSED, f"{model} + {draft} --tp-size {tp}: {outcome.headline}"
    # 0.5.14+ size the pools after the draft: the last stage is the pool's
    assert "draft_model" in [*outcome.record["stages_passed"], outcome.record["stage"]]
    assert "draft_worker_model_config" in outcome.record["stages_passed"]
    assert outcome.record["model_classes"]["draft"] == "LlamaForCausalLMEagle3"
    assert "draft_model_config" in outcome.record["stages_passed"]


@pytest.mark.parametrize("draft", sorted(SHORT_CONTEXT))
def test_a_draft_with_a_shorter_context_is_refused_without_the_override(draft: str) -> None:
    # If this starts passing (SGLang caps the draft's context itself), drop the draft from SHORT_CONTEXT.
    model = published_drafts()[draft]
    derived, target_context = SHORT_CONTEXT[draft]
    with _session(model, draft) as session:
        outcome = session.evaluate(session.with_draft(_eagle3(TP[model])))
    assert outcome.status is Status.FAILED
    assert outcome.exception["type"] == "ValueError"
    assert (f"Target model's context_length ({target_context}) is greater than the derived context_length "
            f"({derived})") in outcome.exception["message"]

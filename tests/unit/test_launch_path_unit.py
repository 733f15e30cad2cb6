"""The launch-path emulation's own machinery (no SGLang here: its stages are tested on real releases in
``tests/integration/test_after_weights.py`` and ``test_launch_path.py``)."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from bisect_spec.inside import launch_path
from bisect_spec.model import outcome
from bisect_spec.report import text


def test_the_report_layer_orders_stages_as_the_launch_path_runs_them() -> None:
    assert outcome.STAGE_ORDER == launch_path.STAGES
    assert outcome.AFTER_WEIGHTS == launch_path.AFTER_WEIGHTS
    assert set(launch_path.STAGE_WORDS) == set(launch_path.STAGES)


def test_stages_line_orders_by_launch_and_marks_stages_after_the_weights() -> None:
    line = text.stages_line({"passed": {"draft_worker_model_config": 3, "attention_backend": 2},
                             "failed": {"resolve": 5, "attention_backend": 1, "unknown_stage": 1}})
    assert line.startswith("stages reached: passed up to 2 attention_backend (+w), 3 draft_worker_model_config (+w);")
    assert "failed in 5 resolve, 1 attention_backend (+w), 1 unknown_stage" in line


def test_backend_modules_are_stood_in_only_while_the_choice_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    package = "sglang.srt.layers.attention"
    real = types.ModuleType(f"{package}.triton_backend")
    monkeypatch.setitem(sys.modules, f"{package}.triton_backend", real)
    assert launch_path._is_backend_module(f"{package}.flashinfer_backend")
    assert not launch_path._is_backend_module(f"{package}.base_attn_backend")
    assert not launch_path._is_backend_module(f"{package}.nsa.nsa_backend")
    with launch_path._backends_stood_in() as chosen:
        stand_in = sys.modules[f"{package}.triton_backend"]
        assert stand_in is not real
        backend = stand_in.TritonAttnBackend(object())
        backend.init_forward_metadata(None)  # anything asked of a stood-in backend is inert
    assert chosen == ["TritonAttnBackend"]
    assert sys.modules[f"{package}.triton_backend"] is real


def test_a_device_call_torch_refuses_is_named_not_taken_for_sglangs_verdict(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a stand-in for torch's CPU build: its streams module refuses, as torch.cuda.Stream() does there
    torch = types.ModuleType("torch")
    torch.__file__ = str(tmp_path / "torch" / "__init__.py")
    monkeypatch.setitem(sys.modules, "torch", torch)
    refuse = compile("raise RuntimeError('torch.cuda.Stream requires CUDA support')",
                     str(tmp_path / "torch" / "cuda" / "streams.py"), "exec")
    try:
        exec(refuse)
    except RuntimeError as exc:
        where = launch_path._device_step(exc)
    assert where is not None and where.endswith("needs a GPU") and "test_launch_path_unit.py" in where
    assert launch_path._device_step(AssertionError("Currently HybridAttentionBackend does not support ...")) is None


REFUSING_MODELS = {
    "refusing_eagle_head.py": '''
from refusing_base_head import Base


class Head(Base):
    def __init__(self, config):
        if config.layers != 1:
            raise ValueError("only 1 layer")
        if config.chained:
            try:
                import not_a_module  # noqa: F401
            except ImportError:
                raise NotImplementedError("needs a GPU kernel")
        super().__init__(config)
''',
    "refusing_base_head.py": '''
class Base:
    def __init__(self, config):
        assert config.width > 0, "width must be positive"
        if config.registry:
            from refusing_registry import refuse
            refuse()
''',
    "refusing_registry.py": '''
def refuse():
    raise ValueError("not registered")
''',
}


def test_a_refusal_counts_only_from_the_draft_class_own_modules_and_unchained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for name, source in REFUSING_MODELS.items():
        (models / name).write_text(source)
    monkeypatch.syspath_prepend(str(models))
    head = importlib.import_module("refusing_eagle_head").Head

    def refused(**config: object) -> bool:
        values = {"layers": 1, "chained": False, "width": 1, "registry": False, **config}
        try:
            head(types.SimpleNamespace(**values))
        except Exception as exc:
            return launch_path._refused_by_the_model(exc, head)
        raise AssertionError("built")

    assert refused(layers=2) is True  # the class's own `raise`
    assert refused(width=0) is True  # its base's `assert`
    assert refused(chained=True) is False  # raised while handling another failure (a CPU-only import)
    assert refused(registry=True) is False  # another module of sglang/srt/models raised it

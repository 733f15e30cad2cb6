"""The launch-path emulation's own machinery (no SGLang here: its stages are tested on real releases in
``tests/integration/test_after_weights.py`` and ``test_launch_path.py``)."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from bisect_spec.inside import launch
from bisect_spec.inside.launch import attention, device_stops, faults
from bisect_spec.model import outcome
from bisect_spec.model.flags import Config
from bisect_spec.report import summary, text


def test_the_report_layer_orders_stages_as_the_launch_path_runs_them() -> None:
    """Both sides read the one list (``bisect_spec/data/stages.json``): the orchestrator as data, the worker side
    for its stage records."""
    assert outcome.STAGE_ORDER == launch.STAGES == tuple(stage.name for stage in launch.ALL_STAGES)
    assert outcome.AFTER_WEIGHTS == launch.AFTER_WEIGHTS == {s.name for s in launch.ALL_STAGES if s.after_weights}
    assert set(launch.STAGE_WORDS) == set(launch.STAGES)
    assert launch.STAGES[0] == "parse" and "memory_pool" in launch.AFTER_WEIGHTS and "resolve" not in launch.AFTER_WEIGHTS


def test_a_stage_the_stage_list_does_not_name_is_refused_when_declared() -> None:
    with pytest.raises(ValueError, match=r"not listed in bisect_spec/data/stages\.json"):
        launch.Stage("a_stage_of_no_list", "nothing", "nothing")


def test_stages_line_orders_by_launch_and_marks_stages_after_the_weights() -> None:
    line = text.stages_line({"passed": {"draft_worker_model_config": 3, "attention_backend": 2},
                             "failed": {"resolve": 5, "attention_backend": 1, "unknown_stage": 1}})
    assert line.startswith("stages reached: passed up to 2 attention_backend (+w), 3 draft_worker_model_config (+w);")
    assert "failed in 5 resolve, 1 attention_backend (+w), 1 unknown_stage" in line
    assert "stopped early" not in line
    stopped = text.stages_line({"passed": {"draft_model": 2}, "stopped": {"memory_pool": 7}, "failed": {}})
    assert stopped == ("stages reached: passed up to 2 draft_model (+w); passed, then stopped early (a step only a GPU "
                       "runs) in 7 memory_pool (+w); failed in none ((+w): after the weights load)")
    only_stopped = text.stages_line({"passed": {}, "stopped": {"memory_pool": 778}, "failed": {"resolve": 1}})
    assert only_stopped.startswith("stages reached: passed, then stopped early (a step only a GPU runs) in 778 memory_pool")


def test_a_pass_whose_last_stage_stopped_early_says_the_stage_before_it_ran_to_its_end() -> None:
    progress = launch.Progress()
    for stage in ("parse", "resolve", "draft_model", "memory_pool"):
        progress.enter(stage)
    progress.needs_gpu["memory_pool"] = "building X on meta: its module does not import here"
    record = progress.to_record(passed=True)
    assert record["stage"] == "memory_pool"
    assert record["reached"] == (f"{launch.STAGE_WORDS['draft_model']} (then memory_pool, stopped early)")
    assert progress.to_record()["reached"] == launch.STAGE_WORDS["memory_pool"]  # a failure: where it raised
    progress.needs_gpu.clear()
    assert progress.to_record(passed=True)["reached"] == launch.STAGE_WORDS["memory_pool"]


def test_backend_modules_are_stood_in_only_while_the_choice_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    package = "sglang.srt.layers.attention"
    real = types.ModuleType(f"{package}.triton_backend")
    monkeypatch.setitem(sys.modules, f"{package}.triton_backend", real)
    assert attention._is_backend_module(f"{package}.flashinfer_backend")
    assert not attention._is_backend_module(f"{package}.base_attn_backend")
    assert not attention._is_backend_module(f"{package}.nsa.nsa_backend")
    with attention._backends_stood_in() as chosen:
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
        where = device_stops._device_step(exc)
    assert where is not None and where.endswith("needs a GPU") and "test_launch_path_unit.py" in where
    assert device_stops._device_step(AssertionError("Currently HybridAttentionBackend does not support ...")) is None


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
            return faults._refused_by_the_model(exc, head)
        raise AssertionError("built")

    assert refused(layers=2) is True  # the class's own `raise`
    assert refused(width=0) is True  # its base's `assert`
    assert refused(chained=True) is False  # raised while handling another failure (a CPU-only import)
    assert refused(registry=True) is False  # another module of sglang/srt/models raised it


def test_a_sweep_summary_counts_passes_stopped_early_apart_from_passes() -> None:
    def passed_at(stage: str, needs_gpu: dict[str, str] | None = None) -> outcome.Outcome:
        record: dict[str, object] = {"status": "passed", "stage": stage, "stages_passed": ["parse"]}
        if needs_gpu:
            record["needs_gpu"] = needs_gpu
        return outcome.Outcome.from_record(Config.from_argv([]), record, release="0.5.15", python="3.11", hardware="b200")

    outcomes = [passed_at("memory_pool", {"memory_pool": "building it on meta: its module does not import here"}),
                passed_at("draft_model", {"memory_pool": "an earlier stage stopped early: not the last"}),
                passed_at("draft_model")]
    stages = summary.summarise(outcomes, None, {}, "random", 0)["stages"]
    assert stages == {"passed": {"draft_model": 2}, "stopped": {"memory_pool": 1}, "failed": {}}


def test_the_modules_with_a_cuda_flag_are_looked_for_again_once_an_import_or_a_drop_changed_sys_modules(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The build flips ``_is_cuda`` of SGLang's modules imported on the CPU; the list of modules holding the flag is
    kept between builds, and must not miss one imported since, nor keep one dropped since."""
    from bisect_spec.inside.launch import model_build

    monkeypatch.setattr(model_build, "_CUDA_FLAGS", ((-1, None), []))
    first = types.ModuleType("sglang.bisect_spec_test_first")
    first._is_cuda = False  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, first.__name__, first)
    assert first in model_build._modules_with_a_cuda_flag()
    second = types.ModuleType("sglang.bisect_spec_test_second")
    second._is_cuda = False  # type: ignore[attr-defined]
    monkeypatch.delitem(sys.modules, first.__name__)
    monkeypatch.setitem(sys.modules, second.__name__, second)  # as many modules as before: one dropped, one new
    found = model_build._modules_with_a_cuda_flag()
    assert second in found and first not in found
    replaced = types.ModuleType(second.__name__)  # the same name, imported afresh (no flag now)
    monkeypatch.setitem(sys.modules, second.__name__, replaced)
    assert second not in model_build._modules_with_a_cuda_flag()

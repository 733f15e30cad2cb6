"""The fidelity oracle on real SGLang 0.5.23: ``launch_server`` forked from a zygote, stopped at the first GPU step.

These are SGLang's own launch-time behaviours (issue 11's examples, llama-3.1-8b on a
simulated 8x H100), read through ``scripts/bench_fidelity.py``'s zygote client:

* ``--pp-size 2`` with EAGLE3 resolves, then ``check_server_args`` stops it with the
  pipeline-parallel AssertionError, in the launcher, before any subprocess starts;
* STANDALONE with LoRA flags fails with the LoRA ValueError; EAGLE with the same flags
  goes on to device work;
* a passing configuration reaches ``set_device`` in every scheduler (one per TP rank),
  the detokenizer waits for work and the launcher waits for the schedulers.
"""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.inside import launch_oracle
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import Target
from tests.conftest import require_release

ROOT = Path(__file__).resolve().parents[2]
LORA = ["--enable-lora", "--lora-backend", "triton", "--max-lora-rank", "8", "--lora-target-modules", "all"]


def load_bench() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fidelity", ROOT / "scripts" / "bench_fidelity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Target, Path]]:
    require_release("0.5.23")
    bench = load_bench()
    target = TargetSpec(release="0.5.23", model="llama-3.1-8b", draft="eagle3", hardware="h100", gpus=8).resolve()
    home = tmp_path_factory.mktemp("oracle")
    zygote = bench.Zygote(target, log_path=home / "zygote.log")
    zygote.start()
    model = home / "models" / target.model.name
    zygote.request({"op": "tokenizer", "dir": str(model), "config": target.model.config}, 120)
    yield zygote, target, model
    zygote.close()


def launch(oracle: tuple[Any, Target, Path], flags: list[str], tmp_path: Path) -> dict[str, Any]:
    zygote, target, model = oracle
    config = Config.from_argv(flags)
    draft = str(target.draft.path) if target.draft and target.draft.path else ""
    argv = ["--model-path", str(model), *target.model.extra_args,
            *[draft if token == "@draft" else token for token in config.argv()]]
    ended = zygote.request({"op": "launch", "argv": argv, "dir": str(tmp_path), "deadline": 120}, 200)
    return launch_oracle.verdict(launch_oracle.read_logs(tmp_path), ended=ended["ended"],
                                 returncode=ended.get("returncode"))


def test_a_passing_configuration_reaches_device_work_in_every_process(oracle: tuple[Any, Target, Path],
                                                                      tmp_path: Path) -> None:
    result = launch(oracle, ["--tp-size", "2", "--speculative-algorithm", "EAGLE3",
                             "--speculative-draft-model-path", "@draft"], tmp_path)
    assert (result["verdict"], result["stop"]) == ("reached", "set_device")
    # 0.5.23's configure_logger imports flashinfer's logger when the box has flashinfer: served, not refused
    assert '"module": "flashinfer.jit.core"' in (tmp_path / "main.log").read_text()
    roles = sorted((p["role"], tuple(p["reached"])) for p in result["processes"].values())
    assert roles == [("main", ("wait-children",)), ("run_detokenizer_process", ("wait-ipc",)),
                     ("run_scheduler_process", ("set_device",)), ("run_scheduler_process", ("set_device",))]


def test_pipeline_parallel_with_eagle3_stops_in_check_server_args(oracle: tuple[Any, Target, Path],
                                                                  tmp_path: Path) -> None:
    result = launch(oracle, ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "@draft",
                             "--pp-size", "2"], tmp_path)
    assert (result["verdict"], result["process"]) == ("failed", "main")
    assert result["exception"]["type"] == "AssertionError"
    assert result["frame"]["file"] == "srt/arg_groups/validation_hook.py"
    assert result["frame"]["statement"].startswith("assert cfg.speculative_algorithm.upper() == 'EAGLE'")
    assert [p["role"] for p in result["processes"].values()] == ["main"]  # nothing was started


def test_lora_fails_standalone_and_lets_eagle_through(oracle: tuple[Any, Target, Path], tmp_path: Path) -> None:
    standalone = launch(oracle, ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "@draft",
                                 *LORA], tmp_path / "standalone")
    assert (standalone["verdict"], standalone["exception"]["type"]) == ("failed", "ValueError")
    assert "lora" in standalone["frame"]["file"] + standalone["frame"]["function"]
    eagle = launch(oracle, ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "@draft", *LORA],
                   tmp_path / "eagle")
    assert eagle["verdict"] == "reached"


def test_the_launch_copy_holds_a_tokenizer_that_loads_offline(oracle: tuple[Any, Target, Path]) -> None:
    _zygote, _target, model = oracle
    assert (model / "config.json").is_file() and (model / "tokenizer.json").is_file()
    assert environments.get("0.5.23").python  # the tokenizer was built by the release's own tokenizers library
    assert not (model / "preprocessor_config.json").exists()  # llama is text-only: no stand-in processor


def test_0_5_12_imports_its_launch_path_on_the_cpu_and_kimi_gets_a_stand_in_processor(tmp_path: Path) -> None:
    """0.5.12's launch path does not import under the simulation (fake kernels for ``sgl_kernel`` ops): the zygote
    imports it on the CPU (``sgl_kernel`` a stub); kimi-k2.6 (multimodal) then reaches the model runner."""
    require_release("0.5.12")
    bench = load_bench()
    target = TargetSpec(release="0.5.12", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000", gpus=8).resolve()
    zygote = bench.Zygote(target, log_path=tmp_path / "zygote.log")
    try:
        info = zygote.start()
        # imported on the CPU, or under the simulation once the evaluator's own import stubbed sgl_kernel (its
        # launcher modules are imported first, inside/evaluator.LAZY_MODULES): either way it imports
        assert info["launch_path_imported"] in ({"sglang.srt.entrypoints.http_server": "cpu"},
                                                {"sglang.srt.entrypoints.http_server": "simulated"})
        model = tmp_path / "models" / target.model.name
        files = zygote.request({"op": "tokenizer", "dir": str(model), "config": target.model.config}, 120)["files"]
        assert "processing_bisect_spec.py" in files and "preprocessor_config.json" in files
        result = launch((zygote, target, model), ["--tp-size", "2", "--speculative-algorithm", "EAGLE3",
                                                  "--speculative-draft-model-path", "@draft"], tmp_path / "launch")
    finally:
        zygote.close()
    assert (result["verdict"], result["stop"]) == ("reached", "init_torch_distributed")

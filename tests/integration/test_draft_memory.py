"""The draft's weights and KV pool beside the target's, on installed releases of two launch-path families. Oracle
not written here: sglang#6875 (Llama-70B with the base model as its own EAGLE draft on 8× H100 runs out of memory
at start-up from ``--mem-fraction-static`` 0.5: the target's sizing never counts the draft), and SGLang's own
sizing from 0.5.14 on, which charges the draft's weights (sglang#23862)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import bisect_spec
from tests.cli.helpers import run
from tests.conftest import require_release

#: The reporter's shape: EAGLE, a chain of 3 (at tensor parallel 8 unless a test gives another width).
EAGLE = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4"]


@pytest.fixture(scope="module")
def base_model_as_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A draft directory holding Llama-3.3-70B's own config.json (the shipped profile's)."""
    folder = tmp_path_factory.mktemp("llama-70b-as-draft")
    shutil.copy(Path(bisect_spec.__file__).parent / "data" / "models" / "llama-3.3-70b" / "config.json", folder)
    return folder


def _probe(release: str, draft: Path, fraction: str | None, *flags: str) -> tuple[int, str]:
    require_release(release)
    return run("probe", "--sglang", release, "--model", "llama-3.3-70b", "--draft-path", str(draft), "--hardware",
               "h100", "--gpus", "8", "--", *EAGLE, *(flags or ("--tp", "8")),
               *(("--mem-fraction-static", fraction) if fraction else ()))


def test_the_base_model_as_its_own_draft_will_not_start_up_to_0_5_13_and_a_smaller_fraction_is_offered(
        base_model_as_draft: Path) -> None:
    code, output = _probe("0.5.12", base_model_as_draft, "0.6")
    assert code == 3, output
    verdict = next(line for line in output.splitlines() if line.startswith("verdict:"))
    assert "WILL NOT START  out of memory: the target's and the draft's weights and pools need ≥ 95." in verdict, output
    assert "79.65 GiB available" in verdict and "when the draft worker loads" in output
    assert "not an SGLang bug" in output
    step = next(line for line in output.splitlines() if line.startswith("next:"))
    assert "the largest --mem-fraction-static that starts (verified, a full pass): set --mem-fraction-static 0.45" \
        in step, output
    # the offered fraction is a pass that left room beside the draft, and says so
    code, output = _probe("0.5.12", base_model_as_draft, "0.45")
    assert code == 0 and "verdict:  PASSED  every check a CPU can run, ran" in output, output
    assert "the draft's weights 16.00 GiB and pool" in output and "beside it leave" in output


def test_from_0_5_14_sglangs_own_sizing_charges_the_draft_and_the_same_launch_starts(base_model_as_draft: Path) -> None:
    code, output = _probe("0.5.18", base_model_as_draft, "0.6")
    assert code == 0, output
    assert "(the draft's weights, 16.00 GiB, charged by SGLang's sizing)" in output, output
    # the pool SGLang sized holds the target's and the draft's layers in what is left after both models' weights
    pool = next(line for line in output.splitlines() if "memory pool SGLang sized" in line)
    tokens = int(pool.split("KV cache ")[1].split(" tokens")[0])
    assert 150_000 < tokens < 250_000, pool


def test_from_0_5_14_the_two_models_weights_over_a_gpu_will_not_start_and_a_wider_layout_is_offered(
        base_model_as_draft: Path) -> None:
    # the draft loads before the pools are sized: at tp 2 each GPU holds half of both 70B models
    code, output = _probe("0.5.18", base_model_as_draft, None, "--tp", "2")
    assert code == 3, output
    verdict = next(line for line in output.splitlines() if line.startswith("verdict:"))
    assert "WILL NOT START  out of memory: the target's and the draft's weights need ≥ 129." in verdict, output
    assert "while the draft worker loads the draft, before SGLang sizes the pools" in output
    step = next(line for line in output.splitlines() if line.startswith("next:"))
    assert "the nearest layout that starts on this box (verified, a full pass): set --tp-size 4" in step, output

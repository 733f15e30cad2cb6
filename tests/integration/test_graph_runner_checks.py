"""The decode graphs' runner after its batch sizes (stage ``cuda_graph_sizes``, 0.5.18+), and a local draft edited
between two evaluations of one warm worker.

From 0.5.18 ``DecodeCudaGraphRunner.__init__`` checks, after ``get_batch_sizes_to_capture`` and before its first
device step (the attention backend's graph buffers), that compact ragged verify (DSPARK with
``SGLANG_RAGGED_VERIFY_MODE=compact``) is not combined with two-batch overlap, LoRA or
``--disable-cuda-graph-padding``. The stage used to stop at the sizes; SGLang's own statements now run up to that
device step, and the refusal is SGLang's verdict in its words.

The DSPARK draft is a local directory written here: Qwen3-8B's shipped config with SGLang's DSPARK draft class and
the fields SGLang's own parser asks for (each missing one is refused by ``parse_dspark_draft_config`` in its words).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from tests.conftest import shared_session

pytestmark = pytest.mark.sglang

SHIPPED_QWEN3_8B = Path(__file__).parents[2] / "bisect_spec" / "data" / "models" / "qwen3-8b" / "config.json"
MESSAGE = ("Compact ragged verify does not support two-batch-overlap, LoRA, or disable-cuda-graph-padding (bs pads "
           "to the captured tier); disable SGLANG_RAGGED_VERIFY_MODE or the conflicting feature.")


def dspark_draft(directory: Path, head: str = "vanilla") -> Path:
    config = json.loads(SHIPPED_QWEN3_8B.read_text())
    dspark = {"block_size": 8, "markov_rank": 64, "markov_head_type": head}  # 0.5.18 reads them at the top
    config.update({"architectures": ["DSparkDraftModel"], "num_hidden_layers": 1, **dspark,
                   "dflash_config": {"target_layer_ids": [1, 17, 33], "mask_token_id": 151669, **dspark}})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def dspark(draft: Path, *extra: str) -> Config:
    return Config.from_argv(["SGLANG_RAGGED_VERIFY_MODE=compact", "--speculative-algorithm", "DSPARK",
                             "--speculative-draft-model-path", str(draft), *extra])


@pytest.mark.parametrize("release", ["0.5.18", "0.5.23"])
def test_compact_ragged_verify_with_unpadded_graphs_is_refused_by_the_graph_runner(release: str,
                                                                                     tmp_path: Path) -> None:
    session = shared_session(release, model="qwen3-8b", draft=None, hardware="h100", gpus=1)
    draft = dspark_draft(tmp_path / "dspark")
    refused = session.evaluate(dspark(draft, "--disable-cuda-graph-padding"))
    assert refused.status is Status.FAILED, refused.headline
    assert refused.record["stage"] == "cuda_graph_sizes", refused.headline
    assert refused.record["exception"] == {**refused.record["exception"], "type": "ValueError", "message": MESSAGE}
    assert refused.record["frame"]["file"] == "srt/model_executor/runner/decode_cuda_graph_runner.py"
    # the same command with padded graphs gets past that check: the refusal is the flag's
    padded = session.evaluate(dspark(draft))
    assert padded.record.get("exception", {}).get("message") != MESSAGE, padded.headline
    assert padded.status is not Status.FAILED or padded.record["stage"] != "cuda_graph_sizes", padded.headline


def test_a_local_draft_edited_between_two_evaluations_is_read_again(tmp_path: Path) -> None:
    """SGLang reads a model's or draft's ``config.json`` once per path in a process (``get_config`` is memoised by
    its arguments); a warm worker lives across commands, so an edited file must be read again: the warm worker's
    verdicts follow the file as a fresh one's do."""
    session = shared_session("0.5.23", model="qwen3-8b", draft=None, hardware="h100", gpus=1)
    draft = dspark_draft(tmp_path / "edited", head="nonsense")
    first = session.evaluate(dspark(draft))
    assert first.status is Status.FAILED and "markov_head_type='nonsense'" in first.record["exception"]["message"]
    dspark_draft(draft, head="vanilla")
    second = session.evaluate(dspark(draft, "--disable-cuda-graph-padding"))
    assert second.record["exception"]["message"] == MESSAGE, second.headline
    dspark_draft(draft, head="nonsense")
    third = session.evaluate(dspark(draft))
    assert third.record["exception"]["message"] == first.record["exception"]["message"], third.headline

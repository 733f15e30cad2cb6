"""The draft worker's own checks after its draft runner, on real SGLang releases: the statements each constructor on the
way to the draft's ``ModelRunner`` runs once it returns, which the ``draft_worker`` stage used to cut off at the draft
runner's device step (``scripts/stage_cuts.py`` lists them; ``inside/launch/draft_levels.py`` finds them).

0.5.18+'s ``StandaloneWorkerV2.__init__`` checks, after it builds its draft worker, that the draft shares the target's
vocabulary (``_validate_vocab_compatibility``): a STANDALONE draft of another family (Qwen3-8B's 151936 tokens, a
Llama-3.1-8B draft's 128256) is refused there, in SGLang's words. 0.5.12's workers have no such check: the same flags
get past the stage. The documented STANDALONE draft (``drafts/standalone.json``: the target's vocabulary) passes
everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import bisect_spec
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from tests.conftest import require_release, shared_session

pytestmark = pytest.mark.sglang

#: A draft model of another family than the target's: the Llama-3.1-8B profile's directory.
LLAMA_DRAFT = str(Path(bisect_spec.__file__).parent / "data" / "models" / "llama-3.1-8b")
STANDALONE = {"--speculative-algorithm": "STANDALONE"}


@pytest.mark.parametrize("release, line", [("0.5.18", 206), ("0.5.23", 194)])
def test_a_standalone_draft_of_another_vocabulary_is_refused_by_the_worker(release: str, line: int) -> None:
    session = shared_session(release, model="qwen3-8b", draft="standalone", hardware="h100")
    outcome = session.evaluate(Config.of({**STANDALONE, "--speculative-draft-model-path": LLAMA_DRAFT}))
    assert outcome.status is Status.FAILED, outcome.headline
    assert outcome.record["stage"] == "draft_worker"
    assert outcome.exception["type"] == "ValueError"
    assert outcome.exception["message"].startswith(
        "STANDALONE speculative decoding requires the draft model to share the same vocabulary as the target model, "
        "but got target vocab_size=151936 and draft vocab_size=128256.")
    frame = outcome.record["frame"]
    assert (frame["file"], frame["line"], frame["function"]) == (
        "srt/speculative/standalone_worker_v2.py", line, "_validate_vocab_compatibility")


def test_the_same_draft_gets_past_the_worker_on_0_5_12() -> None:
    session = shared_session("0.5.12", model="qwen3-8b", draft="standalone", hardware="h100")
    outcome = session.evaluate(Config.of({**STANDALONE, "--speculative-draft-model-path": LLAMA_DRAFT}))
    assert outcome.status is not Status.FAILED, outcome.headline
    assert "draft_worker" in [*outcome.record["stages_passed"], outcome.record["stage"]]
    assert "draft_worker" not in (outcome.record.get("needs_gpu") or {})


@pytest.mark.parametrize("release", ["0.5.12", "0.5.18", "0.5.23"])
def test_the_documented_standalone_draft_passes_the_workers_checks(release: str) -> None:
    session = shared_session(release, model="qwen3-8b", draft="standalone", hardware="h100")
    outcome = session.evaluate(session.with_draft(Config.of(STANDALONE)))
    assert outcome.status is Status.PASSED, outcome.headline
    assert outcome.record["draft_worker"].startswith("StandaloneWorker")
    assert "draft_worker" in [*outcome.record["stages_passed"], outcome.record["stage"]]
    assert "draft_worker" not in (outcome.record.get("needs_gpu") or {})


def test_the_next_step_for_the_refused_draft_is_a_full_pass_and_its_printed_command_passes() -> None:
    """A backend whose GPU code stops the stages before the draft worker (``minicpm_flashattn``) would "pass" without
    the vocabulary check ever running: no fix. The next step is a full pass, and the command printed for it, pasted,
    passes too (it names no draft where the fix removes the draft's path)."""
    import shlex

    from click.testing import CliRunner

    from bisect_spec.cli.commands import main

    require_release("0.5.23")
    probe = ["probe", "--sglang", "0.5.23", "--model", "qwen3-8b", "--hardware", "h100", "--gpus", "1", "--",
             "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", LLAMA_DRAFT]
    result = CliRunner().invoke(main, probe)
    lines = result.stdout.splitlines()
    nxt = next(i for i, line in enumerate(lines) if line.startswith("next:"))
    assert "minicpm" not in result.stdout and "(verified)" in " ".join(lines[nxt:nxt + 3]), result.stdout
    command = next(line.strip() for line in lines[nxt + 1:] if line.strip().startswith("bisect-spec probe "))
    again = CliRunner().invoke(main, shlex.split(command)[1:])
    assert again.exit_code == 0 and "verdict:  PASSED  every check a CPU can run, ran" in again.stdout, again.output

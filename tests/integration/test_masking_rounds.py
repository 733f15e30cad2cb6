"""Masking-aware rounds in a real sweep (SGLang 0.5.23, kimi-k2.6 + eagle3, simulated rtx-pro-6000 x8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisect_spec import api
from bisect_spec.runtime import store
from tests.conftest import require_release

pytestmark = pytest.mark.sglang

STRATEGY = """
include = ["--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk", "--page-size",
           "--attention-backend", "--dp-size"]
strength = 2
core = ["--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk"]
core_strength = 3
random_budget = 5
rounds = 2
peel = true
[values]
"--speculative-algorithm" = ["", "EAGLE3", "NGRAM"]
"--speculative-num-steps" = ["", "1", "0"]
"--speculative-eagle-topk" = ["", "1", "2"]
"--page-size" = ["", "16"]
"--dp-size" = ["", "2"]
"""


def test_rounds_cover_tuples_the_array_masked_and_never_repeat_a_known_failure(tmp_path: Path) -> None:
    require_release("0.5.23")
    strategy = tmp_path / "masking.toml"
    strategy.write_text(STRATEGY)
    spec = api.TargetSpec(release="0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    shown: list[str] = []
    result = api.sweep(spec, strategy=str(strategy), runs_dir=tmp_path / "runs", jobs=2, use_cache=False,
                       progress=lambda done, total, signatures, phase: shown.append(phase))
    masking = result.summary["masking"]
    first, *later = masking["rounds"]
    assert later and sum(r["newly_covered"] for r in later) > 0  # the rounds saw tuples the array had masked
    assert masking["covered_without_mask"] + masking["proven_to_fail"] + masking["still_masked"] == \
        masking["required_tuples"]
    assert masking["covered_without_mask"] > first["newly_covered"]
    # the seed failures were shrunk to their minimal reproducers and forbidden afterwards
    forbidden = {tuple(m) for ms in masking["forbidden"].values() for m in ms}
    assert ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1") in forbidden
    journal = store.read_journal(result.run_path)
    rounds = [e for e in journal if e["phase"] == "round"]
    assert 0 < len(rounds) <= sum(r["rows"] for r in later)  # a round row seen before is not evaluated again
    # no row of a round holds a reproducer learnt in the array's round with every flag its failure needs
    # absent left out (those rows are repaired: the flag is given)
    [seed] = [s["id"] for s in result.summary["signatures"]  # the seed TypeError, learnt in the array's round
              if s["exc_type"] == "TypeError" and s["statement"].startswith("if _.speculative_eagle_topk > 1 and ")]
    learnt = list(zip(masking["forbidden"][seed], masking["needs_absent"].get(seed, [[]] * 99), strict=False))[:1]
    assert learnt
    for entry in rounds:
        argv = entry["outcome"]["config"]
        held = set(zip(argv[::2], argv[1::2], strict=False))
        for minimal, absent in learnt:
            holds = set(zip(minimal[::2], minimal[1::2], strict=False)) <= held
            assert not holds or any(flag in argv for flag in absent[::2]), (minimal, absent, argv)
    absence = [e for e in journal if e["phase"] == "absence"]  # the trials that learn an absence
    assert not masking["needs_absent"] or absence
    assert "round" in shown and "absence" not in shown  # the progress bar shows them as one phase
    # peeling: the failing rows again without their reproducers, journaled and summarised
    peeled = [e for e in journal if e["phase"] == "peel"]
    peel = result.summary["peel"]
    assert peeled and len(peeled) <= peel["rows"] == sum(level["rows"] for level in peel["levels"])

    def pairs(argv: list[str]) -> frozenset[tuple[str, str]]:
        return frozenset(zip(argv[::2], argv[1::2], strict=False))

    failing = {pairs(e["outcome"]["config"]) for e in journal if e["outcome"]["status"] == "failed"}
    earlier = {pairs(e["outcome"]["config"]) for e in journal if e["phase"] != "peel"}
    for entry in peeled:  # each peeled row is a failing row less a flag, or with a missing flag given
        row = pairs(entry["outcome"]["config"])
        assert row not in earlier
        assert any(row < f or f < row for f in failing), entry["outcome"]["config"]

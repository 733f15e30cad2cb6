"""Branch rows in a real sweep (SGLang 0.5.23, kimi-k2.6 + eagle3, simulated rtx-pro-6000 x8).

``--enable-unified-memory`` with DFLASH refuses attention backends the unified pool has not audited
(``_assert_spec_verify_backends``): three flags at once. The release raises it; the branch rows are what
reach it in this space, the same sweep without them does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bisect_spec import api
from bisect_spec.runtime import store
from tests.conftest import require_release

pytestmark = pytest.mark.sglang

STRATEGY = """
include = ["--speculative-algorithm", "--speculative-draft-model-path", "--enable-unified-memory",
           "--attention-backend", "--page-size"]
strength = 2
core = ["--speculative-algorithm", "--speculative-draft-model-path"]
core_strength = 2
core_alone = true
random_budget = 0
branches = {branches}
[values]
"--speculative-algorithm" = ["", "EAGLE3", "DFLASH"]
"--attention-backend" = ["", "triton", "flashmla"]
"--page-size" = ["", "16"]
"""


def statements(result: api.SweepResult) -> set[str]:
    return {s["example_frame"]["function"] for s in result.summary["signatures"] if s.get("example_frame")}


@pytest.mark.parametrize("branches", [True, False])
def test_branch_rows_reach_the_unified_memory_check_under_dflash_that_covering_rows_mask(
        tmp_path: Path, branches: bool) -> None:
    require_release("0.5.23")
    strategy = tmp_path / "branches.toml"
    strategy.write_text(STRATEGY.format(branches=str(branches).lower()))
    spec = api.TargetSpec(release="0.5.23", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000")
    shown: list[str] = []
    result = api.sweep(spec, strategy=str(strategy), runs_dir=tmp_path / "runs", jobs=2, use_cache=False,
                       progress=lambda done, total, signatures, phase: shown.append(phase))
    journal = store.read_journal(result.run_path)
    rows = [e["outcome"] for e in journal if e["phase"] == "branch"]
    assert ("_assert_spec_verify_backends" in statements(result)) is branches
    if not branches:
        assert rows == []
        return
    assert "branch" not in shown and "cover" in shown  # one bar for the plan and its branch rows
    contexts = [o for o in rows if "--attention-backend" not in o["config"] and "--page-size" not in o["config"]]
    assert {" ".join(o["config"]) for o in contexts} >= {  # at the deployment shape: Kimi-K2.6 needs 8 GPUs
        "--enable-unified-memory --speculative-algorithm DFLASH --speculative-draft-model-path @draft --tp-size 8"}
    refused = [o for o in rows if (o.get("frame") or {}).get("function") == "_assert_spec_verify_backends"]
    assert refused and all(o["config"][o["config"].index("--attention-backend") + 1] == "flashmla" for o in refused)
    # a context that fails (EAGLE3 needs a hybrid target under unified memory) gets no rows of its own
    context = {e["outcome"]["status"] for e in journal if {"--enable-unified-memory", "EAGLE3"} <= set(e["outcome"]["config"])
               and "--attention-backend" not in e["outcome"]["config"] and "--page-size" not in e["outcome"]["config"]}
    assert context == {"failed"}
    assert not [o for o in rows if "EAGLE3" in o["config"] and "--attention-backend" in o["config"]]

"""The default space from each release's own code (issue 12, item 3), checked against the release.

The data flow (``bisect_spec.inside.data_flow``) reads the release's source; these tests let
the release itself judge the result: every algorithm the space sweeps is one the release
accepts (its parser's choices, ``SpeculativeAlgorithm.from_string``), a name outside the list
is one it refuses, and
the LoRA group makes ``--enable-lora`` valid where the flag alone fails.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.search.plan import load_strategy
from bisect_spec.search.space import PRESENT, FlagSpace
from tests.conftest import shared_session

pytestmark = pytest.mark.sglang


#: a model each release knows (0.4.6 predates kimi-k2.6's architecture)
MODEL = {"0.4.6": "deepseek-v3", "0.5.11": "kimi-k2.6", "0.5.12": "kimi-k2.6", "0.5.23": "kimi-k2.6"}
#: Flags and variables SGLang's own speculative unit tests set that the default space does not sweep, and why
#: (``tests/resources/sglang_unit_cases.json``, the cases that set ``--speculative-algorithm``).
NOT_SWEPT = {
    "--speculative-adaptive-config": "a JSON file that resolution reads: an empty placeholder would not parse",
    "--lora-paths": "the LoRA group gives a rank and target modules instead, the other valid way",
    "SGLANG_RAGGED_VERIFY_MODE": "free text, compared only after it is copied to a local variable",
    "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "its check reaches speculation only through a helper",
    "--linear-attn-decode-backend": "its check reaches speculation only through a helper",
    "--cuda-graph-max-bs-decode": "its check reaches speculation only through a helper",
    "--cuda-graph-backend-decode": "its check reaches speculation only through a helper",
}


def default_space(release: str) -> FlagSpace:
    return load_strategy("default").space(shared_session(release, model=MODEL[release]).flags())


def refused(release: str, algorithm: str) -> bool:
    """The release refuses the name: its parser's choices, or ``SpeculativeAlgorithm.from_string``."""
    session = shared_session(release, model=MODEL[release])
    outcome = session.evaluate(Config.of({"--speculative-algorithm": algorithm}))
    return (outcome.status == Status.USAGE and "--speculative-algorithm" in outcome.headline) \
        or outcome.frame.get("function") == "from_string" or "Unknown speculative algorithm" in outcome.headline


@pytest.mark.parametrize(("release", "expected", "outside"), [
    ("0.4.6", {"EAGLE", "EAGLE3", "NEXTN"}, "STANDALONE"),
    ("0.5.23", {"EAGLE3", "EAGLE", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "UNO", "DSPARK", "FROZEN_KV_MTP"},
     "MEDUSA"),
])
def test_the_space_sweeps_every_algorithm_the_release_accepts_and_no_other(release: str, expected: set[str],
                                                                           outside: str) -> None:
    spec = default_space(release).spec("--speculative-algorithm")
    assert spec is not None
    swept = {value[0] for value in spec.values if value}
    assert expected <= swept
    assert [name for name in sorted(swept) if refused(release, name)] == []
    assert outside not in swept and refused(release, outside)


def test_the_0_5_23_space_holds_the_checks_the_hand_list_missed_with_the_values_their_branches_test() -> None:
    space = default_space("0.5.23")
    for flag in ("--enable-unified-memory", "--disaggregation-mode", "--disaggregation-transfer-backend",
                 "--speculative-dflash-block-size", "--speculative-dspark-block-size"):
        assert flag in space.flags, flag
    disaggregation = space.spec("--disaggregation-mode")
    assert disaggregation is not None and ("decode",) in disaggregation.values
    page = space.spec("--page-size")
    assert page is not None and ("2",) in page.values  # page_size > 1 in a speculative check: both sides


def test_the_lora_group_makes_enable_lora_valid_where_the_flag_alone_fails() -> None:
    # Llama on one H100: Kimi-K2.6's compressed-tensors MoE refuses LoRA while it is built (SGLang's own
    # AttributeError: 'CompressedTensorsWNA16MoE' object has no attribute 'get_triton_quant_info'), a verdict
    session = shared_session("0.5.23", model="llama-3.1-8b", hardware="h100", gpus=1)
    space = default_space("0.5.23")
    alone = session.evaluate(Config.of({"--enable-lora": PRESENT}))
    assert not alone.passed and "--max-lora-rank and --lora-target-modules" in alone.headline
    grouped = session.evaluate(space.complete({"--enable-lora": PRESENT}))
    assert grouped.passed, grouped.headline


def test_an_environment_variable_the_checks_read_joins_the_space_and_decides_its_branch() -> None:
    space = default_space("0.5.23")
    assert "SGLANG_ENABLE_PP_SPEC" in space.flags
    session = shared_session("0.5.23")
    pipeline = {"--tp-size": "4", "--pp-size": "2", "--speculative-algorithm": "EAGLE"}  # Kimi needs 8 GPUs
    without = session.evaluate(session.with_draft(Config.of(pipeline)))
    assert not without.passed and without.frame.get("function") == "check_pipeline_parallel_compat", without.headline
    assert session.evaluate(session.with_draft(Config.of({**pipeline, "SGLANG_ENABLE_PP_SPEC": "1"}))).passed


@pytest.mark.parametrize("release", ["0.5.11", "0.5.12", "0.5.23"])
def test_the_space_holds_the_flags_sglangs_own_speculative_unit_tests_set(release: str) -> None:
    """An oracle we did not write: the flags SGLang's developers set in their speculative server-args tests."""
    cases = json.loads((Path(__file__).parent.parent / "resources" / "sglang_unit_cases.json").read_text())
    table = shared_session(release, model=MODEL[release]).flags()
    aliases = {alias: str(entry["option"]) for entry in table for alias in entry["aliases"]}
    space = default_space(release)
    filled = {flag for companions in space.groups.values() for flag, _ in companions.items}
    used = [aliases.get(flag, flag) for case in cases if case["release"] == release
            and "--speculative-algorithm" in case["flags"]
            for flag in [*(f for f, _ in Config.from_argv(case["flags"]).items), *(case.get("env") or {})]]
    assert len(used) >= 13
    missed = sorted({flag for flag in used if flag not in space.flags and flag not in filled})
    assert [flag for flag in missed if flag not in NOT_SWEPT] == []


def test_a_path_the_checks_test_is_swept_as_a_placeholder_file_and_unmasks_the_checks_after_it() -> None:
    """Without ``--uno-lora-path`` UNO stops at its first check; the placeholder lets SGLang reach the next ones."""
    space = default_space("0.5.23")
    for flag in ("--uno-lora-path", "--speculative-ngram-external-corpus-path", "--speculative-dspark-sps-table-path"):
        spec = space.spec(flag)
        assert spec is not None and spec.values == (None, ("@path",)), flag
    session = shared_session("0.5.23")
    alone = session.evaluate(Config.of({"--speculative-algorithm": "UNO"}))
    assert alone.exception.get("message") == "UNO requires --uno-lora-path.", alone.headline
    given = session.evaluate(Config.of({"--speculative-algorithm": "UNO", "--uno-lora-path": "@path"}))
    assert given.frame.get("function") == "_handle_uno" and given.frame.get("line") != alone.frame.get("line")
    corpus = session.evaluate(Config.of({"--speculative-algorithm": "NGRAM",
                                         "--speculative-ngram-external-corpus-path": "@path",
                                         "--speculative-ngram-external-sam-budget": "0"}))
    assert "when --speculative-ngram-external-corpus-path is set" in corpus.headline, corpus.headline


def test_0_5_23s_unified_memory_branch_under_dflash_gives_rows_that_reach_its_backend_check() -> None:
    """A 3-way check (switch, algorithm, backend) the data flow names and the release itself raises."""
    from bisect_spec.search.branches import contexts

    space = default_space("0.5.23")
    branch = next(b for b in space.branches if b.algorithms == ("DFLASH",))
    assert branch.where.startswith("handle_unified_memory_pool:") and branch.switches == ("--enable-unified-memory",)
    assert {"--attention-backend", "--prefill-attention-backend", "--dcp-size"} <= set(branch.reads)
    space = dataclasses.replace(space, base=Config.of({"--tp-size": "8"}))  # the deployment shape: Kimi needs 8 GPUs
    base = Config.of({"--speculative-algorithm": "DFLASH", "--speculative-draft-model-path": "@draft"})
    context, rows = next((c, r) for c, r in contexts(space, {"DFLASH": base}) if c.get("--speculative-algorithm") == ("DFLASH",))
    session = shared_session("0.5.23")
    # past resolution SGLang builds the unified pool, and refuses it for Kimi-K2.6 (neither hybrid-SWA nor mamba) in its
    # own words once the target is loaded; the branch's backend check runs before, in resolution
    assert _past_the_backend_check(session.evaluate(context))
    backends = [row for row in rows if row.get("--attention-backend") is not None]
    outcomes = {row.get("--attention-backend"): session.evaluate(row) for row in backends}
    refused = {" ".join(value or ()) for value, o in outcomes.items()
               if o.frame.get("function") == "_assert_spec_verify_backends"}
    assert refused and "triton" not in refused and _past_the_backend_check(outcomes[("triton",)]), \
        outcomes[("triton",)].headline
    for name in refused:
        assert f"got ['{name}']" in outcomes[(name,)].headline, outcomes[(name,)].headline  # both prefill and decode


def _past_the_backend_check(outcome: Any) -> bool:
    """Passed, or refused later by SGLang's unified pool for a model that is neither hybrid-SWA nor mamba."""
    return bool(outcome.passed or (outcome.record.get("stage") == "memory_pool"
                                   and "unified memory pool cannot be built" in outcome.exception.get("message", "")))

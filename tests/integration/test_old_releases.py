"""Releases from before the TypeError (0.4.6, 0.5.1.post3) and from after (0.5.3), for real.

They import beside torch 2.13/triton 3.9 only through the version-skew shims, so these
tests also check that each shim is applied where it is needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bisect_spec.api import TargetSpec
from bisect_spec.errors import ArchitectureUnknown, UsageError
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Status
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import DRAFT, Session
from tests.conftest import require_release, shared_session

pytestmark = pytest.mark.sglang

STEPS_UNSET = Config.of({"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": DRAFT,
                         "--speculative-num-draft-tokens": "3"})
STEPS_ONE = STEPS_UNSET.with_("--speculative-num-steps", "1")


@pytest.mark.parametrize(("release", "line"), [("0.4.6", 334), ("0.5.1.post3", 649)])
def test_before_0_5_3_steps_unset_asserts_inline_and_steps_one_passes(release: str, line: int) -> None:
    # llama: DeepSeek-V3's class has no EAGLE3 capture hook before 0.5.4.post2 (stage target_model fails there)
    session = shared_session(release, model="llama-3.1-8b")
    failing = session.evaluate(STEPS_UNSET)
    assert failing.status is Status.FAILED
    assert failing.exception["type"] == "AssertionError"
    assert (failing.frame["file"], failing.frame["function"], failing.frame["line"]) == \
        ("srt/server_args.py", "__post_init__", line)
    steps_one = session.evaluate(STEPS_ONE)  # the inline assert no longer refuses it
    if release == "0.4.6":
        assert steps_one.status is Status.PASSED, steps_one.exception
        assert steps_one.resolved["speculative_num_steps"] == 1
    else:  # then 0.5.1.post3's own init_memory_pool multiplies the draft's cache size by the unset topk
        assert steps_one.status is Status.FAILED and steps_one.exception["type"] == "TypeError", steps_one.headline
        assert (steps_one.frame["file"], steps_one.frame["function"]) == ("srt/model_executor/model_runner.py",
                                                                          "init_memory_pool")
        assert "resolve" in steps_one.record["stages_passed"]


def test_from_0_5_3_steps_one_raises_the_type_error() -> None:
    session = shared_session("0.5.3", model="deepseek-v3")
    outcome = session.evaluate(STEPS_ONE)
    assert outcome.status is Status.FAILED
    assert outcome.exception["type"] == "TypeError"
    assert outcome.frame["function"] == "_handle_speculative_decoding"


def test_old_releases_import_through_the_shims_they_need() -> None:
    assert "triton.runtime.cache.default_*_dir" in shared_session("0.4.6", model="deepseek-v3").info["version_shims"]
    assert "torch._C._cpu._is_amx_tile_supported" in shared_session("0.5.1.post3", model="deepseek-v3").info["version_shims"]


def test_kimi_on_a_release_without_its_architecture_says_so_in_one_line() -> None:
    require_release("0.4.6")
    target = TargetSpec(release="0.4.6", model="kimi-k2.6", draft="eagle3").resolve()
    with pytest.raises(ArchitectureUnknown) as caught, Session(target, timeout=120):
        pass
    assert str(caught.value) == ("SGLang 0.4.6 does not know the architecture KimiK25ForConditionalGeneration of "
                                 "kimi-k2.6 (first known in 0.5.9); pick a newer --sglang or another --model")


def test_a_release_that_does_not_exist_is_refused_before_pip_and_recorded_nowhere() -> None:
    """A version inside the pinned span that is not a release never reaches pip (issue: pip printed its whole
    version list and left an unavailable record behind)."""
    require_release("0.4.6")
    bogus = "0.4.6.post99"
    with pytest.raises(UsageError, match=r"SGLang 0.4.6.post99 is not a release \(releases near it: "):
        environments.install(bogus)
    assert environments.unavailable_reason(bogus) is None
    assert bogus not in environments.unavailable()
    assert not any((environments.home() / "envs").glob(f"sglang-{bogus}*"))


def test_an_installed_release_and_its_layers_are_byte_compiled_once_for_every_worker_start() -> None:
    require_release("0.5.9")
    environments.install("0.5.9")  # compiles an install from before sites were compiled; a no-op after
    env = environments.get("0.5.9")
    sites = [p for p in map(Path, env.pythonpath) if p.name == "site"]
    assert len(sites) == 1 + len(environments.describe("0.5.9")["layers"])
    for site in sites:
        assert (site / environments._COMPILED).is_file(), site
    assert list((sites[0] / "sglang" / "srt" / "__pycache__").glob("server_args.cpython-311*.pyc"))
    marked = (sites[0] / environments._COMPILED).stat().st_mtime_ns
    environments.install("0.5.9")
    assert (sites[0] / environments._COMPILED).stat().st_mtime_ns == marked  # once

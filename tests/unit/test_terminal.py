"""The terminal face: colours only on a terminal (NO_COLOR honoured), plain lines in logs, bars on a TTY."""

from __future__ import annotations

import io
import sys

import pytest

from bisect_spec.cli import terminal

TEXT = ("speculative decoding: 1 failure\n"
        "c894a92892  AssertionError ×28  _handle_eagle_family in srt/arg_groups/speculative_hook.py:1162\n"
        "verdict:  FAILED")


def test_piped_output_is_exactly_the_rendered_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    terminal.show(TEXT)
    assert out.getvalue() == TEXT + "\n"


def test_a_terminal_gets_colours_without_a_change_of_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    terminal.show(TEXT)
    coloured = out.getvalue()
    assert "\x1b[" in coloured
    import re

    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == TEXT + "\n"
    assert "\x1b[1;31mFAILED" in coloured  # the verdict in bold red


def test_no_color_is_honoured_bold_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    terminal.show(TEXT)
    import re

    codes = re.findall(r"\x1b\[([0-9;]*)m", out.getvalue())
    assert codes and not [c for c in codes if any(p.startswith(("3", "9")) and p != "3" for p in c.split(";"))]


def test_a_bar_in_a_log_prints_plain_lines_at_the_start_and_end_of_each_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with terminal.Bar() as bar:
        assert not bar.live
        for done in range(1, 101):
            bar(done, 100, "cover", "2 signatures")
        bar(5, 5, "shrink", unit="signatures shrunk")
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("[cover] 1/100 configs · ")
    assert lines[1].startswith("[cover] 100/100 configs · ") and lines[1].endswith("· 2 signatures")
    assert lines[2].startswith("[shrink] 5/5 signatures shrunk")
    assert len(lines) == 3  # nothing in between: a log is not a screen


def test_a_bar_on_a_terminal_draws_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with terminal.Bar() as bar:
        assert bar.live
        bar(50, 100, "cover", "2 signatures")
    assert "50/100" in err.getvalue() and "━" in err.getvalue()

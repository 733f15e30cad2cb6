"""The terminal face of the CLI: colours, progress bars and "what is loading" lines, with ``rich``.

:mod:`render` stays pure: it turns results into plain text. This module decides how that text
and the progress of long work reach a person:

* **Colours on a terminal only.** Verdicts, exception names, signature ids and SGLang
  locations are highlighted by patterns (a ``RegexHighlighter``), so the text stays the
  same text whether coloured or not: a test of the plain output is a test of the
  coloured one. Piped output, ``NO_COLOR`` (rich honours it) and ``TERM=dumb`` get plain
  text; ``FORCE_COLOR`` forces colours (rich again).
* **Progress bars with an ETA on a terminal; one line every few seconds otherwise.** A CI
  log or a ``| tee`` keeps readable lines instead of carriage returns and bar redraws.
  Progress always goes to stderr, answers to stdout, so ``--json`` output stays clean.

Nothing here is hand-made layout: tables are :func:`render.fitted` (rich ``Table``), bars
are rich ``Progress``. What is hand-written is only the choice of which columns a phase shows.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Self

from rich.console import Console
from rich.highlighter import RegexHighlighter
from rich.theme import Theme

if TYPE_CHECKING:  # rich.progress is imported by the bars that draw (a probe draws none: the CLI's start-up)
    from rich.progress import Progress, TaskID

#: Seconds between plain progress lines when stderr is not a terminal.
PLAIN_EVERY = 5.0


class AnswerHighlighter(RegexHighlighter):
    """Colours the words a reader looks for first, without changing the text."""

    base_style = "bisect."
    highlights = [  # noqa: RUF012 (rich's own API is a class attribute)
        r"(?m)(?P<id>^[0-9a-f]{10}\b)",
        r"\b(?P<failed>FAILED|CRASHED|TIMEOUT|REPRODUCED|failed|crashed)\b",
        r"\b(?P<passed>PASSED|passed|fixed|minimal)\b",
        r"\b(?P<exception>[A-Z][A-Za-z]*(Error|Exception))\b",
        r"(?P<location>\bsrt/[\w/]+\.py(:\d+)?)",
        r"(?m)(?P<heading>^(speculative decoding|other constraints|findings|verdict|signature|minimal reproducer|why)\b[^\n]*:)",
    ]


THEME = Theme({
    "bisect.failed": "bold red", "bisect.passed": "bold green", "bisect.exception": "red",
    "bisect.location": "cyan", "bisect.heading": "bold", "bisect.id": "bold yellow",
})


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (answers) or stderr (progress): colour only on a terminal.

    The stream is looked up at each call (tests and ``click.testing`` swap it). Lines are
    never re-wrapped: the render functions already fit their tables to :func:`width`.
    """
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, theme=THEME, highlighter=AnswerHighlighter(), markup=False, emoji=False,
                   soft_wrap=True, highlight=True)


def show(text: str, *, stderr: bool = False) -> None:
    """Print rendered text: coloured on a terminal, exactly ``text`` otherwise."""
    console(stderr=stderr).print(text)


def width() -> int:
    """Columns to fit tables to: the terminal's, or 120 when output is not a terminal."""
    import shutil

    return max(60, shutil.get_terminal_size((120, 24)).columns)


class _Live:
    """What a bar and a counter share: a rich display, stopped once (the last state stays on screen)."""

    progress: Progress | None = None

    def close(self) -> None:
        """End the display."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bar(_Live):
    """A progress bar for work of known size, in phases (evaluate, masking round, shrink).

    Call it as ``bar(done, total, phase, detail)``. On a terminal: a rich bar with
    done/total, rate and ETA per phase; elsewhere a plain line every :data:`PLAIN_EVERY`
    seconds, and at the end of each phase.
    """

    def __init__(self, *, unit: str = "configs") -> None:
        self.unit = unit
        self.out = console(stderr=True)
        #: A live bar on a terminal (else plain lines): callers may skip updates a log does not need.
        self.live = self.out.is_terminal
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.phase: str | None = None
        self.started = time.monotonic()
        self.first_done = 0
        self.last_line = 0.0

    def __call__(self, done: int, total: int, phase: str = "", detail: str = "", unit: str | None = None) -> None:
        unit = unit or self.unit
        if phase != self.phase:
            self._new_phase(phase, done, total)
        if self.live:
            assert self.progress is not None and self.task is not None
            self.progress.update(self.task, completed=done, total=total, detail=detail, unit=unit)
            return
        now = time.monotonic()
        if now - self.last_line < PLAIN_EVERY and done < total:
            return
        self.last_line = now
        elapsed = now - self.started
        rate = (done - self.first_done) / elapsed if elapsed >= 0.5 else 0.0
        eta = f"ETA {(total - done) / rate:.0f}s" if rate > 0 and done < total else "ETA -"
        speed = f"{rate:.1f}/s" if rate > 0 else "-/s"
        prefix = f"[{phase}] " if phase else ""
        self.out.print(f"{prefix}{done}/{total} {unit} · {speed} · {eta}{' · ' + detail if detail else ''}",
                       highlight=False)

    def _new_phase(self, phase: str, done: int, total: int) -> None:
        self.phase, self.started, self.first_done, self.last_line = phase, time.monotonic(), max(0, done - 1), 0.0
        if not self.live:
            return
        if self.progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
                TextColumn("·"), TimeRemainingColumn(compact=True, elapsed_when_finished=True),
                TextColumn("{task.fields[detail]}"), console=self.out, transient=False)
            self.progress.start()
        elif self.task is not None:
            self.progress.stop_task(self.task)
        self.task = self.progress.add_task(phase or "working", total=total, completed=done, detail="", unit=self.unit)

    def note(self, line: str) -> None:
        """A line above the bar (a step of the work, a warning)."""
        self.out.print(line, highlight=False)


class Counter(_Live):
    """Progress of work of unknown size (a shrink): a spinner with a count on a terminal,
    a plain line every :data:`PLAIN_EVERY` seconds otherwise."""

    def __init__(self, description: str, *, unit: str = "evaluations") -> None:
        self.description, self.unit = description, unit
        self.out = console(stderr=True)
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.last_line = time.monotonic()
        if self.out.is_terminal:
            from rich.progress import Progress, SpinnerColumn, TextColumn

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                     TextColumn("{task.completed} " + unit), TextColumn("{task.fields[detail]}"),
                                     console=self.out, transient=True)
            self.task = self.progress.add_task(description, total=None, detail="")
            self.progress.start()

    def __call__(self, count: int, detail: str = "") -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=count, detail=detail)
            return
        now = time.monotonic()
        if now - self.last_line >= PLAIN_EVERY:
            self.last_line = now
            self.out.print(f"{self.description}: {count} {self.unit}{' · ' + detail if detail else ''}", highlight=False)


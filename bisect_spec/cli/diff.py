"""``bisect-spec diff OLD NEW``: one plan on two SGLang versions, every change of verdict (a CI gate)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from bisect_spec import api
from bisect_spec.cli.errors import EXIT_VERDICT_FAILS
from bisect_spec.cli.group import SweepProgress, main
from bisect_spec.cli.options import schema_help, spec_from, target_options


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@target_options
@click.option("--strategy", default="quick", show_default=True, metavar="NAME|FILE",
              help="The plan evaluated on both sides: a strategy name or a .toml file.")
@click.option("--allow", multiple=True, metavar="ID|FIELD",
              help="Accept this change in the gate: a signature id or cross-release key, or a resolved field "
                   "(repeatable).")
@click.option("--jobs", "-j", type=int, default=None,
              help="Parallel workers per side (default: $BISECT_SPEC_JOBS, else CPU cores).")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Where the two sweeps and the diff (diff-OLD-NEW-…/diff.json, diff.md) are stored.")
@click.option("--no-cache", is_flag=True, help="Do not reuse outcomes cached by earlier runs.")
@click.option("--markdown", "markdown_file", type=click.Path(dir_okay=False), default=None,
              help="Also write the pull-request comment (diff.md) to this file.")
@click.option("--json", "as_json", is_flag=True, help=f"Print the diff as JSON ({schema_help('diff')}).")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds before an evaluation counts as hung.")
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
def diff(old: str, new: str, strategy: str, allow: tuple[str, ...], jobs: int | None, runs_dir: str, no_cache: bool,
         markdown_file: str | None, as_json: bool, timeout: float, flags: tuple[str, ...], **kwargs: Any) -> None:
    """What a change to SGLang does to the configurations people run.

    OLD and NEW are releases, git:CLONE@REV or path:DIR (a pull request's merge
    base and its head). The strategy's plan, with FLAGS (after --) in every
    row, is evaluated on both sides, and what either side evaluated is evaluated
    on the other. Reported, grouped: new failures, known failures catching more,
    changed defaults, fixed, moved (same statement, new place) and reworded
    failures; new and fixed ones shrunk to a 1-minimal reproducer and run on
    the other side. Exit status 3 when there is a new failure, a known failure
    catching more, or a changed default that --allow does not list; 0 otherwise.

    The example reports the seed's TypeError as new in 0.5.2 and exits 3.

    Example:

        bisect-spec diff 0.5.1.post3 0.5.2 --model deepseek-v3 --draft eagle3 --hardware h200
    """
    from bisect_spec.cli import terminal
    from bisect_spec.report.diff_text import diff_markdown

    spec = spec_from(kwargs)
    bars: list[SweepProgress] = []

    def sweep_progress(side: str) -> Any:
        if as_json:
            return None
        for bar in bars:  # the old side's bar ends where the new side's starts
            bar.finish()
        bars[:] = [SweepProgress()]
        return lambda done, total, found, phase: bars[0](done, total, found, f"{side} {phase}")

    def say(text: str) -> None:
        click.echo(text, err=True)

    report = api.diff(old, new, spec, strategy=strategy, flags=list(flags), jobs=jobs, runs_dir=Path(runs_dir),
                      timeout=timeout, use_cache=not no_cache, allow=allow, progress=say,
                      sweep_progress=sweep_progress)
    for bar in bars:
        bar.finish()
    data = report.to_dict()
    text = diff_markdown(data)
    if markdown_file:
        Path(markdown_file).write_text(text)
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        terminal.show(text)
        click.echo(f"diff stored in {report.path}")
    if report.gating:
        sys.exit(EXIT_VERDICT_FAILS)


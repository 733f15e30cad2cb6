"""``bisect-spec runs``: read stored runs (list, show).

One of the three command modules that may use :mod:`bisect_spec.runtime` directly (``LAYERS`` in
``tests/quality/test_quality.py``): they read the run store itself, which no workflow wraps.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from bisect_spec import api
from bisect_spec.cli.group import main
from bisect_spec.cli.options import filter_options, schema_help, terminal_width


@main.group()
def runs() -> None:
    """Read stored runs.

    Example:

        bisect-spec runs list
    """


@runs.command("list")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Where runs are stored.")
@click.option("--json", "as_json", is_flag=True, help=f"Machine-readable list ({schema_help('runs')}).")
def runs_list(runs_dir: str, as_json: bool) -> None:
    """List runs: target, strategy, progress, signatures.

    Example:

        bisect-spec runs list --json
    """
    from bisect_spec.report import text as render
    from bisect_spec.runtime import store

    rows = store.list_runs(Path(runs_dir))
    if as_json:
        click.echo(json.dumps({"schema": "bisect-spec/runs/1", "runs": rows}, indent=2, sort_keys=True))
        return
    click.echo(render.table(["run", "release", "model", "draft", "hardware", "strategy", "recorded", "complete", "signatures"],
                            [[r["id"], r["target"].get("release"), r["target"].get("model"), r["target"].get("draft"),
                              r["target"].get("hardware"), r["strategy"], f"{r['recorded']}/{r['planned']}+",
                              "yes" if r["complete"] else "no", r["signatures"] if r["signatures"] is not None else "-"]
                             for r in rows]))


@runs.command("show")
@click.argument("run")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Where runs are stored.")
@click.option("--json", "as_json", is_flag=True, help=f"The stored run as JSON ({schema_help('run-show')}).")
@click.option("--findings", is_flag=True, help="List every finding in passing configurations, one line each.")
@filter_options
def runs_show(run: str, runs_dir: str, as_json: bool, algorithm: str | None, flag: str | None,
              grep: str | None, findings: bool) -> None:
    """Show a stored run's summary (or its progress if it did not finish).

    RUN is a run id, latest (the newest run), or the unique beginning of an id or of
    its last part (20261130-17, ab12).

    Example:

        bisect-spec runs show latest

        bisect-spec runs show 20261130-171500-kimi-k2.6-0.5.23-ab12

        bisect-spec runs show latest --algorithm NGRAM --grep 'page.size'
    """
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render
    from bisect_spec.runtime import store

    run = store.resolve_run_id(Path(runs_dir), run)
    meta, entries, summary = store.read_run(Path(runs_dir), run)
    if as_json:
        click.echo(json.dumps({"schema": "bisect-spec/run-show/1", "run": run, "meta": meta, "recorded": len(entries),
                               "summary": summary}, indent=2, sort_keys=True))
        return
    if summary is None:
        click.echo(f"run {run} did not finish: {len(entries)} of {meta.get('plan_size')}+ results recorded; "
                   f"continue with: bisect-spec --resume {run}")
        return
    api.check_grep(grep)
    run_path = Path(run) if Path(run).is_dir() else Path(runs_dir) / run
    terminal.show(render.summary_text(summary, width=terminal_width(), run_path=str(run_path), algorithm=algorithm,
                                      flag=flag, grep=grep, findings=findings))

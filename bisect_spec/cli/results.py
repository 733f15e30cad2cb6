"""Commands about what sweeps and nightlies produce: ``strategies``, ``nightly``, ``report`` (the stored runs
themselves: :mod:`bisect_spec.cli.runs`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from bisect_spec import api
from bisect_spec.cli.group import main
from bisect_spec.cli.options import deprecated_option, filter_options, schema_help


@main.group()
def strategies() -> None:
    """Sweep strategies: the flag spaces --strategy names.

    Example:

        bisect-spec strategies list
    """


@strategies.command("list")
@click.option("--json", "as_json", is_flag=True, help=f"Machine-readable list ({schema_help('strategies')}).")
def strategies_list(as_json: bool) -> None:
    """List the shipped strategies with what each sweeps (a .toml file of your own works too).

    Example:

        bisect-spec strategies list --json
    """
    from bisect_spec.report import text as render

    rows = [api.load_strategy(name) for name in api.strategy_names()]
    if as_json:
        click.echo(json.dumps({"schema": "bisect-spec/strategies/1", "strategies": [
            {"name": r.name, "description": r.description, "strength": r.strength, "core_strength": r.core_strength,
             "random_budget": r.random_budget} for r in rows]}, indent=2, sort_keys=True))
        return
    click.echo(render.table(["strategy", "what it sweeps", "random budget"],
                            [[r.name, r.description, r.random_budget] for r in rows], max_width=100))


EXIT_REGRESSION = 3


@main.command()
@click.option("--matrix", "matrix_file", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Matrix file (TOML): releases × models × drafts × hardware; see examples/nightly-matrix.toml.")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="nightlies", show_default=True,
              help="Where nightlies are stored, each with its cells' runs (and the baseline is looked up).")
@deprecated_option("--out", "--runs-dir")
@click.option("--baseline", default="latest", show_default=True, metavar="ID|PATH|latest|none",
              help="Nightly to compare against; latest = the newest finished one of the same matrix name.")
@click.option("--resume", metavar="ID", default=None, help="Continue an interrupted nightly.")
@click.option("--jobs", "-j", type=int, default=None,
              help="Parallel workers per cell (default: $BISECT_SPEC_JOBS, else CPU cores).")
@click.option("--no-install", is_flag=True, help="Skip cells whose release is not installed instead of building it.")
@click.option("--json", "as_json", is_flag=True, help=f"Print nightly.json ({schema_help('nightly')}).")
def nightly(matrix_file: str, runs_dir: str, out: str | None, baseline: str, resume: str | None, jobs: int | None,
            no_install: bool, as_json: bool, executor: str = "local", address: str | None = None) -> None:
    """Run the compatibility matrix and compare it with the previous nightly.

    Each cell (release × model × draft × hardware) is a sweep with the matrix's
    strategy. Failures are matched to the baseline by cross-release key, each failure's
    id in every output: new ones are regressions, vanished ones are fixed, the others
    still failing (moved or reworded ones say so); on the first night every failure is
    known (found: the baseline of the next). Exit status: 0 no regression, 3 regressions,
    1/2 errors; nightly.md, the terminal and `report` in every format say the same.

    Example:

        bisect-spec nightly --matrix examples/nightly-matrix.toml --runs-dir nightlies

        bisect-spec nightly --matrix examples/nightly-matrix.toml --executor ray --address auto
    """
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render

    def progress(message: str) -> None:
        click.echo(f"… {message}", err=True)

    data = api.nightly(matrix_file, out=Path(out or runs_dir), resume=resume, baseline=baseline, jobs=jobs,
                       progress=None if as_json else progress, install=not no_install, executor=executor,
                       address=address)
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        terminal.show(render.nightly_text(data))
        click.echo(f"stored in {data['path']}")
    from bisect_spec.report.night import failed_the_night, night_verdicts

    if failed_the_night(night_verdicts(data)):  # the verdict nightly.md, the terminal and every report read
        sys.exit(EXIT_REGRESSION)


@main.command("report")
@click.argument("target")
@click.option("--format", "fmt", type=click.Choice(["md", "json", "junit", "html"]), default="md", show_default=True,
              help=f"md: Markdown for PRs and issues; json: {schema_help('report')}; junit: JUnit XML for CI; "
                   "html: one self-contained page with pictures.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the report to FILE (default: print it).")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Where run ids are looked up.")
@filter_options
def report(target: str, fmt: str, output: str | None, runs_dir: str, algorithm: str | None, flag: str | None,
           grep: str | None) -> None:
    """Report a sweep run or a nightly matrix as Markdown, JSON, JUnit XML or HTML.

    TARGET is a run id (looked up in --runs-dir), a run directory, a nightly directory
    or its nightly.json. For a nightly, the report leads with the regressions, fixes and
    changes against its baseline; JUnit marks regressions as failures, failures the
    baseline had already as skipped (type "still-failing") and the first night's as
    skipped (type "known"), as the nightly's exit status does.

    Example:

        bisect-spec report nightlies/20261130-0215-ab12 --format html -o nightly.html

        bisect-spec report 20261130-171500-kimi-k2.6-0.5.23-ab12 --format junit -o junit.xml
    """
    text = api.report(target, fmt, runs_dir=Path(runs_dir), algorithm=algorithm, flag=flag, grep=grep)
    if output is None:
        click.echo(text, nl=False)
        return
    from bisect_spec.errors import StoreError

    try:
        Path(output).write_text(text)
    except OSError as exc:
        raise StoreError(f"cannot write {output}: {exc.strerror or exc}") from exc
    click.echo(f"{fmt} report written to {output}", err=True)

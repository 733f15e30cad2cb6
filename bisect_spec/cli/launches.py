"""Real launches: ``launch``, ``crosscheck``, and ``--launch`` on ``shrink`` and ``sweep`` (the warm evaluation
workers: :mod:`bisect_spec.cli.workers`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from bisect_spec import api
from bisect_spec.cli.errors import EXIT_VERDICT_FAILS
from bisect_spec.cli.group import main
from bisect_spec.cli.options import launch_options, schema_help, spec_from, split_server_command, target_options


def launch_header(target: dict[str, Any], mode: str) -> str:
    draft = f" + {target['draft']}" if target.get("draft") else ""
    return f"SGLang {target['release']} · {target['model']}{draft} · {mode}"


@main.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@launch_options
@click.option("--repeat", default=1, show_default=True, help="Launch this many times; differing ends are reported as flaky.")
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON ({schema_help('launch')}).")
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
def launch_command(flags: tuple[str, ...], launch_timeout: float, timeout: float | None, runs_dir: str,
                   launch_without_gpu: bool, server_command: str | None, repeat: int, as_json: bool, **kwargs: Any) -> None:
    """Really start SGLang's server with FLAGS; report ready / resolution-failed / failed-later / timed-out.

    The server runs on 127.0.0.1 on a free port, its whole process tree is stopped
    afterwards (also on Ctrl-C), and its log is kept under --runs-dir. A failure in
    argument resolution gets the same signature id as `probe`. Without a GPU, say
    --launch-without-gpu (or --hardware PROFILE to simulate one during resolution).
    Exit status: 0 every launch became ready, 3 otherwise, 1/2 errors.

    Example:

        bisect-spec launch --sglang current --model-path /models/Kimi-K2.6 --json -- \\
            --tp 8 --speculative-algorithm EAGLE3 --speculative-draft-model-path /models/eagle3
    """
    spec = spec_from(kwargs)
    report = api.launch(list(flags), spec, repeat=repeat, timeout=timeout or launch_timeout, runs_dir=Path(runs_dir),
                        allow_without_gpu=launch_without_gpu, server_command=split_server_command(server_command))
    data = report.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        for note in report.notes:
            click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
        click.echo(launch_header(data["target"], report.plan.mode))
        click.echo(f"flags:    {' '.join(report.config.argv())}")
        for number, attempt in enumerate(report.attempts, 1):
            click.echo(f"launch {number}: {attempt.headline}  [{attempt.seconds:.1f} s, {len(attempt.pids)} processes, "
                       f"port {attempt.port} {'freed' if attempt.port_freed else 'STILL BUSY'}]")
            if attempt.signature is not None:
                click.echo(f"  signature: {attempt.signature.id}  (cross-release key {attempt.signature.cross_release_key})")
            click.echo(f"  log: {attempt.log}")
        if data["flaky"]:
            counts = ", ".join(f"{n}x {c}" for c, n in data["classifications"].items())
            click.echo(f"FLAKY: {counts}")
    if any(a.status != "ready" for a in report.attempts):
        sys.exit(EXIT_VERDICT_FAILS)


def crosscheck_table(report: api.CrosscheckReport) -> str:
    from bisect_spec.report import text as render

    def shown(argv: list[str]) -> str:  # the draft path is implied by the target
        text = " ".join(argv).replace("--speculative-draft-model-path @draft", "").replace("  ", " ").strip()
        return text if len(text) <= 70 else text[:67] + "..."

    rows = [[r["label"], shown(r["config"]), r["in_process"], r["launch"],
             "yes" if r["agree"] else "NO: " + r["kind"], r["note"][:50]] for r in report.rows]
    text = render.table(["config", "flags", "in-process", "launch", "agree", "note"], rows)
    return f"{text}\n{len(report.disagreements)} disagreement(s) of {len(report.rows)}; stored in {report.path}"


@main.command("crosscheck")
@target_options
@launch_options
@click.option("--passing", default=3, show_default=True, help="With a run id: how many passing configurations to launch too.")
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON ({schema_help('crosscheck')}).")
@click.argument("source")
def crosscheck_command(source: str, launch_timeout: float, timeout: float | None, runs_dir: str, launch_without_gpu: bool,
                       server_command: str | None, passing: int, as_json: bool, **kwargs: Any) -> None:
    """Compare the in-process verdict with a real launch for each configuration of SOURCE.

    SOURCE is a file with one configuration per line (SGLang flags or a pasted command)
    or a stored run id (each signature's smallest configuration plus a few passing
    ones). Disagreements are findings of their own: printed as a table and stored.
    Exit status: 0 all agree, 3 some disagree.

    Example:

        bisect-spec crosscheck --sglang current configs.txt
    """
    spec = spec_from(kwargs)
    configs = api.configs_to_crosscheck(source, Path(runs_dir), passing=passing)
    report = api.crosscheck(configs, spec, timeout=timeout or launch_timeout, runs_dir=Path(runs_dir),
                            allow_without_gpu=launch_without_gpu, server_command=split_server_command(server_command))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        for note in report.notes:
            click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
        click.echo(crosscheck_table(report))
    if report.disagreements:
        sys.exit(EXIT_VERDICT_FAILS)


def confirm_by_launch(command: click.Command, pick: Callable[[Any], list[tuple[str, Any]]]) -> None:
    """Add ``--launch`` to ``command``: after it finishes, launch what ``pick`` chooses from its result."""
    command.params += [
        click.Option(["--launch"], is_flag=True, help="Confirm the result by real launches (see `bisect-spec launch`)."),
        click.Option(["--launch-without-gpu"], is_flag=True, help="With --launch: launch even without a GPU."),
        click.Option(["--launch-timeout"], default=600.0, show_default=True, help="With --launch: seconds per launch."),
    ]
    original = command.callback
    assert original is not None

    def callback(**kwargs: Any) -> Any:
        wanted, without_gpu = kwargs.pop("launch"), kwargs.pop("launch_without_gpu")
        timeout = kwargs.pop("launch_timeout")
        spec = spec_from(dict(kwargs))
        if wanted:
            api.launch_plan(spec, allow_without_gpu=without_gpu)  # refuse before the work, not after
        result = original(**kwargs)
        if not wanted or result is None:
            return result
        configs = pick(result)
        if not configs:
            click.echo("note: nothing to confirm by launching", err=True)
            return result
        report = api.crosscheck(configs, spec, timeout=timeout, runs_dir=Path(kwargs.get("runs_dir") or "runs"),
                                allow_without_gpu=without_gpu)
        for note in report.notes:
            click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
        if kwargs.get("as_json"):
            click.echo(f"note: launch confirmation stored in {report.path / 'crosscheck.json'} "
                       f"({len(report.disagreements)} disagreement(s))", err=True)
        else:
            click.echo("\nconfirmed by real launches:")
            click.echo(crosscheck_table(report))
        return result

    command.callback = callback


def shrink_launches(report: api.ShrinkReport) -> list[tuple[str, Any]]:
    chosen: list[tuple[str, Any]] = [("minimal reproducer", report.result.minimal)]
    fixes = (report.fixes or {}).get("fixes") or []
    if fixes:
        chosen.append(("nearest fix", api.Config.from_argv(fixes[0]["argv"])))
    return chosen


def sweep_launches(result: api.SweepResult) -> list[tuple[str, Any]]:
    return api.selected_from_summary(result.summary, [o.to_dict() for o in result.outcomes], passing=2)

"""``bisect-spec workers``: the warm evaluation workers (list, stop).

One of the three command modules that may use :mod:`bisect_spec.runtime` directly (``LAYERS`` in
``tests/quality/test_quality.py``): they manage the warm workers themselves, which no workflow wraps.
"""

from __future__ import annotations

import json

import click

from bisect_spec.cli.group import main
from bisect_spec.cli.options import schema_help


@main.group()
def workers() -> None:
    """Warm evaluation workers: kept up between commands, stopped when idle.

    probe and shrink start one per target (release, hardware box: any GPU count) and leave it up
    for the next command, which then answers at once; it stops by itself after
    BISECT_SPEC_WORKER_IDLE seconds unused (default 300; 0 = never keep one).

    Example:

        bisect-spec workers list

        bisect-spec workers stop --all
    """


@workers.command("list")
@click.option("--json", "as_json", is_flag=True, help=f"The list as JSON ({schema_help('workers')}).")
def workers_list(as_json: bool) -> None:
    """List the warm workers of this BISECT_SPEC_HOME: target, pid, idle time, evaluations served, memory.

    Example:

        bisect-spec workers list
    """
    from bisect_spec.report import text as render
    from bisect_spec.runtime import warm

    found = warm.listing()
    if as_json:
        click.echo(json.dumps({"schema": "bisect-spec/workers/1", "workers": found}, indent=2, sort_keys=True))
        return
    if not found:
        click.echo("no warm workers")
        return
    rows = [[w["key"], w.get("label", "?"), str(w["pid"]), w.get("state", "?"),
             f"{w['idle_seconds']:.0f}s of {w['idle_limit']:.0f}s", str(w["served"]),
             f"{w['memory'] / 2**20:.0f} MiB"] for w in found]
    click.echo(render.table(["key", "target", "pid", "state", "idle", "served", "memory"], rows))


@workers.command("stop")
@click.argument("targets", nargs=-1)
@click.option("--all", "stop_everything", is_flag=True, help="Stop every warm worker of this BISECT_SPEC_HOME.")
def workers_stop(targets: tuple[str, ...], stop_everything: bool) -> None:
    """Stop warm workers: those whose key or target contains TARGET (e.g. 0.5.23), or --all.

    Example:

        bisect-spec workers stop "SGLang 0.5.23"

        bisect-spec workers stop --all
    """
    from bisect_spec.runtime import warm

    if bool(targets) == stop_everything:
        raise click.UsageError("name a warm worker (its key, or part of its target: 0.5.23) or use --all")
    stopped = warm.stop_all(targets)
    if not stopped and targets:
        raise click.ClickException(f"no warm worker matches {' '.join(targets)}; see bisect-spec workers list")
    for state in stopped:
        click.echo(f"stopped {state['key']} ({state.get('label')}, pid {state['pid']})")

"""``bisect-spec env``: the per-release evaluation environments (install, verify, list, remove, python, run).

One of the three command modules that may use :mod:`bisect_spec.runtime` directly (``LAYERS`` in
``tests/quality/test_quality.py``): these commands manage the environments themselves, which no workflow wraps.
The release smoke they run and read goes through :mod:`bisect_spec.api`.
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import click

from bisect_spec import api
from bisect_spec.cli.group import main
from bisect_spec.cli.options import schema_help
from bisect_spec.errors import ReleaseError, ReleaseUnavailable


@main.group()
def env() -> None:
    """Manage per-release evaluation environments (one shared base + a thin overlay each).

    Example:

        bisect-spec env install 0.5.9 0.5.23
    """


@env.command("install")
@click.argument("releases", nargs=-1)
@click.option("--all", "all_releases", is_flag=True, help="Every release with recorded pins (0.4.6 ... newest).")
@click.option("--retry", is_flag=True, help="Try again releases recorded as unavailable here.")
@click.option("--newer", is_flag=True,
              help="Also every release the package index has that is newer than the pinned table (for nightlies).")
@click.option("--smoke/--no-smoke", default=True, show_default=True,
              help="Run the release smoke after installing (see `env verify`).")
@click.option("--jobs", "-j", type=click.IntRange(1), default=2, show_default=True,
              help="Releases installed at once (one's download overlaps another's byte-compiling and import check).")
def env_install(releases: tuple[str, ...], all_releases: bool, retry: bool, newer: bool, smoke: bool,
                jobs: int) -> None:
    """Install SGLang releases (pins recorded in the package; torch stays the CPU build).

    RELEASES are versions or inclusive ranges over the releases with recorded pins
    (A..B; an open end runs to the oldest/newest). A release that cannot be built or
    imported here is recorded as unavailable with its reason and skipped next time.
    Each release installed then runs its smoke (`env verify`); one whose smoke fails is
    kept but marked unverified. Exit status 1 if any release ended unavailable or failed.
    Two releases install at once (--jobs); their smokes run one at a time afterwards.

    Example:

        bisect-spec env install 0.5.23

        bisect-spec env install 0.4.6..0.5.3 0.5.23

    A source target (git:CLONE@REV, path:DIR) installs the release its tree runs over.
    """
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render
    from bisect_spec.runtime import environments

    if not releases and not all_releases and not newer:
        raise click.UsageError("name releases (0.5.23, 0.4.6..0.5.3) or use --all")
    from bisect_spec.runtime import sources

    named = []
    for release in releases:  # a source target: the release its tree runs over
        if sources.is_source_spec(release):
            under = sources.release_under(release)
            click.echo(f"{release} runs over SGLang {under}'s environment: installing {under}", err=True)
            release = under
        named.append(release)
    chosen = environments.select_releases(named, all_releases=all_releases)
    if newer:
        chosen += [r for r in environments.newer_than_pinned() if r not in chosen]
    by_release: dict[str, list[Any]] = {}
    with terminal.Bar(unit="releases") as bar:
        if len(chosen) > 1 and jobs > 1 and not all(environments.is_installed(r) for r in chosen):
            environments.ensure_base(lambda line: bar.note(f"  {line}"))  # once, before the releases sharing it
        lock = threading.Lock()
        started = 0

        def one(release: str) -> None:
            nonlocal started
            with lock:
                started += 1
                bar.note(f"[{started}/{len(chosen)}] {release}")
                if bar.live:  # the step lines above say the same in a log
                    bar(len(by_release), len(chosen), "env install", release)
            prefix = f"  {release}: " if jobs > 1 and len(chosen) > 1 else "  "
            row = _install_one(release, retry, lambda line: bar.note(f"{prefix}{line}"))
            with lock:
                by_release[release] = row

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(jobs, len(chosen)) or 1) as pool:
            for done in [pool.submit(one, release) for release in chosen]:
                done.result()
        for release in chosen:  # one at a time, once every install ended: each starts SGLang's workers
            if smoke and environments.is_installed(release) and api.smoke_is_stale(release):
                bar.note(f"  release smoke of {release}")
                checked = api.verify_release(release)
                by_release[release][1] += "; smoke passed" if checked.verified else "; SMOKE FAILED: unverified"
        if bar.live:
            bar(len(chosen), len(chosen), "env install")
    rows = [by_release[release] for release in chosen]  # the order asked for, whichever finished first
    failed = sum(1 for row in rows if row[1].startswith(("unavailable", "failed")))
    click.echo(render.table(["release", "status", "MB", "seconds"], rows))
    if failed:
        sys.exit(1)


def _install_one(release: str, retry: bool, say: Callable[[str], None]) -> list[Any]:
    """Install one release for ``env install``; return its row of the closing table."""
    from bisect_spec.runtime import environments

    started = time.perf_counter()
    was_installed = environments.is_installed(release)
    layers_before = environments.describe(release).get("layers", []) if was_installed else []
    try:
        environments.install(release, progress=say, retry=retry)
    except ReleaseUnavailable as exc:
        return [release, f"unavailable: {exc.reason}"[:100], "-", f"{time.perf_counter() - started:.1f}"]
    except ReleaseError as exc:
        return [release, f"failed: {exc}"[:100], "-", f"{time.perf_counter() - started:.1f}"]
    info = environments.describe(release)
    seconds = "-" if was_installed else info.get("install_seconds", "-")
    added = [layer for layer in info.get("layers", []) if layer not in layers_before]
    status = ("installed" if not was_installed else
              f"already installed; layers added: {', '.join(added)}" if added else "already installed")
    return [release, status, f"{environments.size_of(release) / 1e6:.0f}", seconds]


@env.command("verify")
@click.argument("releases", nargs=-1)
@click.option("--all", "all_releases", is_flag=True, help="Every installed release.")
@click.option("--json", "as_json", is_flag=True, help=f"Every case of every release ({schema_help('smoke')}).")
def env_verify(releases: tuple[str, ...], all_releases: bool, as_json: bool) -> None:
    """Run the release smoke: configurations a real server of the release accepts must pass,
    and a known failure must fail in SGLang's own speculative checks.

    A release whose smoke fails is marked unverified in `env list`, and every output on it says
    so in one line. `env install` runs it after each install. Cases are chosen by what the
    release has (its algorithms and flags), never by its version. Exit status 1 if any
    release is unverified.

    Example:

        bisect-spec env verify 0.5.18 0.5.23
    """
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render
    from bisect_spec.runtime import environments

    if not releases and not all_releases:
        raise click.UsageError("name installed releases (0.5.23) or use --all")
    installed = environments.installed()
    chosen = installed if all_releases else environments.select_releases(list(releases))
    missing = [r for r in chosen if r not in installed]
    if missing:
        raise click.UsageError(f"not installed: {', '.join(missing)}: bisect-spec env install {' '.join(missing)}")
    results = []
    with terminal.Bar(unit="releases") as bar:
        for index, release in enumerate(chosen, 1):
            bar(index - 1, len(chosen), "smoke", release)
            results.append(api.verify_release(release))
        bar(len(chosen), len(chosen), "smoke")
    if as_json:
        click.echo(json.dumps({"schema": api.SMOKE_SCHEMA, "releases": [r.to_dict() for r in results]}, indent=2))
    else:
        click.echo(render.smoke_table(results))
    if any(not r.verified for r in results):
        sys.exit(1)


@env.command("list")
@click.option("--json", "as_json", is_flag=True, help=f"Machine-readable list ({schema_help('envs', 2)}).")
def env_list(as_json: bool) -> None:
    """List installed releases, releases with recorded pins, and unavailable ones with why.

    Example:

        bisect-spec env list --json
    """
    from bisect_spec.report import text as render
    from bisect_spec.runtime import environments

    rows: list[dict[str, Any]] = []
    installed = set(environments.installed())
    unavailable = environments.unavailable()
    for release in sorted(installed | set(environments.known_releases()) | set(unavailable), key=environments.version_key):
        info = environments.describe(release) if release in installed else {}
        rows.append({"release": release, "installed": release in installed,
                     "pinned": release in environments.known_releases(),
                     "size_mb": round(environments.size_of(release) / 1e6, 1) if info else None,
                     "unavailable": unavailable.get(release) if release not in installed else None,
                     "smoke": api.smoke_status(release) if release in installed else None})
    if as_json:
        click.echo(json.dumps({"schema": "bisect-spec/envs/2", "home": str(environments.home()), "releases": rows}, indent=2))
        return
    click.echo(render.table(["release", "installed", "smoke", "pins recorded", "MB", "unavailable because"],
                            [[r["release"], "yes" if r["installed"] else "-", r["smoke"] or "-",
                              "yes" if r["pinned"] else "-",
                              r["size_mb"] if r["size_mb"] is not None else "-", (r["unavailable"] or "-")[:90]]
                             for r in rows]))


@env.command("remove")
@click.argument("releases", nargs=-1, required=True)
def env_remove(releases: tuple[str, ...]) -> None:
    """Remove installed releases (the shared base stays).

    Example:

        bisect-spec env remove 0.5.11
    """
    from bisect_spec.runtime import environments

    for release in releases:
        environments.remove(release)
        click.echo(f"{release}: removed")


@env.command("python")
@click.argument("release")
def env_python(release: str) -> None:
    """Print the path of a Python that imports SGLang RELEASE (as evaluation workers do).

    Example:

        $(bisect-spec env python 0.5.12) repro.py
    """
    from bisect_spec.runtime import sources

    click.echo(sources.environment_for(release).interpreter())


@env.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("release")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def env_run(release: str, command: tuple[str, ...]) -> None:
    """Run COMMAND with SGLang RELEASE importable: `python` is that release's Python (like `uv run`).

    The command's exit status is this command's: `git bisect run bisect-spec env run 0.5.12 -- python repro.py`.

    Example:

        bisect-spec env run 0.5.12 -- python repro.py
    """
    from bisect_spec.runtime import processes, sources

    interpreter = sources.environment_for(release).interpreter()
    argv = list(command[1:] if command[:1] == ("--",) else command)
    code = processes.run_with_python(argv, interpreter)
    sys.exit(code)

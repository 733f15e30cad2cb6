"""Commands about SGLang releases: ``env`` (install, verify, list, remove, python, run) and ``bisect``."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from bisect_spec import api
from bisect_spec.cli.errors import UsageFailure
from bisect_spec.cli.group import main
from bisect_spec.cli.options import schema_help, spec_from, target_options
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
def env_install(releases: tuple[str, ...], all_releases: bool, retry: bool, newer: bool, smoke: bool) -> None:
    """Install SGLang releases (pins recorded in the package; torch stays the CPU build).

    RELEASES are versions or inclusive ranges over the releases with recorded pins
    (A..B; an open end runs to the oldest/newest). A release that cannot be built or
    imported here is recorded as unavailable with its reason and skipped next time.
    Each release installed then runs its smoke (`env verify`); one whose smoke fails is
    kept but marked unverified. Exit status 1 if any release ended unavailable or failed.

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
    rows: list[list[Any]] = []
    with terminal.Bar(unit="releases") as bar:
        for index, release in enumerate(chosen, 1):
            bar.note(f"[{index}/{len(chosen)}] {release}")
            if bar.live:  # the step lines above say the same in a log
                bar(index - 1, len(chosen), "env install", release)
            _install_one(release, retry, rows, lambda line: bar.note(f"  {line}"))
            if smoke and environments.is_installed(release) and _smoke_is_stale(release):
                bar.note(f"  release smoke of {release}")
                checked = api.verify_release(release)
                rows[-1][1] += "; smoke passed" if checked.verified else "; SMOKE FAILED: unverified"
        if bar.live:
            bar(len(chosen), len(chosen), "env install")
    failed = sum(1 for row in rows if row[1].startswith(("unavailable", "failed")))
    click.echo(render.table(["release", "status", "MB", "seconds"], rows))
    if failed:
        sys.exit(1)


def _install_one(release: str, retry: bool, rows: list[list[Any]], say: Callable[[str], None]) -> None:
    """Install one release for ``env install``; its row of the closing table goes to ``rows``."""
    from bisect_spec.runtime import environments

    started = time.perf_counter()
    was_installed = environments.is_installed(release)
    layers_before = environments.describe(release).get("layers", []) if was_installed else []
    try:
        environments.install(release, progress=say, retry=retry)
    except ReleaseUnavailable as exc:
        rows.append([release, f"unavailable: {exc.reason}"[:100], "-", f"{time.perf_counter() - started:.1f}"])
        return
    except ReleaseError as exc:
        rows.append([release, f"failed: {exc}"[:100], "-", f"{time.perf_counter() - started:.1f}"])
        return
    info = environments.describe(release)
    seconds = "-" if was_installed else info.get("install_seconds", "-")
    added = [layer for layer in info.get("layers", []) if layer not in layers_before]
    status = ("installed" if not was_installed else
              f"already installed; layers added: {', '.join(added)}" if added else "already installed")
    rows.append([release, status, f"{environments.size_of(release) / 1e6:.0f}", seconds])


def _smoke_is_stale(release: str) -> bool:
    from bisect_spec.runtime.store import evaluation_digest
    from bisect_spec.workflows import smoke

    found = smoke.recorded(release)
    return found is None or found.digest != evaluation_digest()


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
    from bisect_spec.workflows import smoke

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
        click.echo(json.dumps({"schema": smoke.SCHEMA, "releases": [r.to_dict() for r in results]}, indent=2))
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
    from bisect_spec.workflows import smoke

    rows: list[dict[str, Any]] = []
    installed = set(environments.installed())
    unavailable = environments.unavailable()
    for release in sorted(installed | set(environments.known_releases()) | set(unavailable), key=environments.version_key):
        info = environments.describe(release) if release in installed else {}
        rows.append({"release": release, "installed": release in installed,
                     "pinned": release in environments.known_releases(),
                     "size_mb": round(environments.size_of(release) / 1e6, 1) if info else None,
                     "unavailable": unavailable.get(release) if release not in installed else None,
                     "smoke": smoke.status(release) if release in installed else None})
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


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@click.option("--old", "old", metavar="VER|REV", default=None,
              help="The older end: a release (default: the oldest known); with --repo, a revision of the clone "
                   "(a tag, branch or commit) bisects commits only.")
@click.option("--new", "new", metavar="VER|REV", default=None,
              help="The newer end: a release (default: the newest known); with --repo, a revision.")
@click.option("--good", metavar="VER", default=None,
              help="git bisect's terms: the release that works. Older or newer than --bad: given newer, the "
                   "search finds when it was fixed.")
@click.option("--bad", metavar="VER", default=None, help="git bisect's terms: the release that fails.")
@click.option("--term-old", metavar="TERM", default=None, help="What the old verdict is called (default: old).")
@click.option("--term-new", metavar="TERM", default=None, help="What the new verdict is called (default: new).")
@click.option("--fixed", is_flag=True, help="Find when a failure was fixed: the terms become broken (old) and fixed (new).")
@click.option("--scan", is_flag=True,
              help="Evaluate every installed release of the range (a failure that exists only in middle releases).")
@click.option("--releases", "release_list", metavar="A,B,..", default=None,
              help="Consider only these releases (comma-separated), e.g. the installed ones.")
@click.option("--moves/--no-moves", default=True, show_default=True,
              help="Also find where a failure that stays the same moved to another file or function.")
@click.option("--json", "as_json", is_flag=True,
              help=f"Print the documented JSON ({schema_help('bisect')}; with revisions "
                   f"{schema_help('commits')}).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds before an evaluation counts as hung.")
@click.option("--repo", type=click.Path(file_okay=False), default=None, metavar="PATH",
              help="Your SGLang clone: bisect the release boundary found down to the commit.")
@click.option("--max-evaluations", type=int, default=None, metavar="N",
              help="With revisions: stop after N evaluations with the range of commits found so far.")
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
def bisect(old: str | None, new: str | None, good: str | None, bad: str | None, term_old: str | None,
           term_new: str | None, fixed: bool, scan: bool, release_list: str | None, moves: bool, as_json: bool,
           timeout: float, repo: str | None, max_evaluations: int | None, flags: tuple[str, ...], **kwargs: Any) -> None:
    """Find the first SGLang release whose verdict differs from the old release's, and with --repo the commit.

    As git bisect: the ends are old (older) and new (newer), and the first release
    whose verdict differs from the old one's is found, whichever way: a regression or
    a fix (--fixed names the verdicts broken/fixed; --good/--bad may be given in either
    order). Binary search over the releases (environments are built on demand; an
    installed release near the middle is preferred), matching failures across releases
    by their cross-release key with release numbers normalised, so a failure that moved
    to another file is still one failure. Binary search evaluates only the ends when
    they agree: --scan evaluates every installed release in between too.

    With --repo PATH (a local clone of SGLang), the first verdict change is then bisected
    down to the commit: the first-parent commits between the two releases' tags that
    touch python/sglang, each commit's tree laid over the older release's environment;
    a commit that does not import there is skipped, like git bisect skip. Given
    revisions that are not release numbers (--old v0.5.1.post3 --new v0.5.2), only
    commits are bisected.

    Example:

    \b
        bisect-spec bisect --model deepseek-v3 --draft eagle3 --old 0.4.6 -- \\
            --speculative-num-steps 1 --speculative-num-draft-tokens 3

    \b
        bisect-spec bisect --model deepseek-v3 --fixed --old 0.5.3 --new 0.5.23 --scan -- \\
            --speculative-num-steps 1 --speculative-num-draft-tokens 3

    \b
        bisect-spec bisect --model deepseek-v3 --repo ~/sglang --old v0.5.1.post3 --new v0.5.2 -- \\
            --speculative-num-steps 1 --speculative-num-draft-tokens 3
    """
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render

    spec = spec_from(kwargs)
    releases = [r.strip() for r in release_list.split(",") if r.strip()] if release_list else None
    old, new, terms, end_names = bisect_ends(old, new, good, bad, term_old, term_new, fixed)
    revisions = bool(repo) and any(v is not None and not api.is_release_name(v) for v in (old, new))
    if max_evaluations is not None and not revisions:
        raise UsageFailure("--max-evaluations bisects the commits between two revisions: add --repo PATH "
                            "--old REV --new REV")
    if revisions and (old is None or new is None or not all(v is not None and not api.is_release_name(v)
                                                             for v in (old, new))):
        raise UsageFailure("name both ends of the commits to bisect as revisions: --old REV --new REV (release "
                            "numbers such as 0.5.9 bisect releases first)")
    if revisions and (release_list or scan or good or bad):
        raise UsageFailure("--old/--new revisions bisect commits only: drop --good, --bad, --scan and --releases")

    bar = terminal.Bar(unit="steps")
    steps = [0]

    def progress(message: str) -> None:
        """Each step's line; on a terminal also a bar (steps done, and the search's own estimate of those left)."""
        bar.note(f"… {message}")
        left = _STEPS_LEFT.search(message)
        if left and bar.live:
            steps[0] += 1
            bar(steps[0], steps[0] + int(left["steps"]), "bisect", f"{left['releases']} release(s) left")

    if repo and revisions and old and new:
        commits = api.bisect_commits(list(flags), spec, repo=repo, old=old, new=new,
                                     progress=None if as_json else progress, timeout=timeout,
                                     max_evaluations=max_evaluations)
        click.echo(json.dumps(commits.to_dict(), indent=2, sort_keys=True) if as_json else render.commits_text(commits))
        return
    with bar:
        report = api.bisect(list(flags), spec, old=old, new=new, releases=releases, moves=moves,
                            progress=None if as_json else progress, timeout=timeout, repo=repo, terms=terms, scan=scan,
                            end_names=end_names)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        terminal.show(render.bisect_text(report))
        if report.commits is not None:
            click.echo("\n" + render.commits_text(report.commits))


#: "… 0.5.12: failed; 3 releases left (roughly 2 steps)": what the release search says after each step
_STEPS_LEFT = re.compile(r"(?P<releases>\d+) releases? left \(roughly (?P<steps>\d+) steps?\)")


def bisect_ends(old: str | None, new: str | None, good: str | None, bad: str | None, term_old: str | None,
                 term_new: str | None, fixed: bool) -> tuple[str | None, str | None, tuple[str, str], tuple[str, str]]:
    """The two ends (older first), the terms and the options that named the ends.

    ``--good``/``--bad`` are terms as well as ends: whichever is older is the old end, so
    ``--good 0.5.23 --bad 0.5.9`` finds the first good release after 0.5.9.
    """
    from bisect_spec.runtime import environments

    if (good or bad) and (old or new):
        raise UsageFailure("--good/--bad and --old/--new both name the ends: use one pair")
    if (good or bad) and (term_old or term_new or fixed):
        raise UsageFailure("--good/--bad name the verdicts good and bad already: drop --term-old, --term-new and --fixed")
    if fixed and (term_old or term_new):
        raise UsageFailure("--fixed means --term-old broken --term-new fixed: drop one of them")
    if good or bad:
        if good and bad and environments.version_key(good) > environments.version_key(bad):
            return bad, good, ("bad", "good"), ("--bad", "--good")
        return good, bad, ("good", "bad"), ("--good", "--bad")
    terms = ("broken", "fixed") if fixed else (term_old or "old", term_new or "new")
    if terms[0] == terms[1]:
        raise UsageFailure(f"--term-old and --term-new are both '{terms[0]}': name the two verdicts differently")
    return old, new, terms, ("--old", "--new")

"""``bisect-spec bisect``: the first release (and with ``--repo`` the commit) whose verdict differs; the ends and
terms as git bisect names them. ``env`` (the environments themselves) is in :mod:`bisect_spec.cli.env`."""

from __future__ import annotations

import json
import re
from typing import Any

import click

from bisect_spec import api
from bisect_spec.cli.errors import UsageFailure
from bisect_spec.cli.group import main
from bisect_spec.cli.options import schema_help, spec_from, target_options
from bisect_spec.versions import version_key


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
    if (good or bad) and (old or new):
        raise UsageFailure("--good/--bad and --old/--new both name the ends: use one pair")
    if (good or bad) and (term_old or term_new or fixed):
        raise UsageFailure("--good/--bad name the verdicts good and bad already: drop --term-old, --term-new and --fixed")
    if fixed and (term_old or term_new):
        raise UsageFailure("--fixed means --term-old broken --term-new fixed: drop one of them")
    if good or bad:
        if good and bad and version_key(good) > version_key(bad):
            return bad, good, ("bad", "good"), ("--bad", "--good")
        return good, bad, ("good", "bad"), ("--good", "--bad")
    terms = ("broken", "fixed") if fixed else (term_old or "old", term_new or "new")
    if terms[0] == terms[1]:
        raise UsageFailure(f"--term-old and --term-new are both '{terms[0]}': name the two verdicts differently")
    return old, new, terms, ("--old", "--new")

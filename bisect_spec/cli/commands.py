"""Command line: parse input, call :mod:`bisect_spec.api`, map errors to one line.

Library errors (:class:`~bisect_spec.errors.BisectSpecError`) become
``click.ClickException`` in exactly one place, :meth:`_Group.invoke`; ``--debug`` shows
the traceback instead. Exit codes: 0 ok, 1 runtime error, 2 bad usage, 3 the probed
configuration fails in SGLang (a verdict, not an error).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from bisect_spec import __version__, api
from bisect_spec.cli import terminal
from bisect_spec.errors import BisectSpecError, ReleaseError, ReleaseUnavailable
from bisect_spec.model.flags import env_assignment
from bisect_spec.report import text as render
from bisect_spec.runtime import environments, profiles, sources
from bisect_spec.runtime.session import Session
from bisect_spec.workflows import smoke

F = TypeVar("F", bound=Callable[..., Any])

EXIT_VERDICT_FAILS = 3


class _UsageFailure(click.ClickException):
    """A one-line usage error (exit code 2), without click's usage banner."""

    exit_code = 2


class _InterruptedExit(click.ClickException):
    """Ctrl-C: one line saying what was kept, exit status 130 (128 + SIGINT), as shells expect."""

    exit_code = 130

    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


def _Failure(message: str, exit_code: int) -> click.ClickException:
    """A one-line error with the exit code the library error asked for."""
    if exit_code == 130:
        return _InterruptedExit(message)
    failure = _UsageFailure(message) if exit_code == 2 else click.ClickException(message)
    setattr(failure, "exit_code", exit_code)  # noqa: B010 - an instance's own code (ClassVar in click's stubs)
    return failure


class _Group(click.Group):
    """The one place where library errors turn into CLI errors."""

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(os.environ.get("BISECT_SPEC_DEBUG")) or "--debug" in sys.argv[1:2]
        try:
            return super().invoke(ctx)
        except BisectSpecError as exc:
            if debug:
                traceback.print_exc()
            raise _Failure(str(exc), exc.exit_code) from exc
        except KeyboardInterrupt as exc:
            raise _InterruptedExit("interrupted") from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if debug:
                traceback.print_exc()
            raise _Failure(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1) from exc


def target_options(func: F) -> F:
    """Options shared by every command that evaluates configurations."""
    options = [
        click.option("--sglang", "release", metavar="VER",
                     help="SGLang release (default: newest installed; 'current' = this Python's sglang)."),
        click.option("--model", default=api.DEFAULT_MODEL, show_default=True, metavar="NAME",
                     help=f"Model profile: {', '.join(profiles.model_names())}."),
        click.option("--draft", default=api.DEFAULT_DRAFT, show_default=True, metavar="NAME",
                     help=f"Draft profile: {', '.join(profiles.draft_names())}, or none."),
        click.option("--model-path", type=click.Path(), help="Your own model directory holding config.json."),
        click.option("--draft-path", type=click.Path(), help="Your own draft directory holding config.json."),
        click.option("--hardware", default="auto", show_default=True, metavar="NAME",
                     help=f"auto (real GPUs, else {profiles.DEFAULT_HARDWARE}), none (CPU), real, "
                          f"or: {', '.join(profiles.hardware_names())}."),
        click.option("--gpus", default=profiles.DEFAULT_GPUS, show_default=True, type=int, help="GPUs in the simulated box."),
        click.option("--env", "env", multiple=True, metavar="VAR=VALUE", callback=_env_option,
                     help="An environment variable for every evaluation (repeatable); wins over your own SGLANG_* "
                          "variables, which are taken too."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _env_option(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for value in values:
        assignment = env_assignment(value)
        if assignment is None:
            raise click.BadParameter(f"'{value}' is not VAR=VALUE, e.g. --env SGLANG_ENABLE_SPEC_V2=0")
        pairs.append(assignment)
    return tuple(pairs)


def spec_from(kwargs: dict[str, Any]) -> api.TargetSpec:
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    chosen = {name: ctx is None or ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)
              for name in ("model", "draft")}
    draft = kwargs.pop("draft")
    return api.TargetSpec(release=kwargs.pop("release"), model=kwargs.pop("model"),
                          draft=None if draft == "none" else draft, hardware=kwargs.pop("hardware"),
                          gpus=kwargs.pop("gpus"), model_path=kwargs.pop("model_path"), draft_path=kwargs.pop("draft_path"),
                          env=kwargs.pop("env", ()), model_chosen=chosen["model"], draft_chosen=chosen["draft"])


def announce_hardware(session: Session) -> None:
    """Say once, on stderr, when a default profile stands in for missing GPUs."""
    hardware = session.target.hardware
    if hardware.record and hardware.record.get("auto"):
        mode = session.info.get("hardware", "")
        if str(mode).startswith("simulated"):
            click.echo(f"no GPU here: simulating {hardware.label} "
                       f"({hardware.record.get('gpu_name')}); choose with --hardware", err=True)


def deprecated_option(old: str, new: str, note: str = "", *, kind: Any = None) -> Callable[[F], F]:
    """A hidden option ``old`` kept for scripts written before it became ``new``: it still works,
    says so in one line on stderr, and is refused together with ``new`` (one name per meaning).

    Checked when the command runs, not in an option callback: callbacks run in command-line
    order, so ``new`` may not be parsed yet when ``old`` is.
    """
    import functools

    old_name, new_name = (name.lstrip("-").replace("-", "_") for name in (old, new))

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def checked(*args: Any, **kwargs: Any) -> Any:
            from click.core import ParameterSource

            if kwargs.get(old_name) is not None:
                if click.get_current_context().get_parameter_source(new_name) is ParameterSource.COMMANDLINE:
                    raise _UsageFailure(f"{old} is the old name of {new}: give only {new}")
                click.echo(f"warning: {old} is deprecated: use {new}{f' ({note})' if note else ''}", err=True)
            return func(*args, **kwargs)

        option = click.option(old, type=kind or click.Path(file_okay=False), default=None, hidden=True,
                              help=f"Deprecated: use {new}.")
        return option(checked)  # type: ignore[return-value]

    return decorator


def say_loading(message: str) -> None:
    """Say at once, on stderr, that a worker is starting and what it loads (not seconds of silence)."""
    click.echo(f"{message} ...", err=True)


def sweep_options(func: F) -> F:
    """Options of a sweep (shared by the bare command and ``sweep``)."""
    options = [
        click.option("--strategy", default="default", show_default=True, metavar="NAME|FILE",
                     help="Sweep strategy: a name from strategies/ or a .toml file."),
        click.option("--jobs", "-j", type=int, default=None, help="Parallel workers (default: CPU cores)."),
        click.option("--seed", type=int, default=None, help="Override the strategy's seed."),
        click.option("--budget", "random_budget", type=int, default=None,
                     help="Override the strategy's Hypothesis search budget (evaluations)."),
        click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
                     help="Where runs are stored."),
        click.option("--resume", metavar="RUN", default=None, help="Continue a stopped run where it stopped."),
        click.option("--no-cache", is_flag=True, help="Do not reuse outcomes cached by earlier runs."),
        click.option("--json", "as_json", is_flag=True, help=f"Print the summary as JSON ({_schema('sweep')})."),
        click.option("--shrink/--no-shrink", default=True, show_default=True,
                     help="Shrink every signature found to a 1-minimal reproducer (with reproducer files)."),
        click.option("--fix/--no-fix", default=False, show_default=True,
                     help="Also search the nearest working configuration for every signature (slower)."),
        click.option("--fail-on", type=click.Choice(["new", "any"]), default=None,
                     help="Exit 3 when the sweep finds failures: any, or new ones (not in the previous run "
                          "of the same target in --runs-dir). For CI."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


class _SweepProgress:
    """The sweep's phases on a bar (stderr): done/total, ETA, distinct signatures so far."""

    def __init__(self) -> None:
        self.bar = terminal.Bar()

    def __call__(self, done: int, total: int, signatures: int, phase: str) -> None:
        found = f"{signatures} signature{'s' if signatures != 1 else ''}"
        self.bar(done, total, phase, found, "signatures shrunk" if phase == "shrink" else "configs")

    def finish(self) -> None:
        self.bar.close()


def _run_sweep(as_json: bool, strategy: str, jobs: int | None, seed: int | None, random_budget: int | None,
               runs_dir: str, resume: str | None, no_cache: bool, shrink: bool, fix: bool,
               executor: str = "local", address: str | None = None, fail_on: str | None = None,
               **kwargs: Any) -> api.SweepResult:
    spec = spec_from(kwargs)
    progress = _SweepProgress()
    result = api.sweep(spec, strategy=strategy, jobs=jobs, runs_dir=Path(runs_dir), resume=resume, seed=seed,
                       random_budget=random_budget, use_cache=not no_cache, progress=progress, on_start=announce_hardware,
                       shrink=shrink, fix=fix, executor=executor, address=address)
    progress.finish()
    if result.torn:
        click.echo(f"note: {result.torn} torn journal record was dropped and evaluated again", err=True)
    if result.reused:
        click.echo(f"note: {result.reused} outcomes reused from earlier runs (--no-cache to re-evaluate)", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        terminal.show(render.summary_text(result.summary, width=_terminal_width(), run_path=str(result.run_path)))
        click.echo(f"run {result.run_id} stored in {result.run_path}")
    if fail_on:
        failing = api.failures_for_ci(result.summary, fail_on, runs_dir=Path(runs_dir), run_id=result.run_id)
        if failing:
            click.echo(f"--fail-on {fail_on}: {len(failing)} {'new ' if fail_on == 'new' else ''}failure signature"
                       f"{'' if len(failing) == 1 else 's'}: {', '.join(s['id'] for s in failing)}", err=True)
            sys.exit(EXIT_VERDICT_FAILS)
    return result


def _terminal_width() -> int:
    """Columns to fit tables to: the terminal's, or 120 when output is not a terminal."""
    return terminal.width()


def _schema(name: str, version: int = 1) -> str:
    """Help text naming a ``--json`` output's schema and the JSON Schema file shipped for it."""
    return f"schema bisect-spec/{name}/{version}: bisect_spec/data/schemas/{name}.schema.json"

@click.group(cls=_Group, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bisect-spec")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@target_options
@sweep_options
@click.pass_context
def main(ctx: click.Context, /, debug: bool, **kwargs: Any) -> None:
    """Find the hidden constraints of SGLang's speculative decoding flags, without a GPU.

    Runs SGLang's real argument resolution in-process for a model profile, a draft,
    a hardware profile and an SGLang release. Without a command: sweep the default
    strategy and print the failure signatures it found.

    Example:

        bisect-spec --model kimi-k2.6 --draft eagle3

        bisect-spec probe --model kimi-k2.6 --draft eagle3 -- --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3
    """
    if ctx.invoked_subcommand is None:
        _run_sweep(**kwargs)
    else:
        _forward_group_options(ctx)


def _forward_group_options(ctx: click.Context) -> None:
    """Options given before the command apply to it (``bisect-spec --sglang 0.5.12 probe …``).

    They become the command's defaults, so an option repeated after the command wins. An
    option the command does not take is refused in one line rather than ignored.
    """
    from click.core import ParameterSource

    given = [p for p in ctx.command.params if p.name and p.name != "debug"
             and ctx.get_parameter_source(p.name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)]
    if not given or ctx.invoked_subcommand is None:
        return
    assert isinstance(ctx.command, click.Group)
    command = ctx.command.get_command(ctx, ctx.invoked_subcommand)
    accepted = {p.name for p in command.params} if command is not None else set()
    refused = [p for p in given if p.name not in accepted]
    if refused:
        option = refused[0].opts[0] if refused[0].opts else str(refused[0].name)
        raise click.UsageError(f"{option} does not apply to '{ctx.invoked_subcommand}': drop it, or use it with a "
                               "command that takes it (see --help)")
    defaults = {}
    for param in given:
        value = ctx.params[str(param.name)]
        if param.name == "env":
            value = tuple(f"{k}={v}" for k, v in value)  # back to what was typed: the command parses it again
        defaults[str(param.name)] = value
    ctx.default_map = {**(ctx.default_map or {}), ctx.invoked_subcommand: defaults}


@main.command()
@target_options
@sweep_options
def sweep(**kwargs: Any) -> api.SweepResult:
    """Sweep a strategy's flag space; journal every result; summarise signatures.

    A covering array (2-way over all flags, 3-way over the core speculative flags)
    runs in parallel, then branch rows, masking-aware rounds, a Hypothesis-driven search
    (--budget N; off in the default strategy) and peeling. kill -9 loses nothing already
    reported: continue with --resume RUN.

    Example:

        bisect-spec sweep --sglang 0.5.23 --model kimi-k2.6 --draft eagle3 --strategy quick --jobs 2

        bisect-spec sweep --sglang 0.5.23 --strategy nightly --executor ray --address auto
    """
    return _run_sweep(**kwargs)


@main.group()
def strategies() -> None:
    """Sweep strategies: the flag spaces --strategy names.

    Example:

        bisect-spec strategies list
    """


@strategies.command("list")
@click.option("--json", "as_json", is_flag=True, help=f"Machine-readable list ({_schema('strategies')}).")
def strategies_list(as_json: bool) -> None:
    """List the shipped strategies with what each sweeps (a .toml file of your own works too).

    Example:

        bisect-spec strategies list --json
    """
    from bisect_spec.search.plan import load_strategy, strategy_names

    rows = [load_strategy(name) for name in strategy_names()]
    if as_json:
        click.echo(json.dumps({"schema": "bisect-spec/strategies/1", "strategies": [
            {"name": r.name, "description": r.description, "strength": r.strength, "core_strength": r.core_strength,
             "random_budget": r.random_budget} for r in rows]}, indent=2, sort_keys=True))
        return
    click.echo(render.table(["strategy", "what it sweeps", "random budget"],
                            [[r.name, r.description, r.random_budget] for r in rows], max_width=100))


@main.group()
def runs() -> None:
    """Read stored runs.

    Example:

        bisect-spec runs list
    """


@runs.command("list")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Where runs are stored.")
@click.option("--json", "as_json", is_flag=True, help=f"Machine-readable list ({_schema('runs')}).")
def runs_list(runs_dir: str, as_json: bool) -> None:
    """List runs: target, strategy, progress, signatures.

    Example:

        bisect-spec runs list --json
    """
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
@click.option("--json", "as_json", is_flag=True, help=f"The stored run as JSON ({_schema('run-show')}).")
def runs_show(run: str, runs_dir: str, as_json: bool) -> None:
    """Show a stored run's summary (or its progress if it did not finish).

    RUN is a run id, latest (the newest run), or the unique beginning of an id or of
    its last part (20261130-17, ab12).

    Example:

        bisect-spec runs show latest

        bisect-spec runs show 20261130-171500-kimi-k2.6-0.5.23-ab12
    """
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
    run_path = Path(run) if Path(run).is_dir() else Path(runs_dir) / run
    terminal.show(render.summary_text(summary, width=_terminal_width(), run_path=str(run_path)))


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON record ({_schema('probe')}).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds before an evaluation counts as hung.")
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
def probe(as_json: bool, timeout: float, flags: tuple[str, ...], **kwargs: Any) -> None:
    """Resolve one configuration and show the verdict, signature and failing source.

    FLAGS are SGLang flags after --, or a whole pasted launch command
    (python -m sglang.launch_server ..., sglang serve ..., ExecStart=...).
    Exit status: 0 passes, 3 fails in SGLang, 1/2 errors (1 also for a fault of
    bisect-spec's own emulation, which is never a verdict).

    Example:

        bisect-spec probe --sglang 0.5.23 --model kimi-k2.6 --draft eagle3 -- \\
            --tp 8 --speculative-algorithm EAGLE3 --speculative-num-steps 1 --speculative-num-draft-tokens 3
    """
    spec = spec_from(kwargs)
    result = api.probe(list(flags), spec, on_start=announce_hardware, timeout=timeout, notify=say_loading)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        for note in result.notes:
            click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
        terminal.show(render.probe_text(result.heading, result.config, result.outcome))
    if result.outcome.tool_fault is not None:  # not a verdict: an error of bisect-spec's
        sys.exit(1)
    if not result.outcome.passed:
        sys.exit(EXIT_VERDICT_FAILS)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON ({_schema('shrink')}).")
@click.option("--max-evaluations", type=int, default=2000, show_default=True, help="Evaluation budget.")
@click.option("--max-seconds", type=float, default=600.0, show_default=True, help="Time budget.")
@click.option("--fix/--no-fix", default=True, show_default=True,
              help="Also search the nearest working configuration.")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Where runs are stored: reproducers go under RUNS_DIR/shrink-<signature>.")
@deprecated_option("--out", "--runs-dir", "reproducers then go under RUNS_DIR/shrink-<signature>")
@click.option("--bisect", "bisect_releases", is_flag=True,
              help="Also bisect the minimal reproducer across the installed releases (first bad release in bug_report.md).")
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
def shrink(as_json: bool, max_evaluations: int, max_seconds: float, fix: bool, runs_dir: str, out: str | None,
           bisect_releases: bool, flags: tuple[str, ...], **kwargs: Any) -> api.ShrinkReport:
    """Shrink a failing configuration to a 1-minimal reproducer, explain it, and find fixes.

    FLAGS may be a whole pasted launch command (python -m sglang.launch_server ...,
    sglang serve ..., a systemd ExecStart= line). Model and draft paths that do not
    exist here are replaced by the --model/--draft profiles. Writes launch.sh, repro.py,
    test_regression.py and bug_report.md (SGLang's bug-report form, filled in; it says whether
    the newest installed release still fails, and with --bisect the first bad release).

    Example:

        bisect-spec shrink --sglang 0.5.23 --model kimi-k2.6 --draft eagle3 -- \\
            --tp 8 --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3 --mem-fraction-static 0.85
    """
    from bisect_spec.reduce.shrink import Budget

    spec = spec_from(kwargs)
    with terminal.Counter(f"shrinking (budget {max_evaluations} evaluations)") as counter:
        report = api.shrink(list(flags), spec, budget=Budget(max_evaluations, max_seconds), fix=fix,
                            out_dir=Path(out) if out else None, runs_dir=Path(runs_dir), on_start=announce_hardware,
                            bisect=bisect_releases, progress=None if as_json else counter, notify=say_loading)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        return report
    for note in report.notes:
        click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
    terminal.show(render.shrink_text(report))
    return report


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
    """
    if not releases and not all_releases and not newer:
        raise click.UsageError("name releases (0.5.23, 0.4.6..0.5.3) or use --all")
    chosen = environments.select_releases(list(releases), all_releases=all_releases)
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

    found = smoke.recorded(release)
    return found is None or found.digest != evaluation_digest()


@env.command("verify")
@click.argument("releases", nargs=-1)
@click.option("--all", "all_releases", is_flag=True, help="Every installed release.")
@click.option("--json", "as_json", is_flag=True, help=f"Every case of every release ({_schema('smoke')}).")
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
@click.option("--json", "as_json", is_flag=True, help=f"Machine-readable list ({_schema('envs', 2)}).")
def env_list(as_json: bool) -> None:
    """List installed releases, releases with recorded pins, and unavailable ones with why.

    Example:

        bisect-spec env list --json
    """
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
    from bisect_spec.runtime import worker

    interpreter = sources.environment_for(release).interpreter()
    argv = list(command[1:] if command[:1] == ("--",) else command)
    code = worker.run_with_python(argv, interpreter)
    sys.exit(code)


# -- bisect across releases ------------------------------------------------------------

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
              help=f"Print the documented JSON ({_schema('bisect')}; with revisions "
                   f"{_schema('commits')}).")
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
    spec = spec_from(kwargs)
    releases = [r.strip() for r in release_list.split(",") if r.strip()] if release_list else None
    old, new, terms, end_names = _bisect_ends(old, new, good, bad, term_old, term_new, fixed)
    revisions = bool(repo) and any(v is not None and not api.is_release_name(v) for v in (old, new))
    if max_evaluations is not None and not revisions:
        raise _UsageFailure("--max-evaluations bisects the commits between two revisions: add --repo PATH "
                            "--old REV --new REV")
    if revisions and (old is None or new is None or not all(v is not None and not api.is_release_name(v)
                                                             for v in (old, new))):
        raise _UsageFailure("name both ends of the commits to bisect as revisions: --old REV --new REV (release "
                            "numbers such as 0.5.9 bisect releases first)")
    if revisions and (release_list or scan or good or bad):
        raise _UsageFailure("--old/--new revisions bisect commits only: drop --good, --bad, --scan and --releases")

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


def _bisect_ends(old: str | None, new: str | None, good: str | None, bad: str | None, term_old: str | None,
                 term_new: str | None, fixed: bool) -> tuple[str | None, str | None, tuple[str, str], tuple[str, str]]:
    """The two ends (older first), the terms and the options that named the ends.

    ``--good``/``--bad`` are terms as well as ends: whichever is older is the old end, so
    ``--good 0.5.23 --bad 0.5.9`` finds the first good release after 0.5.9.
    """
    if (good or bad) and (old or new):
        raise _UsageFailure("--good/--bad and --old/--new both name the ends: use one pair")
    if (good or bad) and (term_old or term_new or fixed):
        raise _UsageFailure("--good/--bad name the verdicts good and bad already: drop --term-old, --term-new and --fixed")
    if fixed and (term_old or term_new):
        raise _UsageFailure("--fixed means --term-old broken --term-new fixed: drop one of them")
    if good or bad:
        if good and bad and environments.version_key(good) > environments.version_key(bad):
            return bad, good, ("bad", "good"), ("--bad", "--good")
        return good, bad, ("good", "bad"), ("--good", "--bad")
    terms = ("broken", "fixed") if fixed else (term_old or "old", term_new or "new")
    if terms[0] == terms[1]:
        raise _UsageFailure(f"--term-old and --term-new are both '{terms[0]}': name the two verdicts differently")
    return old, new, terms, ("--old", "--new")


# -- nightly compatibility matrix --------------------------------------------------------

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
@click.option("--jobs", "-j", type=int, default=None, help="Parallel workers per cell (default: CPU cores).")
@click.option("--no-install", is_flag=True, help="Skip cells whose release is not installed instead of building it.")
@click.option("--json", "as_json", is_flag=True, help=f"Print nightly.json ({_schema('nightly')}).")
def nightly(matrix_file: str, runs_dir: str, out: str | None, baseline: str, resume: str | None, jobs: int | None,
            no_install: bool, as_json: bool, executor: str = "local", address: str | None = None) -> None:
    """Run the compatibility matrix and compare it with the previous nightly.

    Each cell (release × model × draft × hardware) is a sweep with the matrix's
    strategy. Signatures are matched to the baseline by cross-release key: new ones
    are regressions, vanished ones are fixes, moved or reworded ones are listed.
    Exit status: 0 no regression, 3 regressions, 1/2 errors.

    Example:

        bisect-spec nightly --matrix examples/nightly-matrix.toml --runs-dir nightlies

        bisect-spec nightly --matrix examples/nightly-matrix.toml --executor ray --address auto
    """
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
    if data["regressions"]:
        sys.exit(EXIT_REGRESSION)


# -- report (reports of a sweep run or a nightly matrix) --------------------------------------------------


@main.command("report")
@click.argument("target")
@click.option("--format", "fmt", type=click.Choice(["md", "json", "junit", "html"]), default="md", show_default=True,
              help=f"md: Markdown for PRs and issues; json: {_schema('report')}; junit: JUnit XML for CI; "
                   "html: one self-contained page with pictures.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the report to FILE (default: print it).")
@click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
              help="Where run ids are looked up.")
def report(target: str, fmt: str, output: str | None, runs_dir: str) -> None:
    """Report a sweep run or a nightly matrix as Markdown, JSON, JUnit XML or HTML.

    TARGET is a run id (looked up in --runs-dir), a run directory, a nightly directory
    or its nightly.json. For a nightly, the report leads with the regressions, fixes and
    changes against its baseline; JUnit marks regressions as failures and failures the
    baseline had already as skipped (type "known").

    Example:

        bisect-spec report nightlies/20261130-0215-ab12 --format html -o nightly.html

        bisect-spec report 20261130-171500-kimi-k2.6-0.5.23-ab12 --format junit -o junit.xml
    """
    text = api.report(target, fmt, runs_dir=Path(runs_dir))
    if output is None:
        click.echo(text, nl=False)
        return
    from bisect_spec.errors import StoreError

    try:
        Path(output).write_text(text)
    except OSError as exc:
        raise StoreError(f"cannot write {output}: {exc.strerror or exc}") from exc
    click.echo(f"{fmt} report written to {output}", err=True)


# -- executors: where evaluations run (--executor local|ray, --address) ---------------------


def executor_options(func: F) -> F:
    """``--executor`` and ``--address``, for every command that sweeps (``sweep``, the bare command).

    Works as a decorator under ``@main.command()`` and on an already defined command
    (``executor_options(sweep)``); the command passes ``executor`` and ``address`` to the API.
    """
    from bisect_spec.runtime.executor import EXECUTORS, LOCAL

    options = [
        click.option("--executor", type=click.Choice(EXECUTORS), default=LOCAL, show_default=True,
                     help="Where evaluations run: worker processes here, or Ray actors on a Ray cluster "
                          "(pip install 'bisect-spec[ray]'); results are stored the same way."),
        click.option("--address", metavar="ADDR", default=None,
                     help="Ray cluster for --executor ray: HOST:PORT, ray://HOST:PORT, or auto (the cluster this "
                          "machine belongs to). Default: start a local Ray instance."),
    ]
    for option in (options if isinstance(func, click.Command) else reversed(options)):
        func = option(func)
    return func


executor_options(main)
executor_options(sweep)
executor_options(nightly)


# -- real launches (launch, crosscheck, --launch on shrink and sweep) ----------------------


def _launch_options(func: F) -> F:
    options = [
        click.option("--launch-timeout", default=600.0, show_default=True,
                     help="Seconds a launch may take to become ready before it counts as timed-out."),
        click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
                     help="Where launch logs and reports are stored."),
        click.option("--launch-without-gpu", is_flag=True,
                     help="Launch even though this machine has no GPU (SGLang then stops at device detection)."),
        click.option("--server-command", default=None, metavar="CMD",
                     help="For testing: a command standing in for 'python -m sglang.launch_server' "
                          "({python} = the environment's interpreter); also $BISECT_SPEC_SERVER_COMMAND."),
    ]
    for option in reversed(options):
        func = option(func)
    # --timeout is the evaluation's time limit in probe and bisect: a launch's is --launch-timeout everywhere
    return deprecated_option("--timeout", "--launch-timeout", kind=float)(func)


def _server_command(value: str | None) -> list[str] | None:
    import shlex

    return shlex.split(value) if value else None


def _launch_header(target: dict[str, Any], mode: str) -> str:
    draft = f" + {target['draft']}" if target.get("draft") else ""
    return f"SGLang {target['release']} · {target['model']}{draft} · {mode}"


@main.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@_launch_options
@click.option("--repeat", default=1, show_default=True, help="Launch this many times; differing ends are reported as flaky.")
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON ({_schema('launch')}).")
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
                        allow_without_gpu=launch_without_gpu, server_command=_server_command(server_command))
    data = report.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        for note in report.notes:
            click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
        click.echo(_launch_header(data["target"], report.plan.mode))
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


def _crosscheck_table(report: api.CrosscheckReport) -> str:
    def shown(argv: list[str]) -> str:  # the draft path is implied by the target
        text = " ".join(argv).replace("--speculative-draft-model-path @draft", "").replace("  ", " ").strip()
        return text if len(text) <= 70 else text[:67] + "..."

    rows = [[r["label"], shown(r["config"]), r["in_process"], r["launch"],
             "yes" if r["agree"] else "NO: " + r["kind"], r["note"][:50]] for r in report.rows]
    text = render.table(["config", "flags", "in-process", "launch", "agree", "note"], rows)
    return f"{text}\n{len(report.disagreements)} disagreement(s) of {len(report.rows)}; stored in {report.path}"


@main.command("crosscheck")
@target_options
@_launch_options
@click.option("--passing", default=3, show_default=True, help="With a run id: how many passing configurations to launch too.")
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON ({_schema('crosscheck')}).")
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
                            allow_without_gpu=launch_without_gpu, server_command=_server_command(server_command))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        for note in report.notes:
            click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
        click.echo(_crosscheck_table(report))
    if report.disagreements:
        sys.exit(EXIT_VERDICT_FAILS)


@main.group()
def workers() -> None:
    """Warm evaluation workers: kept up between commands, stopped when idle.

    probe and shrink start one per target (release, hardware box, GPUs) and leave it up
    for the next command, which then answers at once; it stops by itself after
    BISECT_SPEC_WORKER_IDLE seconds unused (default 300; 0 = never keep one).

    Example:

        bisect-spec workers list

        bisect-spec workers stop --all
    """


@workers.command("list")
@click.option("--json", "as_json", is_flag=True, help=f"The list as JSON ({_schema('workers')}).")
def workers_list(as_json: bool) -> None:
    """List the warm workers of this BISECT_SPEC_HOME: target, pid, idle time, evaluations served, memory.

    Example:

        bisect-spec workers list
    """
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


def _confirm_by_launch(command: click.Command, pick: Callable[[Any], list[tuple[str, Any]]]) -> None:
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
            click.echo(_crosscheck_table(report))
        return result

    command.callback = callback


def _shrink_launches(report: api.ShrinkReport) -> list[tuple[str, Any]]:
    from bisect_spec.model.flags import Config

    chosen: list[tuple[str, Any]] = [("minimal reproducer", report.result.minimal)]
    fixes = (report.fixes or {}).get("fixes") or []
    if fixes:
        chosen.append(("nearest fix", Config.from_argv(fixes[0]["argv"])))
    return chosen


def _sweep_launches(result: api.SweepResult) -> list[tuple[str, Any]]:
    return api.selected_from_summary(result.summary, [o.to_dict() for o in result.outcomes], passing=2)


_confirm_by_launch(shrink, _shrink_launches)
_confirm_by_launch(sweep, _sweep_launches)


def run() -> None:
    """Console-script entry point."""
    main(prog_name="bisect-spec")

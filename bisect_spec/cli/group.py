"""The ``bisect-spec`` group: without a command, the main job (a sweep of the default strategy);
options given before a command apply to it; ``sweep``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from bisect_spec import __version__, api
from bisect_spec.cli.errors import EXIT_VERDICT_FAILS, MappedGroup
from bisect_spec.cli.options import announce_hardware, spec_from, sweep_options, target_options, terminal_width


class SweepProgress:
    """The sweep's phases on a bar (stderr): done/total, ETA, distinct signatures so far."""

    def __init__(self) -> None:
        from bisect_spec.cli import terminal

        self.bar = terminal.Bar()

    def __call__(self, done: int, total: int, signatures: int, phase: str) -> None:
        found = f"{signatures} signature{'s' if signatures != 1 else ''}"
        self.bar(done, total, phase, found, "signatures shrunk" if phase == "shrink" else "configs")

    def finish(self) -> None:
        self.bar.close()


def run_sweep(as_json: bool, strategy: str, jobs: int | None, seed: int | None, random_budget: int | None,
               runs_dir: str, resume: str | None, no_cache: bool, shrink: bool, fix: bool,
               executor: str = "local", address: str | None = None, fail_on: str | None = None,
               algorithms: str = "draft", **kwargs: Any) -> api.SweepResult:
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render

    spec = spec_from(kwargs)
    progress = SweepProgress()
    result = api.sweep(spec, strategy=strategy, jobs=jobs, runs_dir=Path(runs_dir), resume=resume, seed=seed,
                       random_budget=random_budget, use_cache=not no_cache, progress=progress, on_start=announce_hardware,
                       shrink=shrink, fix=fix, executor=executor, address=address,
                       notify=lambda line: click.echo(line, err=True), algorithms=algorithms)
    progress.finish()
    if result.torn:
        click.echo(f"note: {result.torn} torn journal record was dropped and evaluated again", err=True)
    if result.reused:
        click.echo(f"note: {result.reused} outcomes reused from earlier runs (--no-cache to re-evaluate)", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        terminal.show(render.summary_text(result.summary, width=terminal_width(), run_path=str(result.run_path)))
        click.echo(f"run {result.run_id} stored in {result.run_path}")
    if fail_on:
        failing = api.failures_for_ci(result.summary, fail_on, runs_dir=Path(runs_dir), run_id=result.run_id)
        if failing:
            click.echo(f"--fail-on {fail_on}: {len(failing)} {'new ' if fail_on == 'new' else ''}failure signature"
                       f"{'' if len(failing) == 1 else 's'}: {', '.join(s['id'] for s in failing)}", err=True)
            sys.exit(EXIT_VERDICT_FAILS)
    return result


@click.group(cls=MappedGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bisect-spec")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@target_options
@sweep_options
@click.pass_context
def main(ctx: click.Context, /, debug: bool, **kwargs: Any) -> None:
    """Find the hidden constraints of SGLang's speculative decoding flags, without a GPU.

    Runs SGLang's real argument resolution in-process for a model profile, a draft,
    a hardware profile and an SGLang release. Without a command but with options
    (--model, --draft, ...): sweep the default strategy and print the failure
    signatures it found. With nothing at all: which command answers which question.

    Example:

        bisect-spec --model kimi-k2.6 --draft eagle3

        bisect-spec probe --model kimi-k2.6 --draft eagle3 -- --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3
    """
    if ctx.invoked_subcommand is None:
        from click.core import ParameterSource

        typed = [p.name for p in ctx.command.params if p.name and ctx.get_parameter_source(p.name) not in (
            ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)]
        if not typed:  # a bare `bisect-spec` is a question about the tool: which command answers what
            click.echo(GUIDE)
            return
        run_sweep(**kwargs)
    else:
        _forward_group_options(ctx)


#: What a bare ``bisect-spec`` prints: which command answers which question, and how to start the main job.
GUIDE = """\
bisect-spec: the hidden constraints of SGLang's speculative-decoding flags, found without a GPU.

Which command answers which question:
  Will my launch command start, and if not, what to change?  bisect-spec probe -- python -m sglang.launch_server ...
  What is the smallest failing part, and why?                bisect-spec shrink -- FLAGS
  What fails for my model, draft and box?                    bisect-spec --model kimi-k2.6 --draft eagle3
  Since which release (or commit) does it fail?              bisect-spec bisect -- FLAGS
  What does a change to SGLang do to people's configs?       bisect-spec diff OLD NEW
  A compatibility matrix every night                         bisect-spec nightly --matrix FILE
  Does a real server agree?                                  bisect-spec launch -- FLAGS
  Which releases can I evaluate?                             bisect-spec env list

Start the main job (a sweep of the default strategy, a few minutes on 2 cores; kimi-k2.6 with an EAGLE3 draft
on a simulated 8x RTX PRO 6000 box, the newest installed release):

  bisect-spec --model kimi-k2.6 --draft eagle3

Every command has --help with an example: bisect-spec --help, bisect-spec COMMAND --help."""


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
    return run_sweep(**kwargs)

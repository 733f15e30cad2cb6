"""Commands that evaluate the user's own configuration: ``probe`` and ``shrink``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from bisect_spec import api
from bisect_spec.cli.errors import EXIT_VERDICT_FAILS
from bisect_spec.cli.group import main
from bisect_spec.cli.options import announce_hardware, deprecated_option, say_loading, schema_help, spec_from, target_options


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON record ({schema_help('probe')}).")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds before an evaluation counts as hung.")
@click.option("--fix/--no-fix", default=True, show_default=True,
              help="On a failure, also find the nearest configuration that passes (verified) and print it as a "
                   "command.")
@click.option("--no-cache", is_flag=True,
              help="Evaluate the nearest configuration's candidates again, not from outcomes cached by earlier runs.")
@click.argument("flags", nargs=-1, type=click.UNPROCESSED)
def probe(as_json: bool, timeout: float, fix: bool, no_cache: bool, flags: tuple[str, ...], **kwargs: Any) -> None:
    """Resolve one configuration and show the verdict, signature and failing source.

    FLAGS are SGLang flags after --, or a whole pasted launch command
    (python -m sglang.launch_server ..., sglang serve ..., ExecStart=...).
    On a failure it says whether SGLang crashed (likely a bug) or refused the
    configuration, the nearest configuration that passes (verified) as a
    command, and the shrink command for more. Exit status: 0 passes, 3 fails
    in SGLang, 1/2 errors (1 also for a fault of bisect-spec's own emulation,
    which is never a verdict).

    The example fails on purpose: the seed's TypeError
    ('>' not supported between instances of 'NoneType' and 'int'), and the
    configuration one edit away that passes.

    Example:

        bisect-spec probe --sglang 0.5.23 --model kimi-k2.6 --draft eagle3 -- \\
            --tp 8 --speculative-algorithm EAGLE3 --speculative-num-steps 1 --speculative-num-draft-tokens 3
    """
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render

    spec = spec_from(kwargs)
    result = api.probe(list(flags), spec, on_start=announce_hardware, timeout=timeout, notify=say_loading, fix=fix,
                       use_cache=not no_cache)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        for note in result.notes:
            click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
        terminal.show(render.probe_text(result.heading, result.config, result.outcome))
        fixed = result.next_step
        after = render.next_step_text(
            result.failure_kind, fixed,
            command_for("probe", result.spec or spec, result, fixed["argv"] if fixed else []),
            command_for("shrink", result.spec or spec, result, result.config.argv()), searched=fix,
            without_fix="give it a draft: --speculative-draft-model-path PATH (or --draft NAME); no nearer change "
                        "passes" if result.missing_draft else None)
        if after:
            terminal.show(after)
    if result.outcome.tool_fault is not None:  # not a verdict: an error of bisect-spec's
        sys.exit(1)
    if not result.outcome.passed:
        sys.exit(EXIT_VERDICT_FAILS)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@target_options
@click.option("--json", "as_json", is_flag=True, help=f"Print the documented JSON ({schema_help('shrink')}).")
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
    from bisect_spec.cli import terminal
    from bisect_spec.report import text as render

    spec = spec_from(kwargs)
    with terminal.Counter(f"shrinking (budget {max_evaluations} evaluations)") as counter:
        report = api.shrink(list(flags), spec, budget=api.Budget(max_evaluations, max_seconds), fix=fix,
                            out_dir=Path(out) if out else None, runs_dir=Path(runs_dir), on_start=announce_hardware,
                            bisect=bisect_releases, progress=None if as_json else counter, notify=say_loading)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        return report
    for note in report.notes:
        click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
    terminal.show(render.shrink_text(report))
    return report


def command_for(command: str, spec: api.TargetSpec, result: api.ProbeResult, argv: list[str]) -> str:
    """``bisect-spec COMMAND`` on the probe's target with ``argv`` (placeholders the command adds back dropped),
    ready to paste."""
    import shlex

    target = result.target
    config = api.Config.from_argv(argv)

    def names_draft(c: api.Config) -> bool:
        return any(value == (api.DRAFT_TOKEN,) for _, value in c.items)

    # an edit that removes the draft's path: the command names no draft (one named would be added back)
    removes_draft = names_draft(result.config) and not names_draft(config)
    words = ["bisect-spec", command, "--sglang", target.release]
    words += ["--model-path", spec.model_path] if spec.model_path else ["--model", spec.model]
    words += (["--draft", "none"] if removes_draft else
              ["--draft-path", spec.draft_path] if spec.draft_path else
              ["--draft", spec.draft] if spec.draft else ["--draft", "none"])
    if spec.hardware != "auto":
        words += ["--hardware", spec.hardware]
    if spec.gpus != api.DEFAULT_GPUS:
        words += ["--gpus", str(spec.gpus)]
    for name, value in spec.env:
        words += ["--env", f"{name}={value}"]
    kept = config.without(*[flag for flag, value in config.items if value in ((api.DRAFT_TOKEN,), (api.MODEL_TOKEN,))])
    return shlex.join([*words, "--", *kept.argv()])

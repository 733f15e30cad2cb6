"""Options shared by several commands: the target, a sweep's, the executors', real launches'; and the
small helpers they use (the target spec from the options, the schema a ``--json`` names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bisect_spec import api
from bisect_spec.cli.errors import UsageFailure

if TYPE_CHECKING:
    from bisect_spec.api import Session

F = TypeVar("F", bound=Callable[..., Any])


def target_options(func: F) -> F:
    """Options shared by every command that evaluates configurations."""
    options = [
        click.option("--sglang", "release", metavar="VER",
                     help="SGLang release (default: newest installed; 'current' = this Python's sglang)."),
        click.option("--model", default=api.DEFAULT_MODEL, show_default=True, metavar="NAME",
                     help=f"Model profile: {', '.join(api.model_names())}."),
        click.option("--draft", default=api.DEFAULT_DRAFT, show_default=True, metavar="NAME",
                     help=f"Draft profile: {', '.join(api.draft_names())}, or none."),
        click.option("--model-path", type=click.Path(), help="Your own model directory holding config.json."),
        click.option("--draft-path", type=click.Path(), help="Your own draft directory holding config.json."),
        click.option("--hardware", default="auto", show_default=True, metavar="NAME",
                     help=f"auto (real GPUs, else {api.DEFAULT_HARDWARE}), none (CPU), real, "
                          f"or: {', '.join(api.hardware_names())}."),
        click.option("--gpus", default=api.DEFAULT_GPUS, show_default=True, type=int, help="GPUs in the simulated box."),
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
        assignment = api.env_assignment(value)
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
                    raise UsageFailure(f"{old} is the old name of {new}: give only {new}")
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
        click.option("--jobs", "-j", type=int, default=None,
                     help="Parallel workers (default: $BISECT_SPEC_JOBS, else CPU cores)."),
        click.option("--seed", type=int, default=None, help="Override the strategy's seed."),
        click.option("--algorithms", default="draft", show_default=True, metavar="draft|all|NAMES",
                     help="The --speculative-algorithm values swept besides none: the ones the named --draft "
                          "serves, every one the release accepts, or a list such as EAGLE3,NGRAM."),
        click.option("--budget", "random_budget", type=int, default=None,
                     help="Override the strategy's Hypothesis search budget (evaluations)."),
        click.option("--runs-dir", type=click.Path(file_okay=False), default="runs", show_default=True,
                     help="Where runs are stored."),
        click.option("--resume", metavar="RUN", default=None, help="Continue a stopped run where it stopped."),
        click.option("--no-cache", is_flag=True, help="Do not reuse outcomes cached by earlier runs."),
        click.option("--json", "as_json", is_flag=True, help=f"Print the summary as JSON ({schema_help('sweep')})."),
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


def terminal_width() -> int:
    """Columns to fit tables to: the terminal's, or 120 when output is not a terminal."""
    from bisect_spec.cli import terminal

    return terminal.width()


def schema_help(name: str, version: int = 1) -> str:
    """Help text naming a ``--json`` output's schema and the JSON Schema file shipped for it."""
    return f"schema bisect-spec/{name}/{version}: bisect_spec/data/schemas/{name}.schema.json"


def executor_options(func: F) -> F:
    """``--executor`` and ``--address``, for every command that sweeps (``sweep``, the bare command).

    Works as a decorator under ``@main.command()`` and on an already defined command
    (``executor_options(sweep)``); the command passes ``executor`` and ``address`` to the API.
    """
    options = [
        click.option("--executor", type=click.Choice(api.EXECUTORS), default=api.LOCAL_EXECUTOR, show_default=True,
                     help="Where evaluations run: worker processes here, or Ray actors on a Ray cluster "
                          "(pip install 'bisect-spec[ray]'); results are stored the same way."),
        click.option("--address", metavar="ADDR", default=None,
                     help="Ray cluster for --executor ray: HOST:PORT, ray://HOST:PORT, or auto (the cluster this "
                          "machine belongs to). Default: start a local Ray instance."),
    ]
    for option in (options if isinstance(func, click.Command) else reversed(options)):
        func = option(func)
    return func


def launch_options(func: F) -> F:
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


def split_server_command(value: str | None) -> list[str] | None:
    import shlex

    return shlex.split(value) if value else None


def filter_options(func: F) -> F:
    """``--algorithm``, ``--flag`` and ``--grep``: which failure signatures a summary or report shows."""
    options = [
        click.option("--algorithm", metavar="NAME[,NAME]", default=None,
                     help="Only failures a configuration with this speculative algorithm hit (none: without one)."),
        click.option("--flag", metavar="FLAG", default=None, help="Only failures whose reproducer sets FLAG."),
        click.option("--grep", metavar="REGEX", default=None,
                     help="Only failures whose message, statement or location matches (case-insensitive)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func

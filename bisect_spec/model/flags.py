"""Configurations: canonical, hashable sets of SGLang flags, and pasted launch commands.

A :class:`Config` is what a user would write after ``python -m sglang.launch_server``
minus the model: ``{"--speculative-algorithm": ("EAGLE3",), "--disable-cuda-graph": ()}``.
It is frozen and canonically ordered (by flag name), so ``key()`` identifies it across
runs and processes; ``argv()`` renders it back.

Environment variables are configuration too (SGLang reads dozens of ``SGLANG_*`` variables
while resolving and checking arguments). They are items of the same :class:`Config`, named
without dashes (``("SGLANG_ENABLE_SPEC_V2", ("0",))``), so that keys, caches, shrinking and
reproducers cover them with no second mechanism. ``argv()`` renders them first, as a shell
prefix would be (``SGLANG_ENABLE_SPEC_V2=0 --speculative-algorithm EAGLE``), and
``from_argv`` reads them back; ``flag_argv()`` and ``env()`` split the two.

:func:`parse_command` accepts what people paste: a bare flag list, ``python -m
sglang.launch_server ...``, ``sglang serve ...``, a systemd ``ExecStart=`` line, with
``\\`` line continuations and ``VAR=value`` prefixes.

Pure: no I/O, no processes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bisect_spec.errors import UsageError

#: Flags that name the model or draft location (replaced by profiles when pasted).
MODEL_FLAGS = ("--model-path", "--model")
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft")
#: A file the user supplies (``--speculative-ngram-external-corpus-path @path``): SGLang's checks only ask
#: whether it is given. Evaluations get an empty file; launch commands a shell variable (:func:`path_variable`).
PATH_TOKEN = "@path"


def path_variable(flag: str) -> str:
    """The shell variable a launch command reads a placeholder path from: ``--uno-lora-path`` ->
    ``UNO_LORA_PATH``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", flag.lstrip("-")).upper()


def placeholder_paths(config: Config) -> list[str]:
    """The flags of ``config`` given as ``@path`` (a file the user supplies), in order."""
    return [flag for flag, value in config.items if value == (PATH_TOKEN,)]


Value = tuple[str, ...]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.S)


#: Environment variables that are configuration for SGLang: taken from the caller's environment
#: into every evaluation, recorded with it, and part of the cache key.
CONFIG_ENV = re.compile(r"^(SGLANG_|SGL_)")


def inherited_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's configuration variables (``SGLANG_*`` and kin: :data:`CONFIG_ENV`)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if CONFIG_ENV.match(k)}


def is_env(name: str) -> bool:
    """``name`` is an environment variable item, not an SGLang flag."""
    return not name.startswith("-") and bool(_ENV_NAME.match(name))


def env_assignment(token: str) -> tuple[str, str] | None:
    """``("VAR", "value")`` for a ``VAR=value`` token, else None."""
    match = _ENV_ASSIGNMENT.match(token)
    return (match["name"], match["value"]) if match else None


@dataclass(frozen=True)
class Config:
    """A canonical set of flags; ``()`` is the value of a boolean switch."""

    items: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.items))
        if ordered != self.items:
            object.__setattr__(self, "items", ordered)

    @classmethod
    def of(cls, mapping: Mapping[str, Value | str | None]) -> Config:
        """Build from ``{"--flag": "value" | ("v1", "v2") | () | None}`` (None/() = switch)."""
        items: list[tuple[str, Value]] = []
        for flag, value in mapping.items():
            if value is None:
                items.append((flag, ()))
            elif isinstance(value, str):
                items.append((flag, (value,)))
            else:
                items.append((flag, tuple(value)))
        return cls(tuple(items))

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> Config:
        """Parse a flag list; ``--flag=value`` and multi-value flags are understood.

        :raises UsageError: a stray positional value or a flag given twice.
        """
        items: dict[str, list[str]] = {}
        current: str | None = None
        leading = True  # every token so far names an environment variable (kept as it goes: linear, not quadratic)
        for token in argv:
            leading = leading and is_env(token.split("=", 1)[0])
            assignment = env_assignment(token) if leading else None
            if assignment is not None:  # leading VAR=value tokens: environment
                if assignment[0] in items:
                    raise UsageError(f"environment variable {assignment[0]} is given twice; keep one")
                items[assignment[0]] = [assignment[1]]
            elif token.startswith("--") and len(token) > 2:
                flag, eq, inline = token.partition("=")
                if flag in items:
                    raise UsageError(f"flag {flag} is given twice; keep one")
                items[flag] = [inline] if eq else []
                current = None if eq else flag
            elif current is not None:
                items[current].append(token)
            else:
                raise UsageError(f"'{token}' is not a flag: SGLang options start with --")
        return cls(tuple((flag, tuple(values)) for flag, values in items.items()))

    @functools.cached_property
    def _mapping(self) -> dict[str, Value]:
        """The items as a dict, built once (a search reads a configuration's flags many times); never handed out."""
        return dict(self.items)

    def as_dict(self) -> dict[str, Value]:
        return dict(self._mapping)

    def argv(self) -> list[str]:
        """Environment assignments first (``VAR=value``), then the flags: reads back with :meth:`from_argv`."""
        return [f"{name}={value}" for name, value in self.env().items()] + self.flag_argv()

    def flag_argv(self) -> list[str]:
        """The SGLang flags alone, without the environment."""
        out: list[str] = []
        for flag, value in self.items:
            if is_env(flag):
                continue
            out.append(flag)
            out.extend(value)
        return out

    def env(self) -> dict[str, str]:
        """The environment variables this configuration sets."""
        return {name: value[0] if value else "" for name, value in self.items if is_env(name)}

    def key(self) -> str:
        """Canonical text of this configuration (stable across processes and runs)."""
        return json.dumps([[flag, list(value)] for flag, value in self.items], separators=(",", ":"))

    def flags(self) -> list[str]:
        return [flag for flag, _ in self.items]

    def get(self, flag: str) -> Value | None:
        return self._mapping.get(flag)

    def without(self, *flags: str) -> Config:
        drop = set(flags)
        return Config(tuple(item for item in self.items if item[0] not in drop))

    def with_(self, flag: str, value: Value | str | None) -> Config:
        mapping: dict[str, Value | str | None] = dict(self.as_dict())
        mapping[flag] = value
        return Config.of(mapping)

    def with_defaults(self, defaults: Config) -> Config:
        """This configuration with each flag of ``defaults`` it does not set (a sweep's deployment shape)."""
        mapping: dict[str, Value | str | None] = dict(defaults.as_dict())
        mapping.update(self.as_dict())
        return Config.of(mapping)

    def __len__(self) -> int:
        return len(self.items)

    def __str__(self) -> str:
        return shlex.join(self.argv())


@dataclass(frozen=True)
class PastedCommand:
    """A launch command split into its model, draft and remaining flags."""

    config: Config
    model_path: str | None = None
    draft_path: str | None = None
    notes: tuple[str, ...] = field(default=())


_LAUNCHERS = ("sglang.launch_server", "sglang.launch_server.py")


def _join_continuations(text: str) -> str:
    return text.replace("\\\r\n", " ").replace("\\\n", " ")


def _unit_file(text: str) -> tuple[str, list[tuple[str, str]]] | None:
    """The ``ExecStart=`` command and the ``Environment=`` assignments of a pasted systemd unit.

    None when ``text`` is not a unit (no line starts with ``ExecStart=``). Other keys
    (``Restart=``, ``[Install]`` ...) are not part of the launch and are left out.
    """
    lines = _join_continuations(text).splitlines()
    if not any(line.strip().startswith("ExecStart=") for line in lines):
        return None
    command, env = "", []
    for raw in lines:
        line = raw.strip()
        if line.startswith("ExecStart="):
            command = line
        elif line.startswith("Environment="):
            for token in shlex.split(line.removeprefix("Environment=")):
                assignment = env_assignment(token)
                if assignment is not None:
                    env.append(assignment)
    return command, env


def parse_command(tokens: Sequence[str]) -> PastedCommand:
    """Understand a pasted launch command or a bare flag list.

    Accepted: a bare flag list; ``python -m sglang.launch_server ...``; ``sglang serve ...``;
    ``VAR=value`` and ``env VAR=value`` prefixes; a systemd ``ExecStart=`` line or a whole
    unit file, whose ``Environment=`` lines count like a prefix; ``docker run ... IMAGE python
    -m sglang.launch_server ...``, whose ``-e``/``--env`` count like a prefix. Secrets
    (``HF_TOKEN`` …) are left out, with a note: they do not change argument handling. Environment assignments
    become items of the configuration (see the module docstring).

    :raises UsageError: the text is a command, but not an SGLang launch, or is empty.
    """
    env: list[tuple[str, str]] = []
    if len(tokens) == 1 and (" " in tokens[0] or "\n" in tokens[0]):
        unit = _unit_file(tokens[0])
        text = tokens[0]
        if unit is not None:
            text, env = unit
        tokens = shlex.split(_join_continuations(text))
    else:
        tokens = [t for t in tokens if t not in ("\\", "\\\n")]
    tokens = list(tokens)
    if tokens and tokens[0].startswith("ExecStart="):
        first = tokens[0].removeprefix("ExecStart=").lstrip("-@+!")
        tokens = ([first] if first else []) + tokens[1:]
    while tokens:
        assignment = env_assignment(tokens[0]) if not tokens[0].startswith("-") else None
        if assignment is not None:
            env.append(assignment)
        elif tokens[0].rsplit("/", 1)[-1] != "env" or len(tokens) < 2 or env_assignment(tokens[1]) is None:
            break
        tokens = tokens[1:]
    if len(tokens) > 1 and tokens[0].rsplit("/", 1)[-1] in ("docker", "podman") and tokens[1] == "run":
        tokens, container_env = _strip_container(tokens)
        env.extend(container_env)
    if not tokens:
        raise UsageError("no SGLang flags given: pass them after --, e.g. -- --speculative-algorithm EAGLE3")
    if not tokens[0].startswith("--"):
        tokens = _strip_launcher(tokens)
    config = Config.from_argv(tokens)
    mapping = dict(config.as_dict())
    model_path = draft_path = None
    for flag in MODEL_FLAGS:
        if flag in mapping:
            value = mapping.pop(flag)
            model_path = value[0] if value else None
    for flag in DRAFT_FLAGS:
        if flag in mapping:
            value = mapping.pop(flag)
            draft_path = value[0] if value else None
    notes = []
    for name, assigned in env:  # a later assignment wins, as in a shell
        if _SECRET.search(name):
            notes.append(f"{name} left out: a secret, and it does not change how SGLang handles arguments")
            continue
        mapping[name] = (assigned,)
    return PastedCommand(Config.of(mapping), model_path, draft_path, tuple(dict.fromkeys(notes)))


_SECRET = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY)($|_)", re.I)


def _strip_container(tokens: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """``docker run [OPTIONS] IMAGE python -m sglang.launch_server ...``: the launch, and the
    container's ``-e/--env`` assignments (``--gpus device=0,1`` as ``CUDA_VISIBLE_DEVICES``)."""
    env: list[tuple[str, str]] = []
    for index, token in enumerate(tokens):
        name = token.rsplit("/", 1)[-1]
        if (token == "-m" and tokens[index + 1: index + 2] and tokens[index + 1] in _LAUNCHERS) or name in _LAUNCHERS \
                or (name == "sglang" and tokens[index + 1: index + 2] in (["serve"], ["launch-server"])):
            before = tokens[:index]
            for position, option in enumerate(before):
                value = None
                if option in ("-e", "--env") and position + 1 < len(before):
                    value = before[position + 1]
                elif option.startswith("--env="):
                    value = option.removeprefix("--env=")
                if value is not None and (assignment := env_assignment(value)) is not None:
                    env.append(assignment)
                if option == "--gpus" and position + 1 < len(before) and "device=" in before[position + 1]:
                    devices = before[position + 1].split("device=", 1)[1].strip("'\"")
                    env.append(("CUDA_VISIBLE_DEVICES", devices))
            start = index - 1 if token == "-m" and index > 0 else index
            return tokens[start:], env
    raise UsageError("a 'docker run' command without an SGLang launch in it: paste the part from "
                     "'python -m sglang.launch_server' on, or just the flags")


def _strip_launcher(tokens: list[str]) -> list[str]:
    """Drop ``python -m sglang.launch_server`` / ``sglang serve`` in front of the flags."""
    for index, token in enumerate(tokens):
        name = token.rsplit("/", 1)[-1]
        if token == "-m" and index + 1 < len(tokens) and tokens[index + 1] in _LAUNCHERS:
            return tokens[index + 2 :]
        if name in _LAUNCHERS or name.endswith("launch_server.py"):
            return tokens[index + 1 :]
        if name == "sglang" and index + 1 < len(tokens) and tokens[index + 1] in ("serve", "launch-server"):
            return tokens[index + 2 :]
        if token.startswith("--"):
            break
    shown = " ".join(tokens[:3])
    raise UsageError(f"'{shown}' is not an SGLang launch: paste 'python -m sglang.launch_server ...', "
                     "'sglang serve ...' or just the flags")


def render(flags: Iterable[str]) -> str:
    return shlex.join(list(flags))

"""Environment variables: a pasted command's ``VAR=value`` prefix, and the variables SGLang's speculative
code paths read (found in its source text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_ENV_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.S)


def split_env(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Leading ``VAR=value`` tokens (an environment prefix) and the flags after them."""
    env: dict[str, str] = {}
    index = 0
    while index < len(argv):
        match = _ENV_ASSIGNMENT.match(argv[index])
        if match is None or argv[index].startswith("-"):
            break
        env[match["name"]] = match["value"]
        index += 1
    return env, argv[index:]


# -- environment variables the speculative code paths read ---------------------------------


#: An environment variable read in source text: ``envs.SGLANG_X``, ``get_bool_env_var("SGLANG_X")``, ...
#: (also used by ``data_flow``; this module imports nothing of bisect_spec: ``repro.py`` embeds its source)
ENV_READ = re.compile(r"""(?:envs\.|get_bool_env_var\(\s*["']|get_int_env_var\(\s*["']|environ(?:\.get)?[\[(]\s*["']|"""
                      r"""getenv\(\s*["'])(?P<name>SGL(?:ANG)?_[A-Z0-9_]+)""")


_ENV_DEFINITION = re.compile(r"^\s*(?P<name>SGL(?:ANG)?_[A-Z0-9_]+)\s*=\s*Env(?P<kind>Bool|Int|Float|Str)\((?P<default>[^)]*)\)",
                             re.M)


#: Where the speculative code lives: whole files, and functions of ``server_args.py`` (<= 0.5.12).
_SPECULATIVE_FILES = ("srt/speculative", "srt/arg_groups/speculative_hook.py")


def speculative_env_vars(package_root: str, also: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Environment variables the release's speculative code paths read, found in its source.

    Read from ``srt/speculative/``, ``srt/arg_groups/speculative_hook.py`` and the
    functions of ``srt/server_args.py`` whose names mention speculation, and the names ``also``
    (those the speculative checks read: :func:`data_flow.speculative_reads`). Each:
    ``{"name", "kind": bool|int|float|str, "default"}``; kind and default come from the
    release's ``srt/environ.py`` declarations where they exist (``EnvBool(False)``), else
    ``bool`` when read through ``get_bool_env_var``.
    """
    import ast as _ast
    import os as _os

    def read(path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    texts: list[str] = []
    for relative in _SPECULATIVE_FILES:
        path = _os.path.join(package_root, relative)
        if _os.path.isdir(path):
            for directory, _dirs, files in sorted(_os.walk(path)):
                texts += [read(_os.path.join(directory, f)) for f in sorted(files) if f.endswith(".py")]
        elif _os.path.isfile(path):
            texts.append(read(path))
    server_args = _os.path.join(package_root, "srt", "server_args.py")
    if _os.path.isfile(server_args):
        source = read(server_args)
        lines = source.splitlines()
        for node in _ast.walk(_ast.parse(source)):
            if isinstance(node, _ast.FunctionDef) and "specul" in node.name:
                texts.append("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    bools = set(re.findall(r"get_bool_env_var\(\s*[\"'](SGL(?:ANG)?_[A-Z0-9_]+)", "\n".join(texts)))
    names = sorted({m["name"] for text in texts for m in ENV_READ.finditer(text)} | set(also))
    declared: dict[str, tuple[str, str]] = {}
    environ_path = _os.path.join(package_root, "srt", "environ.py")
    if _os.path.isfile(environ_path):
        for match in _ENV_DEFINITION.finditer(read(environ_path)):
            declared[match["name"]] = (match["kind"].lower(), match["default"].strip())
    found = []
    for name in names:
        kind, default = declared.get(name, ("bool" if name in bools else "str", ""))
        found.append({"name": name, "kind": kind, "default": default})
    return found

"""Where a shrink should look first: the flags a failure names.

A failing check reads a few fields (``assert cfg.speculative_eagle_topk is None`` under
``if self.speculative_num_steps == 1:``); the flags that set those fields are the likely
members of a minimal reproducer. This module turns a failure into such a set of flags, the
shrinker's *hint* (:class:`bisect_spec.reduce.shrink.Shrinker` tries it first and proves the result
1-minimal whatever the hint was, so a wrong hint costs evaluations, never correctness):

* **fields** (:func:`fields_of`): from the AST of the failing statement and of its enclosing
  ``if`` guard (both captured by the worker, ``frame["statement"]`` and ``frame["guard"]``),
  every attribute name ``X.attr``, every bare name and every identifier-like string constant
  (``get_bool_env_var("SGLANG_X")``); from the message, its identifiers and the ``--flags`` it
  names. A header that does not parse alone (``if a:``) is parsed with a body added; text
  that does not parse at all falls back to a regular expression.
* **fields to flags** (:func:`flags_for_fields`): through the release's own parser, each
  flag's ``dest`` (``--fp8-gemm-backend`` sets ``fp8_gemm_runner_backend``: names alone would
  miss it); an environment variable item is its own field.
* **learnt** reproducers: flags of minimal reproducers already found for the same signature
  (masking rounds learn one per unexplained failure) are hints too.

Pure: no I/O, no processes.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bisect_spec.model.flags import Config
from bisect_spec.model.syntax import parse_module

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
_ATTRIBUTE = re.compile(r"\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_HEADER = re.compile(r"^\s*(if|elif|while|for|with|async for|async with)\b")

#: A hinted flag under this prefix needs these to take effect at all (no algorithm: no speculative checks run).
NEEDS = {"--speculative-": ("--speculative-algorithm", "--speculative-draft-model-path")}


def _parse(text: str) -> ast.AST | None:
    """The AST of a statement, of a compound header (``if a:``, ``elif b:``) or None."""
    text = text.strip()
    if text.startswith("elif "):
        text = text[2:]
    for candidate in (text, text + "\n    pass" if _HEADER.match(text) or text.endswith(":") else None):
        if candidate is None:
            continue
        try:
            return parse_module(candidate)
        except SyntaxError:
            continue
    return None


def code_fields(text: str) -> set[str]:
    """Attribute names, bare names and identifier-like string constants a piece of code reads."""
    tree = _parse(text)
    if tree is None:
        return set(_ATTRIBUTE.findall(text))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _WORD.fullmatch(node.value):
            found.add(node.value)
    return found


def fields_of(frame: Mapping[str, Any], message: str = "") -> set[str]:
    """The fields a failure names: its statement and guard (code) and its message (words and ``--flags``)."""
    guard = frame.get("guard") or {}
    found: set[str] = set()
    for code in (frame.get("statement"), frame.get("expression"), guard.get("text") if isinstance(guard, dict) else None):
        if code:
            found |= code_fields(str(code))
    found |= set(_WORD.findall(message))
    found |= {flag[2:].replace("-", "_") for flag in _FLAG.findall(message)}
    return found


def flags_for_fields(fields: Iterable[str], table: Sequence[Mapping[str, Any]]) -> set[str]:
    """The flags (canonical spellings, as in a :class:`Config`) whose ``dest`` is one of ``fields``.

    ``table`` is a release's flag table (``Session.flags()``: ``option``, ``dest``, ``kind``);
    an environment variable item (``kind: env``) is its own field. A field no flag sets (a
    local variable, ``self``) maps to nothing.
    """
    wanted = set(fields)
    out: set[str] = set()
    for entry in table:
        option = str(entry.get("option", ""))
        dest = entry.get("dest") or (option if entry.get("kind") == "env" else option.lstrip("-").replace("-", "_"))
        if dest in wanted:
            out.add(option)
    return out


def with_needed(flags: Iterable[str]) -> set[str]:
    """``flags`` plus what they need to take effect (:data:`NEEDS`: the speculative algorithm and draft)."""
    out = set(flags)
    for prefix, needed in NEEDS.items():
        if any(f.startswith(prefix) for f in out):
            out.update(needed)
    return out


def failure_flags(record: Mapping[str, Any], table: Sequence[Mapping[str, Any]],
                  learnt: Iterable[Config] = ()) -> set[str]:
    """The shrinker's hint for one failure: flags its statement, guard and message name (by ``dest``),
    flags of ``learnt`` minimal reproducers of the same signature, and what those need (:func:`with_needed`).

    :param record: the failing evaluation's record (``frame``, ``exception``), as in :class:`~bisect_spec.model.outcome.Outcome`.
    :param table: the release's flag table.
    :param learnt: minimal reproducers already known for this failure's signature.
    """
    frame = record.get("frame") or {}
    message = str((record.get("exception") or {}).get("message") or "")
    flags = flags_for_fields(fields_of(frame, message), table)
    for reproducer in learnt:
        flags.update(reproducer.flags())
    return with_needed(flags)

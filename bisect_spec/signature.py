"""Failure signatures: group failures by where and why they happen, not by line.

A :class:`Signature` is exception type + SGLang function + normalised failing statement +
normalised message (as Hypothesis groups by an interesting origin). It never contains a
line number (they move every release) nor anything Python-version specific (3.11 and
3.12 report different lines of one multi-line ``assert``; the statement is taken whole
from the AST, so both give the same text).

The :attr:`Signature.cross_release_key` drops file and function, and uses the raising
sub-expression where the statement is a compound header, so a failure that moved from
``server_args.py::_handle_speculative_decoding`` to
``arg_groups/speculative_hook.py::_handle_eagle_family`` keeps its key.

Pure: no I/O, no processes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

#: Receivers that name "the server args object" in different releases.
_RECEIVERS = re.compile(r"\b(self|cfg|view|server_args|args|sa|resolved|raw)\.")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?<![\w.])(?:/[^\s'\",:)]+)+")
_QUOTED_ASSIGNMENT = re.compile(r"""\b(\w+)=(['"])[^'"]*\2""")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_SPACE = re.compile(r"\s+")


def normalise_statement(statement: str) -> str:
    """Statement text independent of the receiver's name and of formatting."""
    return _SPACE.sub(" ", _RECEIVERS.sub("_.", statement)).strip()


def normalise_message(message: str) -> str:
    """Message text without the values that vary between configurations.

    Paths, numbers, addresses and quoted assigned values (``got attention_backend='flashmla'``)
    become placeholders: ``num_draft_tokens=16 must be <= 8`` and ``=4 ... <= 2`` are one
    failure; the words are what identify it.
    """
    text = _QUOTED_ASSIGNMENT.sub(r"\1=<v>", message)
    text = _HEX.sub("<addr>", text)
    text = _PATH.sub("<path>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:300]


def _short(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:10]


@dataclass(frozen=True, order=True)
class Signature:
    """Where and why a configuration failed; hashable, ordered, line-free."""

    kind: str  # "failed" | "crashed" | "timeout" | "usage"
    exc_type: str
    location: str  # "srt/server_args.py::_handle_speculative_decoding"
    statement: str
    message: str
    expression: str = ""

    @property
    def id(self) -> str:
        """Short stable id, e.g. ``a3f09c21b7``."""
        return _short(self.kind, self.exc_type, self.location, self.statement, self.message)

    @property
    def function(self) -> str:
        return self.location.rsplit("::", 1)[-1]

    @property
    def cross_release_key(self) -> str:
        """Id that survives a move to another file or function (type + statement + message)."""
        core = self.expression if self.statement.startswith(("if ", "elif ", "while ")) and self.expression else self.statement
        return _short(self.kind, self.exc_type, core, self.message)

    @property
    def title(self) -> str:
        """One line for tables: ``AssertionError in _handle_eagle_family``."""
        what = self.exc_type or self.kind
        return f"{what} in {self.function}" if self.function else what

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cross_release_key": self.cross_release_key, "kind": self.kind,
                "exc_type": self.exc_type, "location": self.location, "statement": self.statement,
                "expression": self.expression, "message": self.message}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Signature:
        return cls(data["kind"], data["exc_type"], data["location"], data["statement"], data["message"],
                   data.get("expression", ""))


def signature_of(record: dict[str, Any]) -> Signature | None:
    """The signature of an evaluation record, or None when it passed."""
    status = record.get("status")
    if status == "passed":
        return None
    if status in ("crashed", "timeout"):
        crash = str(record.get("crash", ""))
        kind_word = "timeout" if status == "timeout" else crash.split(" ", 1)[0].split("(", 1)[0] or str(status)
        return Signature(str(status), "", "", "", kind_word)
    exception = record.get("exception") or {}
    frame = record.get("frame") or {}
    location = f"{frame.get('file', '?')}::{frame.get('function', '?')}" if frame else ""
    return Signature(
        kind=str(status),
        exc_type=str(exception.get("type", "")),
        location=location,
        statement=normalise_statement(str(frame.get("statement", ""))),
        message=normalise_message(str(exception.get("message", ""))),
        expression=normalise_statement(str(frame.get("expression", ""))),
    )

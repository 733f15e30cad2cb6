"""Failure signatures: group failures by where and why they happen, not by line.

A :class:`Signature` is exception type + SGLang function + normalised failing statement +
normalised message (as Hypothesis groups by an interesting origin). It never contains a
line number (they move every release) nor anything Python-version specific (3.11 and
3.12 report different lines of one multi-line ``assert``; the statement is taken whole
from the AST, so both give the same text).

The message is normalised with the failing statement's own template first: the fields an
f-string (or ``%`` / ``str.format`` / ``+``) formats into the message become ``{field}``
placeholders, taken from the AST of the statement, so ``got {cfg.x}.`` is one failure
whatever ``x`` was; the values that triggered it are its *variant* (:func:`variant_of`),
shown in reports but never part of the id. Python's own message for an operator on operands
it cannot combine keeps the operator and drops the operand types (``'>' not supported between
instances of <type> and <type>``): on 0.5.23 ``compute_num_reserved_tokens``'s one statement
gave three signatures for ``None * int``, ``int * None`` and ``None * None``. Numbers, paths and addresses become
placeholders in every position (also a number that ends a sentence: ``got 0.``).

Release numbers (``0.5.23``, ``v0.5.1.post3``) in a message become ``<version>`` in the
:attr:`Signature.cross_release_key` (:func:`normalise_versions`): "not in SGLang 0.5.9" and
"not in SGLang 0.5.11" are one failure across releases. The :attr:`Signature.id` keeps them:
within one release they never vary.

The :attr:`Signature.cross_release_key` drops file and function, so a failure that moved
from ``server_args.py::_handle_speculative_decoding`` to
``arg_groups/speculative_hook.py::_handle_eagle_family`` keeps its key. Where the statement
is a compound header it uses the raising sub-expression *and* the header's skeleton (the
fields each operand of its ``and``/``or`` reads): two ``if`` statements of one function that
raise in the same sub-expression but read different fields keep different keys, while a
header whose comparison or backend list changed (``!= "flashinfer"`` became ``not in
_PAGE_TREE_SPEC_BACKENDS``) keeps its key. Two headers that differ only in operators or
constants share it: the price of following such a header across releases.

Pure: no I/O, no processes.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
import string
from dataclasses import dataclass
from typing import Any

from bisect_spec.model.syntax import parse_expression, parse_module

#: Receivers that name "the server args object" in different releases.
_RECEIVERS = re.compile(r"\b(self|cfg|view|server_args|args|sa|resolved|raw)\.")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(?<![\w.])(?:/[^\s'\",:)]+)+")
_QUOTED_ASSIGNMENT = re.compile(r"""\b(\w+)=(['"])[^'"]*\2""")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w]|\.\d)")
_SPACE = re.compile(r"\s+")
#: Python's own message for a binary operation on operands it cannot combine: the operator is the
#: statement's code, the operand types are values (``'NoneType' and 'int'``, ``'int' and 'NoneType'``).
_OPERAND_TYPES = re.compile(r"^(unsupported operand type\(s\) for .+?: |'.+?' not supported between instances of )"
                            r"'[\w.]+' and '[\w.]+'$")
#: A release number: three or more dotted parts, an optional ``v`` and suffix (``0.5.1.post3``, ``0.4.6rc1``).
_VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+){2,}(?:\.?(?:post|rc|dev|a|b)\d*)*(?:\+[\w.]+)?(?![\w.]*\d)")


def normalise_versions(text: str) -> str:
    """``text`` with every release number replaced by ``<version>`` (what differs by release)."""
    return _VERSION.sub("<version>", text)


def normalise_statement(statement: str) -> str:
    """Statement text independent of the receiver's name and of formatting: a signature's key, not for display.

    >>> normalise_statement("assert cfg.speculative_eagle_topk is None  and self.page_size > 1")
    'assert _.speculative_eagle_topk is None and _.page_size > 1'
    """
    return _SPACE.sub(" ", _RECEIVERS.sub("_.", statement)).strip()


@dataclass(frozen=True)
class _Field:
    """A value formatted into a message: its source expression, receiver normalised."""

    name: str


_Part = str | _Field


def _string_parts(node: ast.expr) -> list[_Part] | None:
    """The literal text and formatted fields of a string-building expression, or None."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        parts: list[_Part] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                parts.append(_Field(normalise_statement(ast.unparse(value.value))))
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string_parts(node.left), _string_parts(node.right)
        if left is None and right is None:
            return None
        return (left or [_Field(normalise_statement(ast.unparse(node.left)))]) + \
            (right or [_Field(normalise_statement(ast.unparse(node.right)))])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        pieces = re.split(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdirfgexXoc%]", node.left.value)
        parts = [pieces[0]]
        for index, piece in enumerate(pieces[1:]):
            name = ast.unparse(values[index]) if index < len(values) else f"arg{index}"
            parts += [_Field(normalise_statement(name)), piece]
        return parts
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        positional = [normalise_statement(ast.unparse(a)) for a in node.args]
        named = {k.arg: normalise_statement(ast.unparse(k.value)) for k in node.keywords if k.arg}
        parts, counter = [], 0
        for literal, field, _spec, _conv in string.Formatter().parse(node.func.value.value):
            parts.append(literal)
            if field is None:
                continue
            if field == "":
                field = str(counter)
                counter += 1
            head = re.split(r"[.\[]", field, maxsplit=1)[0]
            name = positional[int(head)] if head.isdigit() and int(head) < len(positional) else named.get(head, field)
            parts.append(_Field(name))
        return parts
    return None


@functools.lru_cache(maxsize=2048)
def message_templates(statement: str) -> tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...]:
    """The message templates a statement builds: ``(template text, pattern, field names)``.

    Longest literal text first, so the most specific template wins. Empty for a statement
    that is not Python (a compound header, a line from a log) or builds no message.
    """
    try:
        tree = parse_module(statement)
    except SyntaxError:
        return ()
    found: list[tuple[int, tuple[str, re.Pattern[str], tuple[str, ...]]]] = []
    inner: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in inner or not isinstance(node, ast.expr):
            continue
        parts = _string_parts(node)
        if parts is None or not any(isinstance(p, _Field) for p in parts):
            continue
        for child in ast.walk(node):
            inner.add(id(child))
        text, pattern, names = "", "", []
        for part in parts:
            if isinstance(part, _Field):
                text += "{" + part.name + "}"
                pattern += "(.*?)"
                names.append(part.name)
            else:
                text += part
                pattern += re.escape(part)
        literal = sum(len(p) for p in parts if isinstance(p, str))
        found.append((literal, (text, re.compile(pattern, re.DOTALL), tuple(names))))
    found.sort(key=lambda item: -item[0])
    return tuple(entry for _, entry in found)


def _template_match(statement: str, message: str) -> tuple[str, dict[str, str]] | None:
    """The template of ``statement`` that ``message`` was built from, and the field values."""
    for text, pattern, names in message_templates(statement):
        match = pattern.fullmatch(message)
        if match is not None:
            return text, dict(zip(names, match.groups(), strict=True))
    return None


def normalise_message(message: str, statement: str = "") -> str:
    """Message text without the values that vary between configurations.

    With the failing ``statement``, a message built by one of its templates is that
    template (``must be positive, got {_.speculative_draft_window_size}.``). Python's own
    message for an operator on operands it cannot combine keeps the operator, not the operand
    types: ``None * 2`` and ``2 * None`` in one statement are one failure. Then paths,
    numbers, addresses and quoted assigned values (``got attention_backend='flashmla'``)
    become placeholders: ``num_draft_tokens=16 must be <= 8`` and ``=4 ... <= 2`` are one
    failure; the words are what identify it.
    """
    matched = _template_match(statement, message) if statement else None
    text = matched[0] if matched is not None else message
    text = _OPERAND_TYPES.sub(r"\1<type> and <type>", text)
    text = _QUOTED_ASSIGNMENT.sub(r"\1=<v>", text)
    text = _HEX.sub("<addr>", text)
    text = _PATH.sub("<path>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:300]


def variant_of(record: dict[str, Any]) -> str:
    """The values that made this failure, for reports: ``field=value, ...`` from the
    statement's template, else the message itself where normalising changed it; ``""``
    when the message carries no values.
    """
    if record.get("status") != "failed":
        return ""
    message = str((record.get("exception") or {}).get("message", ""))
    statement = str((record.get("frame") or {}).get("statement", ""))
    matched = _template_match(statement, message) if statement else None
    if matched is not None:
        shown = [f"{name.removeprefix('_.')}={value}" for name, value in matched[1].items() if not _CONSTANT.match(name)]
        return ", ".join(shown)[:200]
    same = _SPACE.sub(" ", message).strip()[:300]
    return message[:200] if normalise_message(message, statement) != same else ""


#: A module-level constant formatted into a message (``{_PAGE_TREE_SPEC_BACKENDS}``): the same in every variant.
_CONSTANT = re.compile(r"^(sorted\()?_?[A-Z][A-Z0-9_]*\)?$")


_RECEIVER_NAMES = frozenset({"_", "self", "cfg", "view", "server_args", "args", "sa", "resolved", "raw"})


def _fields_read(node: ast.AST) -> str:
    """The server-args fields an expression reads (``_.page_size``), sorted, or its names when it reads none."""
    fields = sorted({n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                     and n.value.id in _RECEIVER_NAMES})
    if fields:
        return ",".join(fields)
    return ",".join(sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)})) or "-"


@functools.lru_cache(maxsize=2048)
def header_skeleton(statement: str) -> str:
    """The shape of ``if A and B:``: for each operand of the top-level ``and``/``or``, the
    fields it reads; operators and constants left out. 0.5.3's ``topk > 1 and page_size > 1
    and attention_backend != "flashinfer"`` and 0.5.23's ``… and attention_backend not in
    _PAGE_TREE_SPEC_BACKENDS`` have one skeleton; ``if topk > 1:`` has another. The text
    itself when it does not parse."""
    header = statement.strip()
    for keyword in ("if ", "elif ", "while "):
        if header.startswith(keyword):
            header = header[len(keyword):]
    header = header.rstrip(":")
    try:
        tree = parse_expression(header).body
    except SyntaxError:
        return normalise_statement(statement)
    if isinstance(tree, ast.BoolOp):
        word = "and" if isinstance(tree.op, ast.And) else "or"
        return f" {word} ".join(f"[{_fields_read(value)}]" for value in tree.values)
    return f"[{_fields_read(tree)}]"


def _short(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:10]


@dataclass(frozen=True, order=True)
class Signature:
    """Where and why a configuration failed; hashable, ordered, line-free."""

    kind: str  # "failed" | "will_not_start" | "crashed" | "timeout" | "usage"
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
        """Id that survives a move to another file or function (type + statement + message).

        A compound header counts by its raising sub-expression and its skeleton
        (:func:`header_skeleton`): moves that rename receivers or turn a backend list into a
        constant keep the key; two headers of one function never share it.
        """
        message = normalise_versions(self.message)
        if self.statement.startswith(("if ", "elif ", "while ")) and self.expression:
            return _short(self.kind, self.exc_type, self.expression, header_skeleton(self.statement), message)
        return _short(self.kind, self.exc_type, self.statement, message)

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


#: The signature kind of a configuration that will not start on the box (out of memory, too few GPUs): a
#: configuration error the tool predicts from SGLang's own build, not a check of SGLang's.
WILL_NOT_START = "will_not_start"
#: Each cause of :data:`WILL_NOT_START` in words (a signature's message: the same for every byte count).
WILL_NOT_START_CAUSES = {"weights": "out of memory: the weights do not fit one GPU",
                         "gpus": "the parallel layout needs more GPUs than the box has",
                         "draft": "out of memory: the draft's weights and pool do not fit beside the target's"}


def signature_of(record: dict[str, Any]) -> Signature | None:
    """The signature of an evaluation record, or None when it passed."""
    status = record.get("status")
    if status == "passed":
        return None
    if status in ("crashed", "timeout"):
        crash = str(record.get("crash", ""))
        kind_word = "timeout" if status == "timeout" else crash.split(" ", 1)[0].split("(", 1)[0] or str(status)
        return Signature(str(status), "", "", "", kind_word)
    will_not_start = record.get("will_not_start")
    if status == "failed" and isinstance(will_not_start, dict):  # by stage and cause, never by byte count
        cause = str(will_not_start.get("cause", ""))
        exc_type = str((record.get("exception") or {}).get("type", ""))
        return Signature(WILL_NOT_START, exc_type, str(will_not_start.get("stage") or record.get("stage") or ""),
                         cause, WILL_NOT_START_CAUSES.get(cause, cause))
    exception = record.get("exception") or {}
    frame = record.get("frame") or {}
    location = f"{frame.get('file', '?')}::{frame.get('function', '?')}" if frame else ""
    statement = str(frame.get("statement", ""))
    return Signature(
        kind=str(status),
        exc_type=str(exception.get("type", "")),
        location=location,
        statement=normalise_statement(statement),
        message=normalise_message(str(exception.get("message", "")), statement),
        expression=normalise_statement(str(frame.get("expression", ""))),
    )

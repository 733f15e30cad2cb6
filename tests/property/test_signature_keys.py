"""Cross-release keys and signatures of real raising statements, generated.

Each example writes a Python function of distinct failing statements (``if`` headers that
raise a ``TypeError`` in the same sub-expression, ``raise`` with an f-string or ``%``
message, ``assert`` with a message), runs it once per statement and per value, and builds
each failure's record with the evaluator's own code (``Evaluator._failure``: innermost
frame, the statement from the AST, the raising sub-expression). Properties: distinct
failing statements never share a cross-release key (headers are distinct when their operands
read different fields: operators and constants may change across releases); one statement is
one signature whatever values its message carries.
"""

from __future__ import annotations

import itertools
import types
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bisect_spec.inside.evaluator import Evaluator
from bisect_spec.model.signature import header_skeleton, normalise_statement, signature_of

FIELDS = ("alpha", "beta", "gamma", "delta")
RECEIVERS = ("cfg", "self", "view")
_COUNTER = itertools.count()


@st.composite
def conjunct(draw: st.DrawFn) -> str:
    """A comparison reading one or two fields (constants and operators vary, and do not count)."""
    receiver = draw(st.sampled_from(RECEIVERS))
    fields = draw(st.lists(st.sampled_from(FIELDS[1:]), min_size=1, max_size=2, unique=True))
    if len(fields) == 2:
        return f"{receiver}.{fields[0]} == {receiver}.{fields[1]}"
    field = fields[0]
    op = draw(st.sampled_from(["==", "!=", ">", "in", "not in"]))
    if op in ("in", "not in"):
        return f"{receiver}.{field} {op} ({draw(st.integers(0, 3))}, {draw(st.integers(4, 9))})"
    value = draw(st.integers(-2, 64) | st.sampled_from(["'flashinfer'", "'fa3'", "'triton'"]))
    return f"{receiver}.{field} {op} {value}"


@st.composite
def statement(draw: st.DrawFn) -> str:
    """One failing statement (may span lines); ``alpha`` is None and every message value varies."""
    kind = draw(st.sampled_from(["header", "fstring", "percent", "assert"]))
    words = draw(st.sampled_from(["must be positive, got", "is out of range:", "needs a value, got"]))
    receiver = draw(st.sampled_from(RECEIVERS))
    if kind == "header":  # raises TypeError at ``alpha > n`` whatever follows
        rest = draw(st.lists(conjunct(), max_size=3))
        test = " and ".join([f"{receiver}.alpha > {draw(st.integers(0, 2))}", *rest])
        return f"if {test}:\n            raise ValueError('unreachable')"
    if kind == "fstring":
        return f"raise ValueError(f'--{words} {{{receiver}.value}}.')"
    if kind == "percent":
        return f"raise ValueError('{words} %s.' % ({receiver}.value,))"
    return f"assert {receiver}.value > 1000, f'{words} {{{receiver}.value}}.'"


def _identity(text: str) -> str:
    """What makes two generated statements distinct: a header by the fields each operand reads
    (a change of operator or constant is a header followed across releases), others by text."""
    first = normalise_statement(text.split("\n")[0])
    return header_skeleton(first) if first.startswith("if ") else first


def _module(statements: list[str], directory: Path) -> tuple[types.FunctionType, list[int]]:
    lines = ["def check(cfg, self, view):"]
    starts = []
    for index, text in enumerate(statements):
        lines.append(f"    if cfg.which == {index}:")
        starts.append(len(lines) + 1)
        lines.append("        " + text)
    path = directory / f"generated_{next(_COUNTER)}.py"  # unique: frames are cached by file and line
    path.write_text("\n".join(lines) + "\n")
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["check"], starts


def _record(function: types.FunctionType, which: int, value: int, root: Path) -> dict[str, Any]:
    cfg = types.SimpleNamespace(which=which, alpha=None, beta=1, gamma="fa3", delta=5, value=value)
    try:
        function(cfg, cfg, cfg)
    except Exception as exc:
        evaluator = types.SimpleNamespace(package_root=str(root))
        return {"status": "failed", **Evaluator._failure(evaluator, exc, "")}  # type: ignore[arg-type]
    raise AssertionError(f"statement {which} did not fail")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(statements=st.lists(statement(), min_size=2, max_size=6, unique_by=_identity))
def test_distinct_failing_statements_never_share_a_key(statements: list[str], tmp_path: Path) -> None:
    function, starts = _module(statements, tmp_path)
    keys: dict[str, int] = {}
    for which in range(len(statements)):
        signatures = set()
        for value in (0, -1, 7, 250):  # values end up in the message: one signature all the same
            sig = signature_of(_record(function, which, value, tmp_path))
            assert sig is not None
            signatures.add(sig)
        assert len(signatures) == 1, sorted(s.message for s in signatures)
        (sig,) = signatures
        assert keys.setdefault(sig.cross_release_key, which) == which, \
            f"statements {keys[sig.cross_release_key]} and {which} share key {sig.cross_release_key}"
    assert len(keys) == len(statements) == len(starts)

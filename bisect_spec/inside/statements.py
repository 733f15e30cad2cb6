"""What a failure's traceback says, read the same way in-process and from a log: the innermost SGLang frame, the
whole statement it ran (from the AST: a multi-line call, an ``if`` with its guard), the failing expression, and
the traceback text as people read it (SGLang's frames, paths relative to the package).

``Evaluator`` builds a failure's record with these in-process; ``launch/server.py`` (a real launch) turns a
log's traceback text into the same record (:func:`traceback_blocks`, :func:`failure_from_block`), so a launch's
signature equals the in-process one for the same failure.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
import re
import sys
import traceback
from typing import Any


def _failing_expression(frame: traceback.FrameSummary) -> str | None:
    """The exact sub-expression that raised (Python 3.11+ column positions), normalised."""
    colno, end_colno = getattr(frame, "colno", None), getattr(frame, "end_colno", None)
    end_lineno = getattr(frame, "end_lineno", None)
    if colno is None or end_colno is None or end_lineno is None or frame.lineno is None:
        return None
    lines = linecache.getlines(frame.filename)
    if not (0 < frame.lineno <= end_lineno <= len(lines)):
        return None
    if frame.lineno == end_lineno:
        text = lines[frame.lineno - 1][colno:end_colno]
    else:
        text = lines[frame.lineno - 1][colno:] + "".join(lines[frame.lineno:end_lineno - 1]) + lines[end_lineno - 1][:end_colno]
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval"))
    except SyntaxError:
        return " ".join(text.split())


_CLOSING = re.compile(r"^[)\]}]+[:,]?$")


@functools.lru_cache(maxsize=64)
def _parse(source: str) -> ast.Module | None:
    """Parsed module source; SGLang's files do not change under a running worker."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _statement_at(source: str, lineno: int) -> tuple[ast.stmt | None, ast.stmt | None]:
    """The innermost statement containing *lineno* and the nearest ``if`` guarding it."""
    tree = _parse(source)
    if tree is None:
        return None, None
    best: ast.stmt | None = None
    guard: ast.stmt | None = None
    stack: list[tuple[ast.AST, ast.stmt | None]] = [(tree, None)]
    while stack:
        node, enclosing_if = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.stmt):
                continue
            start, end = child.lineno, getattr(child, "end_lineno", child.lineno) or child.lineno
            if not (start <= lineno <= end):
                continue
            header_end = _header_end(child)
            if header_end is not None and lineno <= header_end:
                best, guard = child, enclosing_if
                continue
            best, guard = child, enclosing_if
            stack.append((child, child if isinstance(child, ast.If) else enclosing_if))
    return best, guard


def _header_end(node: ast.AST) -> int | None:
    """Last line of a compound statement's header (``if cond:``), None for simple ones."""
    for attr in ("test", "iter", "items", "context_expr"):
        part = getattr(node, attr, None)
        if part is None:
            continue
        parts = part if isinstance(part, list) else [part]
        end = max(getattr(p, "end_lineno", 0) or getattr(getattr(p, "context_expr", p), "end_lineno", 0) for p in parts)
        body = getattr(node, "body", None)
        if body:  # the header runs to the line before the body: ``):`` of a parenthesised test
            end = max(end, body[0].lineno - 1)
        return int(end)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)):
        return node.lineno
    return None


def _statement_text(node: ast.AST) -> str:
    """Normal form of a statement: ``ast.unparse``; compound statements by header only."""
    if isinstance(node, ast.If):
        return f"if {ast.unparse(node.test)}:"
    if isinstance(node, ast.While):
        return f"while {ast.unparse(node.test)}:"
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}:"
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return "with " + ", ".join(ast.unparse(i) for i in node.items) + ":"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)):
        return ast.unparse(node).splitlines()[0]
    return ast.unparse(node)


def block_at(path: str, relative_file: str, lineno: int, *, most: int = 30) -> dict[str, Any]:
    """The code around ``lineno`` that people compare across releases, and its function.

    Whole functions are mostly noise in a cross-release diff (``__post_init__`` is hundreds of
    lines). The unit is the innermost compound statement holding the line (``if ...:`` with
    its body) while it has at most ``most`` lines, else the statement itself with a few
    lines around it.
    """
    lines = linecache.getlines(path)
    tree = _parse("".join(lines))
    out: dict[str, Any] = {"file": relative_file, "line": lineno, "function": None, "start": None, "source": None}
    if tree is None or not 0 < lineno <= len(lines):
        return out
    chain: list[ast.stmt] = []  # statements containing the line, outermost first
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt) and child.lineno <= lineno <= (child.end_lineno or child.lineno):
                chain.append(child)
                stack.append(child)
    functions = [n for n in chain if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if functions:
        out["function"] = functions[-1].name
    inside = chain[chain.index(functions[-1]) + 1:] if functions else chain
    start, end = lineno, lineno
    for statement in reversed(inside):
        first, last = statement.lineno, statement.end_lineno or statement.lineno
        if last - first + 1 > most:
            break
        start, end = first, last
    if (start, end) == (lineno, lineno) and inside:
        first, last = inside[-1].lineno, inside[-1].end_lineno or inside[-1].lineno
        start, end = max(first, lineno - 6), min(last, lineno + 6)
    out["start"] = start
    out["source"] = "".join(lines[start - 1 : end]).rstrip("\n")
    return out


def describe_frame(filename: str, lineno: int, function: str, package_root: str) -> dict[str, Any]:
    """Where a frame is, with the whole failing statement and its guard, for reports."""
    return dict(_describe_frame(filename, lineno, function, package_root))


@functools.lru_cache(maxsize=4096)
def _describe_frame(filename: str, lineno: int, function: str, package_root: str) -> dict[str, Any]:
    lines = linecache.getlines(filename)
    source = "".join(lines)
    node, guard = _statement_at(source, lineno)
    relative = os.path.relpath(filename, package_root) if filename.startswith(package_root) else filename
    frame: dict[str, Any] = {"file": relative.replace(os.sep, "/"), "line": lineno, "function": function}
    if node is not None:
        start = node.lineno
        end = _header_end(node) or getattr(node, "end_lineno", start) or start
        while end < len(lines) and _CLOSING.match(lines[end].strip()):
            end += 1  # ``)`` closing a parenthesised statement is not part of the AST node
        frame["statement"] = _statement_text(node)
        frame["statement_lines"] = [start, end]
        frame["source"] = "".join(lines[start - 1 : end]).rstrip("\n")
        context_start = max(1, (guard.lineno if guard is not None and guard.lineno >= start - 12 else start - 3))
        frame["context"] = [[n, lines[n - 1].rstrip("\n")] for n in range(context_start, min(len(lines), end + 2) + 1)]
    else:
        frame["statement"] = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        frame["statement_lines"] = [lineno, lineno]
        frame["source"] = frame["statement"]
        frame["context"] = []
    if guard is not None:
        frame["guard"] = {"line": guard.lineno, "text": _statement_text(guard)}
    return frame


#: This package's own directory: its frames (the evaluator calling SGLang) are never part of a failure.
_OWN_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TB_FILE = re.compile(r'^(?P<lead>\s*File ")(?P<path>[^"]+)(?P<rest>", line \d+)', re.MULTILINE)


def sglang_traceback(exc: BaseException, package_root: str, *, most: int = 4000) -> str:
    """The traceback as SGLang's own: what a user would paste into an SGLang issue.

    Three things are left out, because none of them is the failure: this package's frames
    (the evaluator calling ``prepare_server_args``) and whatever ran before SGLang's first frame;
    an exception that was being handled when the failure happened if it is an ``ImportError``
    (an import fallback such as ``try: import sgl_kernel`` leaves a leading ``ModuleNotFoundError``
    that has nothing to do with the failure; an explicit ``raise ... from`` cause is kept). Paths
    are made independent of this machine (:func:`portable_paths`). Every SGLang frame and the
    final exception are kept; a traceback longer than ``most`` characters keeps its last lines.
    """
    shown = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    node: traceback.TracebackException | None = shown
    while node is not None:
        frames = [f for f in node.stack if not os.path.abspath(f.filename).startswith(_OWN_ROOT + os.sep)]
        first = next((i for i, f in enumerate(frames) if os.path.abspath(f.filename).startswith(package_root + os.sep)), 0)
        node.stack = traceback.StackSummary.from_list(frames[first:])
        context = node.__context__
        if node.__cause__ is None and context is not None and _is_import_error(context):
            node.__context__ = None
        node = node.__cause__ or (None if node.__suppress_context__ else node.__context__)
    text = portable_paths("".join(shown.format()), package_root)
    if len(text) > most:
        text = text[-most:]
        text = text[text.find("\n") + 1:]  # whole lines only
    return text


def _is_import_error(shown: traceback.TracebackException) -> bool:
    exc_type = getattr(shown, "exc_type", None)  # deprecated from 3.13 on, in favour of exc_type_str
    if isinstance(exc_type, type):
        return issubclass(exc_type, ImportError)
    return str(getattr(shown, "exc_type_str", "")).rsplit(".", 1)[-1] in ("ImportError", "ModuleNotFoundError")


def portable_paths(text: str, package_root: str | None) -> str:
    """Traceback ``File "..."`` paths without this machine's directories.

    SGLang's files relative to the ``sglang`` package (``srt/server_args.py``, as in a failure's
    ``frame``); other files on the Python path as ``<site>/torch/...`` (installed packages) or
    ``<stdlib>/argparse.py``. A path under none of these is left as it is.
    """
    import sysconfig

    stdlib = os.path.abspath(sysconfig.get_paths()["stdlib"])
    roots = sorted({os.path.abspath(p) for p in sys.path if p and os.path.isabs(p)} | {stdlib}, key=len, reverse=True)

    def relative(match: re.Match[str]) -> str:
        path = match["path"]
        root = package_root or sglang_package_root(path)
        if root is not None and path.startswith(root + "/"):
            path = path[len(root) + 1:]
        else:
            for prefix in roots:
                if path.startswith(prefix + os.sep):
                    path = f"<{'stdlib' if prefix == stdlib else 'site'}>/" + path[len(prefix) + 1:].replace(os.sep, "/")
                    break
        return f"{match['lead']}{path}{match['rest']}"

    return _TB_FILE.sub(relative, text)


# -- failures read back from a log --------------------------------------------------
#
# A real launch reports its failure as traceback text in a log. These functions turn
# that text into the same ``exception`` / ``frame`` record ``Evaluator._failure`` builds
# in-process (innermost SGLang frame, whole statement from the AST, guard), so a launch's
# signature id equals the in-process one for the same failure. They read the source
# files named in the traceback, which exist where the launch ran.

_TB_HEADER = "Traceback (most recent call last):"
_TB_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+?)\s*$')
_TB_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_TB_MARKS = re.compile(r"^\s*[~^]+\s*$")
_LOG_LINE = re.compile(r"^(\[\d{4}-\d\d-\d\d|\d{4}-\d\d-\d\d[ T]|(INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ])")


def sglang_package_root(filename: str) -> str | None:
    """The ``sglang`` package directory a file belongs to, or None.

    Walks up to the outermost directory named ``sglang`` that is a package (so a clone
    at ``~/sglang/python/sglang`` resolves to the inner one); by name alone when the
    file is not on this machine.
    """
    parts = filename.replace("\\", "/").split("/")
    candidates = [i for i, part in enumerate(parts) if part == "sglang" and i < len(parts) - 1]
    packaged = [i for i in candidates if os.path.isfile("/".join(parts[: i + 1]) + "/__init__.py")]
    chosen = packaged[0] if packaged else (candidates[-1] if candidates else None)
    return "/".join(parts[: chosen + 1]) if chosen is not None else None


def traceback_blocks(text: str) -> list[dict[str, Any]]:
    """Every Python traceback in ``text``: frames, exception type and message, raw lines.

    Each block: ``{"start": line index, "context": the text before the header on its
    line, "frames": [{"file", "line", "function", "code", "marks"}], "type",
    "message", "text"}``. ``type`` keeps only the class name (``torch.OutOfMemoryError``
    -> ``OutOfMemoryError``), as ``type(exc).__name__`` does in-process.
    """
    lines = text.splitlines()
    blocks: list[dict[str, Any]] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        at = line.find(_TB_HEADER)
        if at < 0:
            index += 1
            continue
        start, frames = index, []
        context = line[:at].strip() or (lines[index - 1].strip() if index > 0 else "")
        index += 1
        while index < len(lines):
            match = _TB_FRAME.match(lines[index])
            if match:
                frames.append({"file": match["file"], "line": int(match["line"]), "function": match["function"],
                               "code": "", "marks": ""})
                index += 1
                continue
            if frames and lines[index].startswith("    "):
                if _TB_MARKS.match(lines[index]):
                    frames[-1]["marks"] = lines[index]
                elif not frames[-1]["code"]:
                    frames[-1]["code"] = lines[index]
                index += 1
                continue
            break
        exc_type, message = "", ""
        if index < len(lines):
            match = _TB_EXCEPTION.match(lines[index].strip())
            if match:
                exc_type = match["type"].rsplit(".", 1)[-1]
                body = [match["message"] or ""]
                index += 1
                while index < len(lines) and lines[index].strip() and _TB_HEADER not in lines[index] \
                        and not _LOG_LINE.match(lines[index]) and not lines[index].startswith(
                            ("During handling of the above exception", "The above exception was")):
                    body.append(lines[index])
                    index += 1
                message = "\n".join(body).strip()
        blocks.append({"start": start, "context": context, "frames": frames, "type": exc_type,
                       "message": message, "text": "\n".join(lines[start:index])})
    return blocks


def _expression_from_marks(code: str, marks: str) -> str | None:
    """The raising sub-expression shown by 3.11+ ``~~^^`` marks under a traceback line."""
    if not marks.strip():
        return None
    begin = len(marks) - len(marks.lstrip())
    end = len(marks.rstrip())
    text = code[begin:end]
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval"))
    except SyntaxError:
        return " ".join(text.split()) or None


def _without_own_frames(text: str) -> str:
    """A logged traceback without this package's frames (a launch under a simulated box runs through ``launch_main``)."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines():
        match = _TB_FRAME.match(line)
        if match:
            skipping = os.path.abspath(match["file"]).startswith(_OWN_ROOT + os.sep)
        elif skipping and not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


def failure_from_block(block: dict[str, Any]) -> dict[str, Any]:
    """The in-process failure record (``exception``, ``frame``) of one traceback block."""
    failure: dict[str, Any] = {"exception": {"type": block["type"], "module": "", "message": block["message"]},
                               "traceback_tail": portable_paths(_without_own_frames(block["text"])[-4000:], None)}
    inner = None
    for frame in block["frames"]:
        root = sglang_package_root(frame["file"])
        if root is not None:
            inner = (frame, root)
    if inner is not None:
        frame, root = inner
        filename = os.path.abspath(frame["file"])
        if os.path.isfile(filename):
            described = describe_frame(filename, frame["line"], frame["function"], root)
        else:  # the log came from another machine: what the traceback itself shows
            relative = os.path.relpath(filename, root).replace(os.sep, "/")
            described = {"file": relative, "line": frame["line"], "function": frame["function"],
                         "statement": frame["code"].strip(), "from_log_only": True}
        expression = _expression_from_marks(frame["code"], frame["marks"])
        if expression:
            described["expression"] = expression
        failure["frame"] = described
    elif block["frames"]:
        last = block["frames"][-1]
        failure["frame"] = {"file": last["file"], "line": last["line"], "function": last["function"],
                            "statement": last["code"].strip(), "outside_sglang": True}
    return failure

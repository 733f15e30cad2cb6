#!/usr/bin/env python
"""What the launch path's cuts leave unrun: for each stage that stops one of SGLang's functions part-way, the
``raise`` and ``assert`` statements after the cut, on each release asked for, and what their conditions read.

The stages that cut a function short (``inside/launch/``):

* ``model_runner``: ``ModelRunner.__init__`` stops at its device step, the call of ``init_torch_distributed``;
* ``memory_pool`` (0.4.6 … 0.5.13): the runner's ``initialize`` runs from ``load_model()`` to the statement that
  calls ``init_memory_pool``; what follows it (the backends, the graphs) is other stages' or never runs;
* ``cuda_graph_sizes``: the graph runner's ``__init__`` stops at the statement that calls
  ``get_batch_sizes_to_capture``; the capture after it never runs;
* ``draft_worker`` (where ``SpeculativeAlgorithm.create_worker`` exists): the speculative worker's constructor stops
  at its draft runner's device step. Listed per class ``create_worker`` returns for the algorithms the stage builds
  (``eagle_worker*``, ``multi_layer_eagle_worker*``, ``standalone_worker*``): its ``__init__`` after the statement that
  builds the draft's runner (an inner draft worker, a ``TpModelWorker``, ``super().__init__`` of one), then down the
  chain each class built there, after its own such statement (the draft's ``TpModelWorker`` after the call that
  builds its ``ModelRunner``), with the worker's methods they call. A class whose module does not import here is
  named. The draft runner's own ``__init__`` after its device step is the ``model_runner`` and ``memory_pool`` rows'
  code, run for the target only.

A check is listed with the names its condition reads (an ``assert``'s test; a ``raise``'s enclosing ``if`` tests)
and a reading: **configuration** where every name read is a server argument, the model's config or a value the
runner copied from them; **device** where it reads the built model, a pool, a tensor, a stream or CUDA; else
**other**. A configuration check after a cut is one a pass does not vouch for unless a stage runs it:
docs/fidelity.md lists them.

Runs inside each release's environment (the orchestrator never imports SGLang).

Usage: python scripts/stage_cuts.py [--release 0.5.23 ...] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INSIDE = r'''
import ast, inspect, json, re, sys, textwrap, types
package = types.ModuleType("bisect_spec"); package.__path__ = [sys.argv[1]]; sys.modules["bisect_spec"] = package
import torch
try:
    torch.library.Library("torchvision", "DEF").define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
except Exception:
    pass
import importlib

DEVICE = ("torch.", "cuda", "device", "self.model.", "self.model)", "pool", "stream", "graph", "tensor", "buffer",
          "get_available_gpu_memory", "memory", "self.attn_backend", "kernel")
CONFIG = ("server_args", "model_config", "hf_config", "support_pp", "quant", "self.is_", "spec_algorithm", "speculative",
          "tp_size", "pp_size", "dp_size",
          "page_size", "is_draft_worker", "args.", "config", "envs.", "_size", "enable_", "disable_", "dtype")

def reads(node):
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Attribute, ast.Name, ast.Call)):
            names.add(ast.unparse(sub))
    return sorted(n for n in names if not any(n != m and m.startswith(n + ".") for m in names))[:12]

def kind(condition):
    text = condition.lower()
    if any(word in text for word in DEVICE):
        return "device"
    return "configuration" if any(word in text for word in CONFIG) else "other"

def checks_of(function, statements_of, owner, depth, seen, via):
    """The asserts and raises of ``statements_of(body)``, and of the methods of ``owner`` they call on ``self``."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
        first = inspect.getsourcelines(function)[1]
        filename = inspect.getsourcefile(function).split("/sglang/")[-1]
    except (OSError, TypeError):
        return []
    body = ast.parse(source).body[0].body
    statements = statements_of(body)
    if statements is None:
        return None
    found = []
    called = []
    def visit(items, guards):
        for statement in items:
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                    called.append(node.func.attr)
            if isinstance(statement, ast.Assert):
                condition = " and ".join(guards + [ast.unparse(statement.test)])
                found.append({"line": first + statement.lineno - 1, "file": filename, "via": via,
                              "statement": ast.unparse(statement)[:160],
                              "reads": sorted({r for g in guards + [ast.unparse(statement.test)]
                                               for r in reads(ast.parse(g, mode="eval"))})[:12],
                              "kind": kind(condition)})
            elif isinstance(statement, ast.Raise):
                condition = " and ".join(guards) or "always"
                found.append({"line": first + statement.lineno - 1, "file": filename, "via": via,
                              "statement": ast.unparse(statement)[:160],
                              "reads": sorted({r for g in guards for r in reads(ast.parse(g, mode="eval"))})[:12],
                              "kind": kind(condition) if guards else "other"})
            if isinstance(statement, ast.If):
                visit(statement.body, guards + [ast.unparse(statement.test)])
                visit(statement.orelse, guards + ["not (" + ast.unparse(statement.test) + ")"])
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            else:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(statement, field, None)
                    if isinstance(inner, list):
                        visit([x for x in inner if isinstance(x, ast.stmt)], guards)
                for handler in getattr(statement, "handlers", []) or []:
                    visit(handler.body, guards)
    visit(statements, [])
    if depth > 0:
        for name in dict.fromkeys(called):
            method = getattr(owner, name, None)
            if not callable(method) or name in seen or not hasattr(method, "__code__"):
                continue
            seen.add(name)
            more = checks_of(method, lambda b: b, owner, depth - 1, seen, via + [name])
            found.extend(more or [])
    return found

def checks_after(function, cut_name, owner, depth=2, is_cut=None):
    """The checks after the first statement of ``function`` that calls ``cut_name`` (or a call ``is_cut`` accepts)."""
    is_cut = is_cut or (lambda n: getattr(n.func, "attr", None) == cut_name or getattr(n.func, "id", None) == cut_name)
    def after_cut(body):
        cut = next((i for i, s in enumerate(body) if any(isinstance(n, ast.Call) and is_cut(n) for n in ast.walk(s))),
                   None)
        return None if cut is None else body[cut + 1:]
    seen = {cut_name, "__init__", "initialize"}
    found = checks_of(function, after_cut, owner, depth, seen, [])
    if found is None:
        return None
    return {"function": function.__qualname__, "file": inspect.getsourcefile(function).split("/sglang/")[-1],
            "cut": cut_name, "checks": found}

def own_init(cls):
    """The ``__init__`` written in ``cls`` or the nearest base that writes one (None: object's)."""
    for klass in cls.__mro__[:-1]:
        if "__init__" in vars(klass) and hasattr(vars(klass)["__init__"], "__code__"):
            return klass, vars(klass)["__init__"]
    return None, None

def builds_runner(method):
    """Whether ``method`` (a method of the worker) calls a ``...ModelRunner`` class itself."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError):
        return False
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.endswith("ModelRunner")
               for n in ast.walk(tree))

def draft_cut(cls, tp_worker, depth=0):
    """What ``cls.__init__`` calls that builds the draft's runner: the draft's ``ModelRunner``, a ``TpModelWorker``
    (or ``super().__init__`` of one: 0.5.x's EAGLEWorker is one), or a class whose own ``__init__`` builds one
    (0.5.12+'s v2 workers' ``EagleDraftWorker``). (the callee's name, the class it builds) or None."""
    klass, init = own_init(cls)
    if init is None or depth > 3:
        return None
    try:
        body = ast.parse(textwrap.dedent(inspect.getsource(init))).body[0]
    except (OSError, TypeError):
        return None
    names = vars(sys.modules[klass.__module__])
    for node in ast.walk(body):
        if not isinstance(node, ast.Call):
            continue
        func, built = node.func, None
        if isinstance(func, ast.Name) and func.id.endswith("ModelRunner"):  # imported in the method, too
            return ast.unparse(func), func.id
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
                and builds_runner(getattr(cls, func.attr, None)):  # TpModelWorker's ``self._init_model_runner()``
            return ast.unparse(func), "ModelRunner"
        if isinstance(func, ast.Name) and isinstance(names.get(func.id), type):
            built = names[func.id]
        elif isinstance(func, ast.Attribute) and func.attr == "__init__":
            if isinstance(func.value, ast.Call) and getattr(func.value.func, "id", None) == "super":
                built = klass.__mro__[1]
            elif isinstance(func.value, ast.Name) and isinstance(names.get(func.value.id), type):
                built = names[func.value.id]
        if built is None:
            continue
        if built.__name__.endswith("ModelRunner") or (tp_worker is not None and issubclass(built, tp_worker)) \
                or draft_cut(built, tp_worker, depth + 1) is not None:
            return ast.unparse(func), built
    return None

def load(module):
    """``module``, imported as the worker imports SGLang: a GPU-only package whose absence fails it stubbed (0.5.12's
    ``tp_worker`` reaches ``sgl_kernel`` through the scheduler)."""
    from bisect_spec.inside.evaluator import with_stubs
    return with_stubs(lambda: importlib.import_module(module), [], forget=module)

def draft_worker_cuts():
    """The draft worker stage's cuts: each speculative worker class ``create_worker`` returns for the algorithms the
    stage builds (EAGLE family, STANDALONE: the modules ``eagle_worker*``, ``multi_layer_eagle_worker*``,
    ``standalone_worker*``), its ``__init__`` after the statement that builds the draft's runner, and down the
    chain the classes it builds there (the inner draft worker, the draft's ``TpModelWorker``), each after its own
    such statement. None where the release has no ``create_worker`` (the stage builds no worker there)."""
    spec_info = importlib.import_module("sglang.srt.speculative.spec_info")
    create = getattr(spec_info.SpeculativeAlgorithm, "create_worker", None)
    if create is None:
        return None
    tp_worker = load("sglang.srt.managers.tp_worker").TpModelWorker
    classes, unimportable = [], []
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(create)))):
        if isinstance(node, ast.ImportFrom) and node.module and re.search(
                r"\.(eagle_worker|multi_layer_eagle_worker|standalone_worker)(_v2)?$", node.module):
            for alias in node.names:
                try:
                    classes.append(getattr(load(node.module), alias.name))
                except Exception as exc:  # the stage cannot build it either (its own verdict or stop)
                    unimportable.append(f"{alias.name} ({type(exc).__name__}: {str(exc)[:60]})")
    cuts, done = [], set()
    pending = list(dict.fromkeys(classes))
    while pending:
        cls = pending.pop(0)
        found = draft_cut(cls, tp_worker)
        klass, init = own_init(cls)
        if found is None or init in done:
            continue
        done.add(init)
        callee, built = found
        cut = checks_after(init, callee, klass, depth=1, is_cut=lambda n, c=callee: ast.unparse(n.func) == c)
        if cut is not None:
            cut["builds"] = getattr(built, "__name__", built)
            cuts.append(cut)
        if isinstance(built, type) and not built.__name__.endswith("ModelRunner"):
            pending.append(built)
    for name in unimportable:
        cuts.append({"function": name.split(" ")[0] + ".__init__", "file": "", "cut": "(its module does not import)",
                     "unimportable": name, "checks": []})
    return cuts

out = {"release": __import__("sglang").__version__, "cuts": {}}
runner = load("sglang.srt.model_executor.model_runner").ModelRunner
out["cuts"]["model_runner"] = checks_after(runner.__init__, "initialize", runner)
if not hasattr(runner, "alloc_memory_pool"):
    out["cuts"]["memory_pool"] = checks_after(runner.initialize, "init_memory_pool", runner)
for module, name in (("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner"),
                     ("sglang.srt.model_executor.runner.decode_cuda_graph_runner", "DecodeCudaGraphRunner"),
                     ("sglang.srt.model_executor.runner.base_cuda_graph_runner", "BaseCudaGraphRunner")):
    try:
        cls = getattr(load(module), name)
    except Exception:
        continue
    found = checks_after(cls.__init__, "get_batch_sizes_to_capture", cls, depth=1)
    if found is not None:
        out["cuts"]["cuda_graph_sizes"] = found
        break
out["cuts"]["draft_worker"] = draft_worker_cuts()
print(json.dumps(out))
'''


def measure(release: str) -> dict[str, object]:
    from bisect_spec.runtime import environments

    python = environments.get(release).interpreter()
    done = subprocess.run([python, "-c", INSIDE, str(ROOT / "bisect_spec")], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        return {"release": release, "error": done.stderr.strip().splitlines()[-1:]}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def markdown(results: list[dict[str, object]]) -> str:
    lines = ["| release | stage (cut) | configuration checks after the cut | device | other |", "|---|---|---|---|---|"]
    for result in results:
        cuts = result.get("cuts") or {}
        assert isinstance(cuts, dict)
        for stage, cut in cuts.items():
            if not cut:
                continue
            if isinstance(cut, list):  # the draft worker: one cut per class in the chain that builds its runner
                where = "; ".join(f"`{c['function']}` after `{c['cut']}`" for c in cut if "unimportable" not in c)
                missing = [c["unimportable"] for c in cut if "unimportable" in c]
                if missing:
                    where += "; not imported here: " + ", ".join(missing)
                checks = [dict(c, via=[one["function"].removesuffix(".__init__"), *c["via"]])
                          for one in cut for c in one["checks"]]
            else:
                where, checks = f"`{cut['function']}` after `{cut['cut']}`", cut["checks"]
            config = [c for c in checks if c["kind"] == "configuration"]
            shown = "<br>".join(f"`{c['statement'][:90]}` ({c['file']}:{c['line']}"
                                + (f", in {'.'.join(c['via'])}" if c["via"] else "") + ")" for c in config) or "none"
            lines.append(f"| {result['release']} | {stage} ({where}) "
                         f"| {shown} | {sum(c['kind'] == 'device' for c in checks)} "
                         f"| {sum(c['kind'] == 'other' for c in checks)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", action="append")
    parser.add_argument("--markdown", action="store_true")
    options = parser.parse_args()
    from bisect_spec.errors import BisectSpecError
    from bisect_spec.runtime import environments

    try:
        releases = [environments.get(r).release for r in options.release] if options.release else environments.installed()
        results = [measure(release) for release in releases]
    except BisectSpecError as exc:  # an unknown or uninstalled release: one line naming the fix
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(results) if options.markdown else "\n".join(json.dumps(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

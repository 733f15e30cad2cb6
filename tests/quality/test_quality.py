"""Project hygiene: lint, types, import boundaries, README ↔ CI."""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import Janitor

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", [
    "bisect_spec.model.signature",
    "bisect_spec.model.flags",
    "bisect_spec.model.outcome",
    "bisect_spec.reduce.hints",
    "bisect_spec.reduce.shrink",
    "bisect_spec.search.plan",
    "bisect_spec.search.covering",
    "bisect_spec.model.findings",
    "bisect_spec.report.text",
    "bisect_spec.reduce.bisection",
    "bisect_spec.reduce.commits",
    "bisect_spec.versions",
    "bisect_spec.report.report_model",
    "bisect_spec.report.html_page",
    "bisect_spec.report.night",
])
def test_pure_modules_start_no_processes_and_know_no_cli(module: str) -> None:
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "bad = [m for m in ('subprocess', 'click', 'bisect_spec.runtime.worker', 'multiprocessing') if m in sys.modules]; "
            "print(','.join(bad))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == ""


#: The modules that may start processes: the process module (evaluation workers), the warm daemon (it
#: forks to detach), the supervisor between bisect-spec and a real server, and inside an environment the
#: launch oracle (it forks launches). simulated_gpu only *intercepts* subprocess calls (nvidia-smi).
#: The modules that may start processes, and what each starts: everything else asks one of them.
PROCESS_STARTERS = {
    "runtime/processes.py": "pip, venv, git, a warm worker's daemon; the one thread evaluation workers start on",
    "runtime/worker.py": "a pool's zygote, or its evaluation workers where forking is off (on processes.spawn's thread)",
    "inside/worker_main.py": "as a pool's zygote, forks its evaluation workers (SGLang imported once for all)",
    "runtime/warm_daemon.py": "forks itself into the background",
    "launch/supervision.py": "the supervisor of a real server",
    "launch/supervisor_main.py": "the server under supervision",
    "inside/launch_oracle.py": "forks one launch_server path per configuration from a zygote",
    "inside/simulated_gpu.py": "answers nvidia-smi queries in place of the process SGLang would start",
}
_STARTS_A_PROCESS = re.compile(r"\bos\.(?:fork|forkpty|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?|system|popen)\(")


def test_only_the_process_modules_start_processes() -> None:
    package = ROOT / "bisect_spec"
    offenders = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py")
                       if {m.split(".")[0] for m in imported_modules(p)} & {"subprocess", "multiprocessing"}
                       or _STARTS_A_PROCESS.search(p.read_text()))
    assert offenders == sorted(PROCESS_STARTERS), "a module starts processes that is not listed with why in PROCESS_STARTERS"


#: Each layer and the layers it may import (``root``: errors, versions; ``inside`` runs in SGLang's
#: environments and is imported by the orchestrator only as files to run or embed). api, entry and the
#: package itself sit above everything. See the table at the top of docs/internals.md.
#:
#: The CLI is a thin layer over the public API (click's and sqlite-utils' shape): what a command runs, and every
#: name it needs to build the input (Config, profile names, executors, strategies), comes from ``api``; library
#: errors become CLI errors in one place (``cli/errors.py``). It may import ``report`` too: the renderers there
#: turn the API's results into the text a person reads (``report.text``, ``report.diff_text``), and are shared
#: with the Markdown and HTML reports; routing them through the façade would make the API a presentation layer.
#: The runtime only from the command modules in :data:`CLI_ALLOWANCES`.
LAYERS: dict[str, set[str]] = {
    "model": {"root"},
    "search": {"model", "root"},
    "reduce": {"model", "search", "root"},
    "report": {"model", "search", "root"},
    "runtime": {"model", "root", "inside"},
    "launch": {"model", "runtime", "inside", "root"},
    "workflows": {"model", "search", "reduce", "report", "runtime", "launch", "inside", "root"},
    "cli": {"api", "report", "root"},
    "inside": set(),
    # the public façade: every layer below the CLI, and never the CLI
    "api": {"model", "search", "reduce", "report", "runtime", "launch", "workflows", "root"},
    # the console script and ``python -m bisect_spec``: the CLI, started once the façade is importable
    "entry": {"cli", "api", "root"},
    # errors, versions and the package's ``__init__`` (``__version__``, the model types it re-exports)
    "root": {"model"},
}
#: CLI modules that may import a layer beyond the ``cli`` row, each with why: the commands that manage the
#: runtime's own state, which no workflow wraps (a workflow for "list the warm workers" would only rename it).
#: Everything else they run (the release smoke, a ``--grep`` check) still goes through ``api``.
CLI_ALLOWANCES: dict[str, dict[str, str]] = {
    "bisect_spec.cli.env": {"runtime": "env manages the release environments themselves: install, list, remove, "
                                      "a release's Python (runtime.environments, sources, processes)"},
    "bisect_spec.cli.runs": {"runtime": "runs reads the run store itself: list, resolve an id, read a run "
                                       "(runtime.store)"},
    "bisect_spec.cli.workers": {"runtime": "workers lists and stops the warm workers (runtime.warm)"},
}
#: the package itself counts as root: its ``__init__`` holds ``__version__`` and re-exports model types
_ROOT_MODULES = {"bisect_spec.errors": "root", "bisect_spec.versions": "root", "bisect_spec": "root"}


def _layer(module: str) -> str:
    if module in _ROOT_MODULES:
        return _ROOT_MODULES[module]
    parts = module.split(".")
    if module in ("bisect_spec.entry", "bisect_spec.__main__"):
        return "entry"
    return parts[1] if len(parts) > 2 else "api" if module == "bisect_spec.api" else parts[-1]


def test_every_import_follows_the_layers() -> None:
    """A module imports only its own layer and the layers below it (lazy and TYPE_CHECKING imports count)."""
    graph = _package_imports()
    assert {_layer(m) for m in graph} >= set(LAYERS), "a layer named in LAYERS has no package"
    crossings = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                       if _layer(module) in LAYERS and _layer(target) != _layer(module)
                       and _layer(target) not in LAYERS[_layer(module)] | set(CLI_ALLOWANCES.get(module, {})))
    assert crossings == []


def test_the_cli_reaches_the_runtime_only_from_the_env_runs_and_workers_commands() -> None:
    """Every other command runs through ``api``; an allowance no module uses any more is dropped, not kept."""
    graph = _package_imports()
    assert set(CLI_ALLOWANCES) <= set(graph), "an allowance names a module that does not exist"
    assert all(_layer(module) == "cli" for module in CLI_ALLOWANCES)
    used = {module: {_layer(t) for t in graph[module]} - LAYERS["cli"] - {"cli"} for module in graph
            if _layer(module) == "cli"}
    assert {module: layers for module, layers in used.items() if layers} == {
        module: set(allowed) for module, allowed in CLI_ALLOWANCES.items()}


def imported_modules(path: Path) -> set[str]:
    """Modules a file really imports (import statements, not text inside generated-script templates)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_only_the_worker_side_imports_sglang() -> None:
    importers = sorted(p.name for p in (ROOT / "bisect_spec").rglob("*.py") if "inside" not in p.parts
                       if any(m.split(".")[0] in ("sglang", "torch") for m in all_imports(p)))
    assert importers == []
    inside = sorted(p.name for p in (ROOT / "bisect_spec" / "inside").glob("*.py")
                    if any(m.split(".")[0] in ("sglang", "torch") for m in all_imports(p)))
    assert "evaluator.py" in inside and "simulated_gpu.py" in inside


def all_imports(path: Path) -> set[str]:
    """Every module a file imports, relative imports made absolute (``from . import x`` -> ``pkg.x``)."""
    package = ".".join(path.relative_to(ROOT).parent.parts)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = node.module if node.level == 0 else ".".join(filter(None, [base, node.module]))
            if module:
                found.add(module)
                found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_the_orchestrator_parses_python_only_behind_the_parser_lock() -> None:
    """A sweep's shrinks run in threads; two ``ast.parse`` at once can fail on CPython 3.11 (model/syntax.py
    says why), so every parse outside ``inside/`` goes through ``model.syntax``."""
    direct = []
    for path in sorted((ROOT / "bisect_spec").rglob("*.py")):
        if "inside" in path.parts or path.name == "syntax.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parse"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"):
                direct.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert direct == []


def test_the_inside_imports_nothing_from_the_orchestrator() -> None:
    """Code that runs in a release environment (bisect_spec/inside) talks to the orchestrator through
    the wire protocol only: it imports nothing of bisect_spec outside its own package."""
    offenders = {}
    for path in sorted((ROOT / "bisect_spec" / "inside").rglob("*.py")):
        outside = sorted(m for m in all_imports(path) if m.startswith("bisect_spec")
                         and not m.startswith("bisect_spec.inside") and m != "bisect_spec")
        if outside:
            offenders[path.relative_to(ROOT / "bisect_spec" / "inside").as_posix()] = outside
    assert offenders == {}
    modules = {p.stem for p in (ROOT / "bisect_spec" / "inside").glob("*.py")}
    assert {"worker_main", "evaluator", "statements", "simulated_gpu", "version_shims", "launch_main"} <= modules
    assert (ROOT / "bisect_spec" / "inside" / "launch" / "__init__.py").is_file()


def test_the_modules_repro_py_embeds_import_nothing_of_bisect_spec() -> None:
    """``repro.py`` loads ``simulated_gpu.py`` and the package ``launch/`` (which loads ``inside``'s other modules
    from beside it: ``launch/siblings.py``) by their paths and runs them where bisect-spec is not installed: an
    import of bisect_spec there fails only in the reproducer."""
    def unguarded(path: Path) -> list[str]:
        tree = ast.parse(path.read_text())
        guarded = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.Try)
                   and any(isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                           for h in node.handlers)
                   for statement in node.body for inner in ast.walk(statement)}
        return sorted(node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                      and node.module.startswith("bisect_spec") and id(node) not in guarded) + sorted(
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) and id(node) not in guarded
            for alias in node.names if alias.name.startswith("bisect_spec"))

    inside = ROOT / "bisect_spec" / "inside"
    names = ["simulated_gpu.py", *(f"launch/{p.name}" for p in sorted((inside / "launch").glob("*.py")))]
    embedded = {name: unguarded(inside / name) for name in names}
    assert {name: found for name, found in embedded.items() if found} == {}


def _package_imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports, at any depth of its code (lazy imports and
    ``if TYPE_CHECKING:`` blocks count: a type a module needs is a dependency too)."""
    package = ROOT / "bisect_spec"
    modules = {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
               for f in package.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                parts = base.split(".")
                target = (".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                          if node.level else node.module or "")
                for candidate in [target, *(f"{target}.{alias.name}" for alias in node.names)]:
                    if candidate in modules and candidate != name:
                        graph[name].add(candidate)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules and a.name != name)
    return graph


def test_no_import_cycles() -> None:
    """One idea per module, layered: no module reaches itself through imports, lazy ones included."""
    graph = _package_imports()

    def reaches(start: str) -> list[str] | None:
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = {name: cycle for name in graph if name != "bisect_spec" and (cycle := reaches(name)) is not None
              and "bisect_spec" not in cycle}
    assert cycles == {}


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line.strip() for line in readme[:40] if line.strip().startswith(("python", "bash", "./"))]
    assert len(commands) >= 2
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_ci_ends_by_checking_that_no_process_of_the_run_is_left() -> None:
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[-2:] == ["python3 scripts/ci_leftovers.py --since-pid $$ --grace 30 || status=1", 'exit "$status"']


def test_the_ci_leftover_check_names_and_ends_a_process_of_its_run(janitor: Janitor) -> None:
    env = {**os.environ, "BISECT_SPEC_CI_RUN": f"test-{os.getpid()}-{time.time_ns()}"}
    check = [sys.executable, str(ROOT / "scripts" / "ci_leftovers.py"), "--since-pid", str(os.getpid()), "--grace", "0"]
    left = janitor.tool(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], env=env))
    found = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60)
    assert found.returncode == 1, found.stderr
    assert f"  pid {left.pid} (parent {os.getpid()}, " in found.stdout
    assert "carries the run's marker" in found.stdout and "import time; time.sleep(3600)" in found.stdout
    assert left.wait(timeout=30) == -signal.SIGKILL
    clean = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60)
    assert (clean.returncode, clean.stdout) == (0, "no process of this CI run is left\n")


@pytest.mark.skipif(shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
                    reason="ruff not installed")
def test_ruff_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    result = subprocess.run([ruff, "check", "bisect_spec", "tests", "scripts"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout


def test_mypy_strict_clean() -> None:
    pytest.importorskip("mypy")
    result = subprocess.run([sys.executable, "-m", "mypy"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout


def test_example_workflow_uses_real_commands_and_options() -> None:
    """Every ``bisect-spec ...`` line of the example CI workflow parses with today's CLI."""
    import shlex

    import click

    from bisect_spec.cli.commands import main

    lines = [line.split("run:", 1)[-1].strip() for line in
             (ROOT / "examples" / "nightly-workflow.yml").read_text().splitlines()
             if line.split("run:", 1)[-1].strip().startswith("bisect-spec ")]
    assert len(lines) >= 4
    for line in lines:
        words = shlex.split(line.split("#")[0].replace('"$latest"', "nightlies/x"))
        assert words[0] == "bisect-spec", line
        command = main.commands[words[1]]
        context = click.Context(command, info_name=words[1], resilient_parsing=False)
        command.parse_args(context, words[2:])  # raises on an unknown option or a bad value


def test_ray_is_imported_only_when_the_ray_executor_runs() -> None:
    """Ray is an optional extra: the CLI and the executor modules load without it."""
    code = ("import sys, bisect_spec.cli.commands, bisect_spec.runtime.executor, bisect_spec.runtime.ray_executor, "
            "bisect_spec.launch.ray_launch; "
            "print('ray' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "False"


@pytest.mark.slow
def build_wheel(directory: Path) -> Path:
    """This checkout's wheel, built into ``directory``. One build at a time: setuptools builds in the
    checkout's own ``build/`` folder, which two pytest-xdist workers building at once would share."""
    import fcntl
    import hashlib
    import tempfile

    lock = Path(tempfile.gettempdir()) / f"bisect-spec-wheel-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]}.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(directory), str(ROOT)], check=True, capture_output=True, timeout=600)
    return next(directory.glob("bisect_spec-*.whl"))


def test_the_wheel_carries_every_data_file_the_package_reads(tmp_path: Path) -> None:
    """A non-editable install has the strategies, profiles and release pins (no symlinks to outside)."""
    import zipfile

    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    data = ROOT / "bisect_spec" / "data"
    expected = {str(p.relative_to(ROOT)) for p in data.rglob("*") if p.is_file() and p.suffix in (".json", ".toml")}
    assert expected, "no data files found"
    assert {"bisect_spec/data/strategies/default.toml", "bisect_spec/data/releases.json"} <= expected
    assert expected - names == set()
    assert not any(p.is_symlink() for p in data.rglob("*"))


@pytest.mark.slow
@pytest.mark.sglang
def test_a_quick_sweep_runs_from_the_wheel_in_a_fresh_venv(tmp_path: Path) -> None:
    """The README's first command works from a non-editable install: wheel, fresh venv, a sweep."""
    from bisect_spec.runtime import environments
    from tests.conftest import require_release

    require_release("0.5.23")
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-2000:]
    env = {**os.environ, "BISECT_SPEC_HOME": str(environments.home())}
    sweep = subprocess.run([str(venv / "bin" / "bisect-spec"), "sweep", "--sglang", "0.5.23", "--model", "llama-3.1-8b",
                            "--hardware", "h100", "--strategy", "quick", "--budget", "0", "--jobs", "1", "--no-shrink",
                            "--no-cache", "--runs-dir", str(tmp_path / "runs"), "--json"],
                           capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    import json

    summary = json.loads(sweep.stdout)["summary"]
    assert summary["signatures"], "the quick strategy finds failures on 0.5.23"

"""``bug_report.md``: SGLang's own bug-report form, filled in, ready to paste.

The form is SGLang's ``.github/ISSUE_TEMPLATE/1-bug-report.yml``: a title starting ``[Bug]``,
then **Checklist**, **Describe the bug**, **Reproduction** and **Environment**, in that
order. This module renders it from facts the caller gathered (:class:`Facts`); it evaluates
nothing and writes nothing. Its rules:

* a checklist box is ticked only for what was done: bisect-spec never searched SGLang's
  issues, so that box stays empty, and "the bug persists in the latest version" is ticked
  only when the reproducer was evaluated on the newest release and failed there the same way;
* the model and the draft are named as the user runs them (a Hugging Face id, or the user's
  own path), never by a placeholder, and no path of this machine appears: file names in
  tracebacks are relative to the package they belong to, and the materialised profiles are
  replaced by the names the user knows (:func:`scrub`);
* the Environment section is what ``python3 -m sglang.check_env`` would print on the
  simulated box, and says so, and what was simulated and how (:func:`simulated_check_env`);
* workarounds come in the order :func:`bisect_spec.reduce.repair.nearest_working` ranked them, each a
  full launch command with the reason for its rank; none switches speculative decoding off.

``check_env``'s lines are rebuilt here rather than by running SGLang's module: on a CPU it
prints the CPU branch (no GPUs, CPU torch) and would describe this machine, not the box.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bisect_spec.model.flags import PATH_TOKEN, Config, path_variable, placeholder_paths
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.syntax import parse_module

TEMPLATE = "https://github.com/sgl-project/sglang/blob/main/.github/ISSUE_TEMPLATE/1-bug-report.yml"
ISSUES = "https://github.com/sgl-project/sglang/issues"
DRAFT_TOKEN = "@draft"
#: check_env's own list when its source cannot be read (0.5.x releases)
FALLBACK_PACKAGES = ("sglang", "sgl_kernel", "flashinfer_python", "triton", "transformers", "torchao", "numpy",
                     "aiohttp", "fastapi", "huggingface_hub", "interegular", "modelscope", "orjson", "outlines",
                     "packaging", "psutil", "pydantic", "python-multipart", "pyzmq", "uvicorn", "uvloop", "vllm",
                     "xgrammar", "openai", "tiktoken", "anthropic", "litellm", "decord")


@dataclass(frozen=True)
class Names:
    """How the report names the model and the draft (Hugging Face ids or the user's own paths)."""

    model: str
    draft: str | None
    #: where the names come from, one sentence each
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReleaseVerdict:
    """The reproducer on one release: ``same`` when it fails there with the same cross-release key."""

    release: str
    verdict: str  # passed | failed | usage | unsupported | skipped | ...
    same: bool
    headline: str


@dataclass
class Facts:
    """Everything the report says, gathered by :func:`bisect_spec.api.write_reproducers`."""

    signature: dict[str, Any]
    outcome: Outcome
    release: str
    #: the minimal configuration as reported (the draft path kept where the algorithm needs one)
    config: Config
    model_args: list[str]
    names: Names
    env: dict[str, str]
    hardware: str
    explanation: dict[str, Any] | None
    fixes: dict[str, Any] | None
    check_env: list[tuple[str, str]]
    simulated: str
    tool_version: str
    #: how to run repro.py on a CPU machine (a shell line)
    repro_command: str
    #: the newest release evaluated (None: not evaluated) and the newest release known to bisect-spec
    newest: ReleaseVerdict | None = None
    newest_known: str | None = None
    #: the bisection: {"first_bad", "last_good", "before", "releases"} or {"none": reason}; None when not run
    bisection: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: text replacements that hide this machine's paths (:func:`scrub`)
    local: dict[str, str] = field(default_factory=dict)
    #: the configuration the user gave (None: not known)
    original: Config | None = None
    #: the launch command the user pasted, as pasted (None: the user gave flags, not a command)
    typed: str | None = None


def launch_command(config: Config, names: Names, env: dict[str, str], model_args: Sequence[str]) -> str:
    """The full launch command, with the user's model and draft and the environment in front."""
    extra = [arg for arg in model_args if arg not in config.flags()]  # --trust-remote-code once
    argv = ["--model-path", names.model, *extra,
            *[names.draft or "" if token == DRAFT_TOKEN else token for token in config.flag_argv()]]
    prefix = "".join(f"{name}={shlex.quote(value)} " for name, value in sorted({**env, **config.env()}.items()))
    words, flag = [], ""
    for token in argv:  # a file the user supplies: its shell variable, unquoted so the shell expands it
        words.append(f'"${path_variable(flag)}"' if token == PATH_TOKEN else shlex.quote(token))
        flag = token
    return f"{prefix}python3 -m sglang.launch_server {' '.join(words)}"


def render(facts: Facts) -> str:
    """The filled-in form, as Markdown; for a configuration that will not start on the box (out of memory, too
    few GPUs), a configuration error's page instead: no SGLang statement refused it, so there is nothing to file."""
    if facts.outcome.will_not_start is not None:
        return configuration_error(facts)
    outcome, frame = facts.outcome, facts.outcome.frame
    exc = outcome.exception.get("type") or "failure"
    function = frame.get("function") or "?"
    lines = [f"<!-- SGLang bug report ({TEMPLATE}), filled in by bisect-spec {facts.tool_version} -->",
             f"# [Bug] SGLang {facts.release}: {exc} in `{function}` at start-up with "
             f"{' '.join(facts.config.without('--speculative-draft-model-path').flag_argv())}", ""]
    lines += _checklist(facts)
    lines += _description(facts)
    lines += _reproduction(facts)
    lines += _environment(facts)
    return scrub("\n".join(lines).rstrip() + "\n", facts.local)


def configuration_error(facts: Facts) -> str:
    """A configuration that will not start on the box, as Markdown: what it needs against what the box has, the
    command, and the nearest configuration that starts where one was found. Not a bug report."""
    from bisect_spec.report.summary import will_not_start_line

    figures = facts.outcome.will_not_start or {}
    command = launch_command(facts.config, facts.names, facts.env, facts.model_args)
    lines = [f"<!-- A configuration error found by bisect-spec {facts.tool_version}: not an SGLang bug, nothing to "
             "file -->", f"# Will not start on {facts.hardware}: SGLang {facts.release}", "",
             f"**{will_not_start_line(figures)}.** {facts.outcome.exception.get('message', '')}.", "",
             "bisect-spec predicts this from SGLang's own build of the model on `meta` (shapes, no values): a real "
             "launch of this command ends in torch's `CUDA out of memory` (or an invalid device ordinal) after it "
             "has loaded for minutes. It is a property of the box and the layout, not a check of SGLang's.", "",
             "```shell", command, "```", ""]
    best = ((facts.fixes or {}).get("fixes") or [None])[0]
    if best:
        lines += [f"The nearest configuration that starts (verified): {', '.join(best.get('edits') or [])}.", ""]
    return scrub("\n".join(lines).rstrip() + "\n", facts.local)


def _checklist(facts: Facts) -> list[str]:
    newest = facts.newest
    persists = newest is not None and newest.same
    if newest is None:
        why = "not evaluated on the newest release (run bisect-spec shrink on it)"
    elif newest.same:
        why = f"checked by bisect-spec: the minimal reproducer fails the same way on SGLang {newest.release}"
        if facts.newest_known and facts.newest_known != newest.release:
            why += f", the newest release installed here (the newest published is {facts.newest_known})"
    else:
        why = f"NOT the case: on SGLang {newest.release} the minimal reproducer {_verdict_words(newest)}"
    return ["## Checklist", "",
            f"- [ ] I searched related issues but found no solution. *(not done by bisect-spec: please search "
            f"{ISSUES} for `{function_text(facts)}` before filing)*",
            f"- [{'x' if persists else ' '}] The bug persists in the latest version. *({why})*",
            "- [x] Issues without environment info and a minimal reproducible demo are hard to resolve and may "
            "receive no feedback. *(both are below)*",
            "- [x] If this is not a bug report but a general question, please start a discussion at "
            "https://github.com/sgl-project/sglang/discussions. Otherwise, it will be closed.",
            "- [x] Please use English. Otherwise, it will be closed.", ""]


def function_text(facts: Facts) -> str:
    frame = facts.outcome.frame
    return str(frame.get("statement") or frame.get("function") or facts.outcome.exception.get("type"))


def _verdict_words(verdict: ReleaseVerdict) -> str:
    if verdict.verdict == "passed":
        return "passes (fixed there)"
    if verdict.same:
        return "fails the same way"
    return f"{verdict.verdict}: {verdict.headline}" if verdict.headline else verdict.verdict


def _description(facts: Facts) -> list[str]:
    outcome, frame = facts.outcome, facts.outcome.frame
    exc = outcome.exception.get("type") or "an exception"
    message = str(outcome.exception.get("message") or "").strip()
    where = f"`sglang/{frame.get('file')}`" if frame.get("file") else "SGLang"
    first, last = (frame.get("statement_lines") or [frame.get("line"), frame.get("line")])[:2]
    lines_text = f"line {first}" if first == last else f"lines {first}-{last}"
    guard = frame.get("guard") or {}
    flags = " ".join(facts.config.without("--speculative-draft-model-path").flag_argv())
    text = (f"`python3 -m sglang.launch_server` of SGLang {facts.release} stops at start-up, before loading any "
            f"weights, when it is given `{flags}` (with a draft model). `ServerArgs` raises {exc}"
            f"{': ' + repr(message) if message else ''} in `{frame.get('function')}` ({where}, {lines_text}), "
            f"at the statement `{frame.get('statement') or frame.get('expression')}`")
    if guard.get("text"):
        text += f", which runs under `{guard['text'].strip()}` (line {guard.get('line')})"
    text += ". "
    necessary = [f["verdict"] for f in (facts.explanation or {}).get("flags", [])]
    if necessary:
        text += "Every flag of the reproducer is needed (removing any one makes the failure go away): " + \
            "; ".join(necessary) + ". "
    text += _history(facts)
    out = ["## Describe the bug", "", text.strip(), "", f"**Expected behavior:** {expected_behaviour(outcome)}", ""]
    context = frame.get("context") or []
    if context:
        out += [f"The failing statement and its guard in `sglang/{frame.get('file')}` (SGLang {facts.release}):", "",
                "```python"]
        out += [f"{'>' if (first or 0) <= n <= (last or 0) else ' '} {n:>5}  {line}" for n, line in context]
        out += ["```", "", "```", relative_traceback(str(outcome.record.get("traceback_tail") or outcome.headline)),
                "```", ""]
    return out


#: exceptions a check raises on purpose (as ``probe`` tells them from crashes)
VALIDATION = frozenset({"AssertionError", "ValueError", "NotImplementedError", "RuntimeError", "SystemExit"})


def expected_behaviour(outcome: Outcome) -> str:
    """What should have happened, from the failure's kind: a bare ``assert`` should say what to change; a crash
    of SGLang's own code (a TypeError, ...) should be a validation; a check with a message should either accept
    the combination or name the flags to change."""
    exc = str(outcome.exception.get("type") or "an exception")
    message = str(outcome.exception.get("message") or "").strip()
    if exc not in VALIDATION:
        return (f"`ServerArgs` either accepts these flags or refuses them with a message that names the flag to "
                f"change. Instead SGLang's own code fails with `{exc}: {message}`, which says nothing about the "
                "flags: it reads like a bug, not a validation.")
    if exc == "AssertionError" and not message:
        return ("SGLang refuses this combination with a message that says which flags conflict and what to set "
                "instead. Instead a bare `assert` stops the server with no message at all; the user has to read "
                "the source to learn which flag to change.")
    return ("SGLang either accepts this combination, or its message says what to change and the documentation "
            f"of these flags says so too. Instead the server stops at start-up with `{exc}: {message}`.")


def _history(facts: Facts) -> str:
    parts = []
    if facts.newest is not None and facts.newest.release != facts.release:
        parts.append(f"On SGLang {facts.newest.release} (the newest release evaluated) the same command "
                     f"{_verdict_words(facts.newest)}.")
    bisection = facts.bisection
    if bisection is not None:
        if bisection.get("fails_from"):  # no release that passes: not a regression, and not called one
            sibling = bisection.get("sibling") or {}
            parts.append(f"It fails the same way on every release evaluated, from SGLang {bisection['fails_from']} "
                         f"(bisected over the installed releases {', '.join(bisection['releases'])}): not a "
                         "regression. " + " ".join(bisection.get("notes") or []))
            if sibling.get("first_bad"):
                parts.append(f"With {sibling['model']} (the same text model, known to older releases) the first bad "
                             f"release is SGLang {sibling['first_bad']}; on {sibling['last_good']} the same command "
                             f"{(sibling.get('before') or {}).get('words', 'behaves differently')}.")
            elif sibling.get("fails_from"):
                parts.append(f"With {sibling['model']} (the same text model, known to older releases) it fails the "
                             f"same way from SGLang {sibling['fails_from']}, the oldest release evaluated.")
        elif bisection.get("first_bad"):
            before = bisection.get("before") or {}
            parts.append(f"First bad release: SGLang {bisection['first_bad']} (bisected over the releases "
                         f"{', '.join(bisection['releases'])}); on {bisection['last_good']} the same command "
                         f"{before.get('words', before.get('verdict', 'behaves differently'))}.")
        else:
            parts.append(f"First bad release: {bisection.get('none')}")
    return " ".join(parts)


def _reproduction(facts: Facts) -> list[str]:
    out = ["## Reproduction", ""]
    if facts.typed:  # as pasted: no flag added, none renamed, the user's own model and draft spellings
        out += ["The command as I ran it:", "", "```bash", facts.typed, "```", ""]
    elif facts.original is not None and facts.original != facts.config:
        out += ["The command as I ran it:", "", "```bash",
                launch_command(facts.original, facts.names, facts.env, facts.model_args), "```", ""]
    out += ["The minimal launch command (bisect-spec removed every flag the failure does not need, each removal "
            "evaluated; the values are mine wherever the failure reproduces with them):", "", "```bash",
            launch_command(facts.config, facts.names, facts.env, facts.model_args), "```", ""]
    out += [f"- {note}" for note in facts.names.notes]
    out += [f"- `${path_variable(flag)}` is any file for `{flag}`: the failure happens before it is read"
            for flag in placeholder_paths(facts.config)]
    out += ["", "It fails before any weights load, so no GPU is needed to see it: the attached `repro.py` builds "
            "`ServerArgs` as `launch_server` does, on a CPU machine with the GPU box simulated, and exits 1 when "
            "the failure reproduces (0 when it passes):", "", "```bash", facts.repro_command, "```", ""]
    fixes = [f for f in (facts.fixes or {}).get("fixes") or [] if f.get("verified")]
    if fixes:
        out += ["Workarounds, best first; each was evaluated on the same release and box and starts without error.",
                ""]
        said = None
        for number, fix in enumerate(fixes, 1):
            reason = fix.get("reason") or ""
            if reason and reason != said:  # a reason once for the workarounds that share it
                out += [reason_heading(reason), ""]
                said = reason
            config = Config.from_argv(fix["argv"])
            out += [f"{number}. {'; '.join(fix['edits'])}", "", "   ```bash",
                    "   " + launch_command(config, facts.names, facts.env, facts.model_args), "   ```", ""]
    elif facts.fixes is not None:
        out += ["No workaround that keeps speculative decoding on was found within two edits.", ""]
    out += [f"- {note}" for note in facts.notes]
    if facts.notes:
        out.append("")
    return out


def reason_heading(reason: str) -> str:
    """A fix's reason (:func:`bisect_spec.reduce.repair.nearest_working`) as the heading of the fixes that share it."""
    if reason.startswith("ranked lower: it "):
        return f"Ranked lower: each of these {reason.removeprefix('ranked lower: it ')}:"
    if reason.startswith("ranked lower: "):
        return f"Ranked lower: {reason.removeprefix('ranked lower: ')}:"
    return f"Each of these {reason}:"


def _environment(facts: Facts) -> list[str]:
    body = "\n".join(f"{key}: {value}" for key, value in facts.check_env)
    return ["## Environment", "",
            "<!-- Paste the output of `python3 -m sglang.check_env` on the machine where the server failed here, "
            "in place of the simulated block below. -->",
            "Output of `python3 -m sglang.check_env` on the machine where it failed: **paste yours here**. "
            "Until then, what it would print on the box bisect-spec simulated (the failure needs no GPU):", "",
            "<details><summary>simulated check_env (fallback)</summary>", "",
            f"Simulated, not measured: {facts.simulated}", "", "```", body, "```", "", "</details>", "",
            f"Found and reduced by bisect-spec {facts.tool_version}; signature `{facts.signature['id']}` "
            f"(cross-release key `{facts.signature['cross_release_key']}`)."]


_FILE_LINE = re.compile(r'^(?P<indent>\s*)File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')


def relative_traceback(text: str) -> str:
    """The traceback from the first SGLang frame on, file names relative to their package.

    Frames of code compiled from a string (a dataclass' generated ``__init__``) get a description
    instead of ``"<string>"``; bisect-spec's own frames before SGLang's are left out.
    """
    lines = text.rstrip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("File ")
                  and ("/sglang/" in line or line.strip().startswith(('File "srt/', 'File "sglang/')))), None)
    if start is None:
        return "\n".join(_relative_line(line) for line in lines)
    return "\n".join(["Traceback (most recent call last):", *(_relative_line(line) for line in lines[start:])])


def _relative_line(line: str) -> str:
    match = _FILE_LINE.match(line)
    if match is None:
        return line
    path, indent = match["path"], match["indent"]
    if path.startswith("<") and not path.startswith(("<site>/", "<stdlib>/")):
        return f"{indent}(code generated at run time, e.g. a dataclass __init__: line {match['line']}, in {match['function']})"
    return f'{indent}File "{relative_path(path)}", line {match["line"]}, in {match["function"]}'


def relative_path(path: str) -> str:
    """``.../site/sglang/srt/server_args.py`` -> ``sglang/srt/server_args.py`` (any package root).

    A traceback the evaluator already made relative keeps its names (``srt/...`` is SGLang's package,
    ``<site>/...`` and ``<stdlib>/...`` the others).
    """
    if path.startswith("srt/"):
        return "sglang/" + path
    if path.startswith(("sglang/", "<site>/", "<stdlib>/")):
        return path
    for marker in ("/site-packages/", "/dist-packages/", "/site/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    if "/sglang/" in path:
        return "sglang/" + path.rsplit("/sglang/", 1)[1]
    if "/bisect_spec/" in path:
        return "bisect_spec/" + path.rsplit("/bisect_spec/", 1)[1]
    return Path(path).name


def scrub(text: str, local: dict[str, str]) -> str:
    """Replace this machine's paths (longest first) by what the reader knows them as."""
    for path in sorted(local, key=len, reverse=True):
        if path:
            text = text.replace(path, local[path])
    return text


# -- check_env, simulated -----------------------------------------------------------------------------


def _check_env_packages(pythonpath: Sequence[str]) -> list[str]:
    for entry in pythonpath:
        source = Path(entry) / "sglang" / "check_env.py"
        if not source.is_file():
            continue
        try:
            tree = parse_module(source.read_text())
        except (OSError, SyntaxError):
            break
        for node in tree.body:
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PACKAGE_LIST" for t in node.targets)
                    and isinstance(node.value, ast.List)):
                return [str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)]
        break
    return list(FALLBACK_PACKAGES)


def _wheel_pins(pythonpath: Sequence[str], wheel: str) -> dict[str, str]:
    """``name==version`` requirements of the SGLang ``wheel`` on the path (what ``pip install sglang==X`` pins)."""
    for entry in pythonpath:
        for metadata in sorted(Path(entry).glob(f"sglang-{wheel}.dist-info/METADATA")):
            pins = {}
            for line in metadata.read_text(errors="replace").splitlines():
                match = re.match(r"^Requires-Dist: ([A-Za-z0-9_.\-]+)==([^;,\s]+)\s*(;.*)?$", line)
                if match and "extra ==" not in (match[3] or ""):
                    pins[_normal(match[1])] = match[2]
            return pins
    return {}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_versions(paths: Sequence[str]) -> dict[str, str]:
    """The distributions installed on ``paths`` and their versions (read once per process and set of paths: a
    sweep writes a bug report per signature, each asking for the same environment's)."""
    return dict(_installed_versions_on(tuple(paths)))


@functools.lru_cache(maxsize=16)
def _installed_versions_on(paths: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions(path=list(paths)):
        name = dist.metadata["Name"] if dist.metadata else None
        if name and _normal(name) not in found:
            found[_normal(name)] = dist.version
    return tuple(found.items())


def simulated_check_env(*, release: str, python: str, pythonpath: Sequence[str], base_python: str,
                        hardware: dict[str, Any] | None, gpus: int, wheel: str | None = None
                        ) -> tuple[list[tuple[str, str]], str]:
    """``check_env``'s lines for the simulated box, and one sentence saying what was simulated and how.

    GPU name, count and capability come from the hardware profile; package versions are the
    SGLang wheel's own ``==`` pins where it has one (what ``pip install sglang==X`` installs on a
    GPU box), else the version in the evaluation environment.

    :param wheel: the release whose wheel pins the packages (a source tree's: the release it is laid over).
    """
    wheel = wheel or release
    pins = _wheel_pins(pythonpath, wheel)
    base = Path(base_python).parent.parent
    env_versions = _installed_versions([*pythonpath, *(str(p) for p in base.glob("lib/python*/site-packages"))])
    rows: list[tuple[str, str]] = [("Python", python)]
    if hardware is not None and hardware.get("gpu_name"):
        ids = ",".join(str(i) for i in range(gpus))
        capability = ".".join(str(c) for c in hardware.get("capability") or [])
        rows += [("CUDA available", "True"), (f"GPU {ids}", str(hardware["gpu_name"])),
                 (f"GPU {ids} Compute Capability", capability)]
    else:
        rows += [("CUDA available", "False")]
    rows.append(("PyTorch", pins.get("torch") or env_versions.get("torch", "Module Not Found")))
    for package in dict.fromkeys(_check_env_packages(pythonpath)):  # check_env keys a dict: one line each
        name = package.split("==")[0].split(">=")[0].split("<=")[0]
        if name == "sglang":
            rows.append((name, release))
            continue
        rows.append((name, pins.get(_normal(name)) or env_versions.get(_normal(name), "Module Not Found")))
    if hardware is not None and hardware.get("gpu_name"):
        memory = f"{int(hardware.get('memory_mib', 0)) / 1024:.0f} GiB each" if hardware.get("memory_mib") else ""
        box = (f"{gpus} x {hardware['gpu_name']} (compute capability {'.'.join(map(str, hardware.get('capability') or []))}"
               f"{', ' + memory if memory else ''}, CUDA {hardware.get('cuda_version', '?')}) from bisect-spec's "
               f"'{hardware.get('name', '?')}' hardware profile, presented to SGLang by a simulated torch.cuda")
    else:
        box = "no GPU (SGLang's CPU path)"
    simulated = (f"the box is {box}; package versions are the `==` pins of the sglang {wheel} wheel, else the "
                 "versions bisect-spec evaluated with (torch there is the CPU build); CUDA_HOME, NVCC, the driver "
                 "version, the topology and ulimit are not simulated and left out.")
    return rows, simulated

#!/usr/bin/env python
"""Hardware-simulation fidelity: the same configurations resolved on a real GPU and on its profile.

bisect-spec answers SGLang's hardware probes from a profile (``bisect_spec/data/hardware``)
when it runs on a CPU machine. This script measures how faithful that is: on a machine
with a real NVIDIA GPU it resolves one deterministic set of configurations twice, in
workers of the same SGLang,

* ``--hardware real``: nothing simulated, the real GPU answers every probe;
* ``--hardware PROFILE --gpus N``: the matching simulated profile (``h200`` for an H200),

and compares per configuration the verdict (passed/failed, failure signature id) and
every resolved value the outcome records (attention backends, ``mem_fraction_static``,
``cuda_graph_max_bs``, page size, speculative fields, chunked prefill size, ...). The
figure is the share of configurations that agree in everything (goal 100 %); every
disagreement is listed as (configuration, field, real, simulated). It also compares the
profile's own record (name, capability, memory, SMs, L2, CUDA version) with what
torch and ``nvidia-smi`` report, so the profile can be corrected.

Configurations: the covering plan of a strategy (``eagle-core`` by default), sampled
down to ``--limit`` with ``--seed`` (the baseline row is always kept), plus the seed
episodes' configurations; per model profile (``--model``, repeatable).

Limit, stated in the output: on a GPU box without ``sgl_kernel`` every worker imports
SGLang with the GPU hidden (``simulated_gpu.gpu_hidden``), as on a CPU machine (with the
GPU visible, lazily imported modules fail on ``sgl_kernel``), so module-level constants
computed at import keep CPU values in both columns; what is measured is the simulation of
the probes resolution makes after import. ``--also-visible-import`` adds the rest where
``sgl_kernel`` is installed.

Usage (GPU box, SGLang unpacked under /tmp/site)::

    PYTHONPATH=/tmp/site:$PWD python3 scripts/hardware_fidelity.py --sglang current --out fidelity-out

Plumbing check on a CPU machine (both columns simulated; h200 vs h200 must agree 100 %,
h200 vs h100 must show disagreements)::

    python scripts/hardware_fidelity.py --sglang 0.5.23 --real-profile h200 --out /tmp/fid
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bisect_spec.api import TargetSpec
from bisect_spec.errors import BisectSpecError
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.runtime import processes
from bisect_spec.runtime.profiles import load_hardware
from bisect_spec.runtime.session import DRAFT, Session
from bisect_spec.search.plan import covering_plan, load_strategy

#: The two configurations of the seed episodes (kimi + EAGLE3 draft), and their working neighbours.
SEEDS: tuple[tuple[str, ...], ...] = (
    ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
     "--speculative-num-draft-tokens", "4"),
    ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
     "--speculative-num-draft-tokens", "4", "--speculative-num-steps", "1"),
    ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
     "--speculative-num-draft-tokens", "4", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"),
    ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
     "--speculative-num-draft-tokens", "16", "--speculative-num-steps", "5", "--speculative-eagle-topk", "8"),
    ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", DRAFT,
     "--speculative-num-draft-tokens", "4", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
     "--page-size", "64", "--attention-backend", "fa3"),
    (),
)
SCHEMA = "bisect-spec/hardware-fidelity/1"


def plan_configs(session: Session, strategy_name: str, seed: int, limit: int) -> list[Config]:
    """The strategy's covering plan sampled to ``limit`` (deterministic), plus :data:`SEEDS`."""
    strategy = load_strategy(strategy_name, seed=seed)
    plan = covering_plan(strategy.space(session.flags()), strategy)
    if len(plan) > limit:
        rng = random.Random(seed)
        keep = sorted({0, *rng.sample(range(1, len(plan)), limit - 1)})
        plan = [plan[i] for i in keep]
    known = {alias for flag in session.flags() for alias in flag["aliases"]}
    seen = set(plan)
    for argv in SEEDS:
        config = Config.from_argv(list(argv))
        if config not in seen and all(flag in known for flag in config.flags()):
            seen.add(config)
            plan.append(config)
    return plan


def resolve(spec: TargetSpec, configs: Sequence[Config] | None, *, jobs: int, strategy: str, seed: int,
            limit: int, log_dir: Path | None = None, extra_env: tuple[tuple[str, str], ...] = (),
            bare_packages: bool = False) -> tuple[list[Config], dict[str, Outcome], dict[str, Any]]:
    """Evaluate ``configs`` (or the plan, when None) on one target along launch_server's path up to
    weight loading (the same stages on both sides); outcomes by configuration key.

    :param bare_packages: simulate the box without the GPU packages of a CUDA install (for a real
        box that lacks them: compare like with like).
    """
    target = spec.resolve()
    if bare_packages and target.hardware.record and target.hardware.name not in ("real", "none"):
        import dataclasses

        record = {**target.hardware.record, "simulate_packages": False}
        target = dataclasses.replace(target, hardware=dataclasses.replace(target.hardware, record=record))
    session = Session(target, jobs=jobs, timeout=120.0, log_dir=log_dir, extra_env=extra_env)
    try:
        started = time.perf_counter()
        info = dict(session.start())
        planned = list(configs) if configs is not None else plan_configs(session, strategy, seed, limit)
        chosen = list(dict.fromkeys(session.with_draft(c) for c in planned))  # as evaluated: draft path added
        outcomes = {o.config.key(): o for o in session.evaluate_many(chosen)}
        info["seconds"] = round(time.perf_counter() - started, 2)
        info["target"] = session.target.describe()
        info["hardware_label"] = session.hardware_label
        return chosen, outcomes, info
    finally:
        session.close()


def verdict(outcome: Outcome) -> str:
    """``passed`` or ``failed:<signature id>`` (``crashed``/``timeout``/``usage`` likewise)."""
    if outcome.passed:
        return "passed"
    return f"{outcome.status.value}:{outcome.signature.id if outcome.signature else '?'}"


def compare(configs: Iterable[Config], real: dict[str, Outcome], simulated: dict[str, Outcome]) -> dict[str, Any]:
    """Per configuration: verdict and every resolved value, real against simulated.

    Resolved values are compared where both sides pass; where the verdicts differ, both
    headlines are listed instead.

    :return: ``{"configs", "agreeing", "agreement_percent", "disagreements", "fields"}`` where
        ``fields`` counts, per field, the configurations compared and those that differ.
    """
    disagreements: list[dict[str, Any]] = []
    fields: dict[str, dict[str, int]] = {}
    agreeing = total = 0
    for config in configs:
        a, b = real.get(config.key()), simulated.get(config.key())
        if a is None or b is None:
            continue
        total += 1
        differ = []
        # the stage: how far along launch_server's path each side got (where it failed, or "weights")
        pairs: list[tuple[str, Any, Any]] = [("verdict", verdict(a), verdict(b)),
                                             ("stage", a.record.get("stage"), b.record.get("stage"))]
        if a.passed and b.passed:  # resolved values exist only for passing configurations
            names = sorted(set(a.resolved) | set(b.resolved))
            pairs += [(name, a.resolved.get(name, "<absent>"), b.resolved.get(name, "<absent>")) for name in names]
        for name, left, right in pairs:
            counts = fields.setdefault(name, {"compared": 0, "differ": 0})
            counts["compared"] += 1
            if left != right:
                counts["differ"] += 1
                differ.append({"config": config.argv(), "field": name, "real": left, "simulated": right})
        if verdict(a) != verdict(b):  # say why, in SGLang's words
            differ.append({"config": config.argv(), "field": "headline", "real": a.headline, "simulated": b.headline})
        agreeing += not differ
        disagreements += differ
    percent = round(100.0 * agreeing / total, 2) if total else 0.0
    return {"configs": total, "agreeing": agreeing, "agreement_percent": percent,
            "disagreements": disagreements, "fields": fields}


def hardware_facts() -> dict[str, Any]:
    """What this machine's torch and nvidia-smi report (empty parts where there is no GPU)."""
    facts: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        import torch
    except ImportError as exc:
        facts["torch"] = f"not importable: {exc}"
    else:
        facts["torch"] = torch.__version__
        facts["torch_version_cuda"] = torch.version.cuda
        facts["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            free, total = torch.cuda.mem_get_info(0)
            facts.update(device_count=torch.cuda.device_count(), gpu_name=props.name,
                         capability=[props.major, props.minor], memory_mib=props.total_memory // (1024 * 1024),
                         sm_count=props.multi_processor_count, l2_cache_bytes=getattr(props, "L2_cache_size", None),
                         mem_get_info_mib=[free // (1024 * 1024), total // (1024 * 1024)],
                         properties_repr=repr(props))
    lines: list[str] = []
    query = "name,memory.total,compute_cap,driver_version"
    try:
        code = processes.run_command(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                  progress=lines.append)
    except OSError as exc:
        facts["nvidia_smi"] = f"not runnable: {exc.strerror or exc}"
    else:
        facts["nvidia_smi"] = {"query": query, "exit": code, "lines": lines}
        if code == 0 and lines:
            parts = [p.strip() for p in lines[0].split(",")]
            if len(parts) == 4:
                facts.update(smi_name=parts[0], smi_memory_mib=int(parts[1]) if parts[1].isdigit() else parts[1],
                             smi_compute_cap=parts[2], driver=parts[3])
        full: list[str] = []
        with_cuda = processes.run_command(["nvidia-smi"], progress=full.append)
        cuda_lines = [line for line in full if "CUDA Version" in line]
        if with_cuda == 0 and cuda_lines:
            facts["smi_header"] = cuda_lines[0].strip(" |")
    return facts


def profile_check(profile: dict[str, Any], facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The profile's record against the real machine, field by field."""
    def driver_cuda() -> str | None:
        header = str(facts.get("smi_header", ""))
        return header.split("CUDA Version:")[1].split()[0] if "CUDA Version:" in header else None

    rows = [
        ("gpu_name", profile.get("gpu_name"), facts.get("gpu_name")),
        ("capability", profile.get("capability"), facts.get("capability")),
        ("memory_mib", profile.get("memory_mib"), facts.get("memory_mib")),
        ("memory_mib (nvidia-smi)", profile.get("memory_mib"), facts.get("smi_memory_mib")),
        ("sm_count", profile.get("sm_count"), facts.get("sm_count")),
        ("l2_cache_bytes", profile.get("l2_cache_bytes"), facts.get("l2_cache_bytes")),
        ("cuda_version (torch.version.cuda)", profile.get("cuda_version"), facts.get("torch_version_cuda")),
        ("cuda_version (driver)", profile.get("cuda_version"), driver_cuda()),
        ("driver", profile.get("driver", "580.00 (default)"), facts.get("driver")),
    ]
    return [{"field": f, "profile": p, "real": r, "match": (p == r) if r is not None else None} for f, p, r in rows]


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: figure, hardware table, per-field counts, every disagreement."""
    out = [f"# Hardware-simulation fidelity: real GPU vs simulated `{report['profile']}`", ""]
    out.append(f"**Agreement: {report['agreement_percent']} %** ({report['agreeing']} of {report['configs']} "
               "configurations agree in verdict and every resolved value; goal 100 %)")
    if "visible_import_agreement_percent" in report:
        out.append(f"With the GPU visible while SGLang is imported: **{report['visible_import_agreement_percent']} %**")
    if not report.get("finished"):
        out.append("**The run did not finish: the figures cover what was measured before it stopped.**")
    out += ["", f"real side: `{report.get('real_label')}` · simulated side: `{report.get('simulated_label')}` · "
            f"SGLang {report['sglang']} · strategy `{report['strategy']}` seed {report['seed']}", ""]
    for note in report["notes"]:
        out.append(f"* {note}")
    out += ["", "## Profile against the machine", "", "| field | profile | real | match |", "|---|---|---|---|"]
    for row in report["profile_check"]:
        out.append(f"| {row['field']} | {row['profile']} | {row['real']} | {row['match']} |")
    for model in report["models"]:
        out += ["", f"## {model['model']} + {model['draft']}: {model['agreement_percent']} % "
                f"({model['agreeing']}/{model['configs']})", "", "| field | compared | differ |", "|---|---|---|"]
        for name, counts in sorted(model["fields"].items()):
            out.append(f"| {name} | {counts['compared']} | {counts['differ']} |")
        out += disagreement_table(model["disagreements"])
        visible = model.get("visible_import")
        if visible:
            out += ["", f"### {model['model']}: real GPU *visible while SGLang is imported* vs simulated"]
            if "error" in visible:
                out += ["", f"not measurable: {visible['error']}"]
            else:
                out += ["", f"{visible['agreement_percent']} % ({visible['agreeing']}/{visible['configs']}); "
                        "differences here and not above come from import-time constants (`_is_cuda = is_cuda()`)"]
                out += disagreement_table(visible["disagreements"])
    return "\n".join(out) + "\n"


def disagreement_table(disagreements: Sequence[dict[str, Any]]) -> list[str]:
    if not disagreements:
        return []
    out = ["", "| configuration | field | real | simulated |", "|---|---|---|---|"]
    for d in disagreements:
        out.append(f"| `{' '.join(d['config']) or '(baseline)'}` | {d['field']} | {d['real']} | {d['simulated']} |")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sglang", default="current", help="release, or 'current' (the sglang on PYTHONPATH)")
    parser.add_argument("--profile", default="h200", help="hardware profile matching the real GPU (default h200)")
    parser.add_argument("--gpus", type=int, default=0, help="simulated GPU count (default: the real count, else 1)")
    parser.add_argument("--real-profile", default=None,
                        help="plumbing check without a GPU: simulate this profile as the 'real' side")
    parser.add_argument("--model", action="append", help="model profile(s) (default kimi-k2.6 and llama-3.1-8b)")
    parser.add_argument("--draft", default="eagle3")
    parser.add_argument("--strategy", default="eagle-core")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=300, help="covering-plan configurations per model")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 2)),
                        help="workers per side (each imports SGLang once)")
    parser.add_argument("--out", type=Path, default=Path("fidelity-out"))
    parser.add_argument("--bare-packages", action="store_true",
                        help="simulate the box without flashinfer/sgl-kernel/...: for a real box that lacks them "
                             "(the default simulates a full CUDA install of the release)")
    parser.add_argument("--also-visible-import", action="store_true",
                        help="also resolve on the real GPU with SGLang imported while the GPU is visible "
                             "(BISECT_SPEC_GPU_AT_IMPORT=visible): shows what import-time constants change; "
                             "needs sgl_kernel (without it every configuration fails importing it, measured "
                             "with a faked GPU)")
    parser.add_argument("--log-dir", type=Path, default=None, help="where workers log (worker-RELEASE.log)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    facts = hardware_facts()
    gpus = args.gpus or int(facts.get("device_count") or 1)
    if args.real_profile is None and not facts.get("cuda_available"):
        print("no GPU here: pass --real-profile PROFILE for a simulated-vs-simulated plumbing check", file=sys.stderr)
        return 2
    profile = load_hardware(args.profile, gpus)
    real_hardware = args.real_profile or "real"
    report: dict[str, Any] = {
        "schema": SCHEMA, "profile": args.profile, "gpus": gpus, "sglang": args.sglang, "strategy": args.strategy,
        "seed": args.seed, "limit": args.limit, "hardware_facts": facts, "profile_record": profile.record,
        "profile_check": profile_check(profile.record or {}, facts), "notes": [], "models": [], "finished": False}
    if args.real_profile:
        report["notes"].append(f"PLUMBING CHECK: the 'real' side is the simulated profile {args.real_profile}, "
                               "not a GPU")
    outcomes_path = args.out / "outcomes.jsonl"
    outcomes_path.write_text("")

    def keep(model: str, side: str, group: dict[str, Outcome]) -> None:
        with outcomes_path.open("a") as stream:
            stream.writelines(json.dumps({"model": model, "side": side, "outcome": o.to_dict()}, default=repr) + "\n"
                              for o in group.values())

    plans: dict[str, tuple[TargetSpec, list[Config], dict[str, Outcome]]] = {}
    # phase 1: real GPU (SGLang imported with the GPU hidden when sgl_kernel is missing) vs simulated
    for model in args.model or ["kimi-k2.6", "llama-3.1-8b"]:
        real_spec = TargetSpec(release=args.sglang, model=model, draft=args.draft, hardware=real_hardware, gpus=gpus)
        sim_spec = TargetSpec(release=args.sglang, model=model, draft=args.draft, hardware=args.profile, gpus=gpus)
        print(f"[{model}] resolving on {real_hardware} ...", flush=True)
        configs, real, info_real = resolve(real_spec, None, jobs=args.jobs, strategy=args.strategy, seed=args.seed,
                                           limit=args.limit, log_dir=args.log_dir)
        print(f"[{model}] {len(real)} configurations in {info_real['seconds']} s; now simulated {profile.label} ...",
              flush=True)
        _, simulated, info_sim = resolve(sim_spec, configs, jobs=args.jobs, strategy=args.strategy, seed=args.seed,
                                         limit=args.limit, log_dir=args.log_dir, bare_packages=args.bare_packages)
        print(f"[{model}] {len(simulated)} configurations in {info_sim['seconds']} s", flush=True)
        result = compare(configs, real, simulated)
        result.update(model=model, draft=args.draft, real_worker=info_real, simulated_worker=info_sim)
        report["models"].append(result)
        report.update(sglang=info_sim.get("sglang_version", args.sglang), real_label=info_real.get("hardware_label"),
                      simulated_label=info_sim.get("hardware_label"))
        if info_real.get("gpu_hidden_at_import") and not any("GPU hidden" in n for n in report["notes"]):
            report["notes"].append(
                "sgl_kernel is not installed here: both sides imported SGLang with the GPU hidden (as on a CPU "
                "machine); module-level constants computed at import keep CPU values on both sides, so the figure "
                "measures the simulation of the probes resolution makes after import")
        keep(model, "real", real)
        keep(model, "simulated", simulated)
        plans[model] = (real_spec, configs, simulated)
        print(f"[{model}] agreement {result['agreement_percent']} % ({result['agreeing']}/{result['configs']}), "
              f"{len(result['disagreements'])} field disagreements", flush=True)
        write_report(args.out, report, started)
    # phase 2: the real GPU visible while SGLang imports (may fail or be slow without sgl_kernel: runs last)
    hidden = any(m["real_worker"].get("gpu_hidden_at_import") for m in report["models"])
    for result in report["models"] if args.also_visible_import and hidden else []:
        model = result["model"]
        real_spec, configs, simulated = plans[model]
        failed_before = [m["visible_import"]["error"] for m in report["models"] if "error" in m.get("visible_import", {})]
        if failed_before:  # same SGLang, same machine: it would fail the same way, after the same wait
            result["visible_import"] = {"error": f"not tried: it failed for an earlier model ({failed_before[0]})"}
            continue
        print(f"[{model}] resolving on the real GPU, visible while SGLang imports ...", flush=True)
        try:
            _, visible, info_visible = resolve(real_spec, configs, jobs=args.jobs, strategy=args.strategy,
                                               seed=args.seed, limit=args.limit, log_dir=args.log_dir,
                                               extra_env=(("BISECT_SPEC_GPU_AT_IMPORT", "visible"),))
        except BisectSpecError as exc:  # SGLang may not import at all with the GPU visible and no sgl_kernel
            result["visible_import"] = {"error": str(exc)}
            print(f"[{model}] real GPU visible at import: {exc}", flush=True)
        else:
            against = compare(configs, visible, simulated)
            against["real_worker"] = info_visible
            result["visible_import"] = against
            keep(model, "real-visible-import", visible)
            print(f"[{model}] real GPU visible at import vs simulated: {against['agreement_percent']} %, "
                  f"{len(against['disagreements'])} field disagreements", flush=True)
        write_report(args.out, report, started)
    report["finished"] = True
    write_report(args.out, report, started)
    visible_figure = report.get("visible_import_agreement_percent")
    print(f"agreement {report['agreement_percent']} % ({report['agreeing']}/{report['configs']} configurations) real "
          f"{report.get('real_label')} vs simulated {report.get('simulated_label')}; "
          f"{sum(len(m['disagreements']) for m in report['models'])} disagreements; "
          f"{'' if visible_figure is None else f'visible-import agreement {visible_figure} %; '}"
          f"profile mismatches: {[r['field'] for r in report['profile_check'] if r['match'] is False]}; "
          f"written {args.out}/fidelity.json and fidelity.md ({report['seconds']} s)")
    return 0


def write_report(out: Path, report: dict[str, Any], started: float) -> None:
    """Totals, then fidelity.json and fidelity.md (written after every phase: a cut-off run keeps its results)."""
    models = report["models"]
    report["agreeing"] = sum(m["agreeing"] for m in models)
    report["configs"] = sum(m["configs"] for m in models)
    report["agreement_percent"] = round(100.0 * report["agreeing"] / report["configs"], 2) if report["configs"] else 0.0
    visible = [m["visible_import"] for m in models if "agreeing" in m.get("visible_import", {})]
    if visible:
        seen = sum(v["configs"] for v in visible)
        report["visible_import_agreement_percent"] = round(100.0 * sum(v["agreeing"] for v in visible) / seen, 2)
    report["seconds"] = round(time.time() - started, 1)
    (out / "fidelity.json").write_text(json.dumps(report, indent=2, default=repr) + "\n")
    (out / "fidelity.md").write_text(markdown(report))


if __name__ == "__main__":
    sys.exit(main())

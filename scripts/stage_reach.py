#!/usr/bin/env python
"""How far the launch path gets, per release: the stage each speculative configuration reaches, and where a
stage after the weights stopped (``needs_gpu``), on every installed release.

A run of this script is the measurement behind docs/fidelity.md's "how far each release gets" lines: run it
on two versions of bisect-spec (``PYTHONPATH=<a checkout> python scripts/stage_reach.py``) and compare the
JSON lines (``--compare A B``) to see what a change to ``inside/launch/`` moved. Records are written as
they are measured, so an interrupted run resumes.

Usage: python scripts/stage_reach.py [--releases 0.5.18 ...] [--out runs/stage-reach.jsonl]
       python scripts/stage_reach.py --compare before.jsonl after.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bisect_spec.api import TargetSpec
from bisect_spec.errors import BisectSpecError
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import Session

#: (model, draft, hardware, gpus) -> configurations evaluated on it (the draft's path is added where it has one)
CASES: dict[tuple[str, str | None, str, int], list[dict[str, str | None]]] = {
    ("llama-3.1-8b", "eagle3", "h200", 1): [{"--speculative-algorithm": "EAGLE3"}, {"--speculative-algorithm": "NGRAM"}],
    ("llama-3.1-8b", "eagle", "h200", 1): [
        {"--speculative-algorithm": "EAGLE"},
        {"--speculative-algorithm": "EAGLE", "--enable-multi-layer-eagle": None, "--speculative-num-steps": "3",
         "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4"}],
    ("deepseek-v3", "nextn", "b200", 8): [{"--speculative-algorithm": "EAGLE"}],
    ("kimi-k2.6", "eagle3", "b200", 4): [{"--speculative-algorithm": "EAGLE3"},
                                        {"--speculative-algorithm": "EAGLE3", "--attention-backend": "trtllm_mla"}],
}


def measure(release: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (model, draft, hardware, gpus), configs in CASES.items():
        try:
            target = TargetSpec(release=release, model=model, draft=draft, hardware=hardware, gpus=gpus).resolve()
            with Session(target, timeout=180) as session:
                session.start()
                for flags in configs:
                    outcome = session.evaluate(session.with_draft(Config.of(flags)))
                    record = outcome.record
                    rows.append({"release": release, "model": model, "draft": draft, "flags": flags,
                                 "status": outcome.status.value, "stage": record.get("stage"),
                                 "needs_gpu": record.get("needs_gpu") or {}, "tool_fault": record.get("tool_fault"),
                                 "exception": (outcome.exception or {}).get("type"),
                                 "message": str((outcome.exception or {}).get("message", ""))[:160]})
        except BisectSpecError as exc:
            rows.append({"release": release, "model": model, "draft": draft, "error": str(exc)[:200]})
    return rows


def key(row: dict[str, Any]) -> str:
    return json.dumps([row["release"], row["model"], row["draft"], row.get("flags")], sort_keys=True)


def compare(before: Path, after: Path) -> None:
    old = {key(r): r for r in map(json.loads, before.read_text().splitlines())}
    new = {key(r): r for r in map(json.loads, after.read_text().splitlines())}
    fields = ("status", "stage", "needs_gpu", "tool_fault", "exception")
    changed = [(k, old[k], new[k]) for k in sorted(set(old) & set(new))
               if any(old[k].get(f) != new[k].get(f) for f in fields)]
    stops = sum(bool(r.get("needs_gpu")) for r in old.values()), sum(bool(r.get("needs_gpu")) for r in new.values())
    faults = sum(bool(r.get("tool_fault")) for r in old.values()), sum(bool(r.get("tool_fault")) for r in new.values())
    print(f"{len(set(old) & set(new))} rows in both; {len(changed)} changed; stages stopped by a device step "
          f"{stops[0]} -> {stops[1]}; tool faults {faults[0]} -> {faults[1]}")
    for _, a, b in changed:
        print(f"- {a['release']} {a['model']}+{a['draft']} {' '.join(k for k in a.get('flags') or {})}: "
              f"{a.get('status')}/{a.get('stage')} {json.dumps(a.get('needs_gpu'))[:120]} -> "
              f"{b.get('status')}/{b.get('stage')} {json.dumps(b.get('needs_gpu'))[:120]} {b.get('tool_fault') or ''}"
              f"{b.get('exception') or ''} {b.get('message') or ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="*")
    parser.add_argument("--out", type=Path, default=Path("runs/stage-reach.jsonl"))
    parser.add_argument("--compare", nargs=2, type=Path)
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    for release, rows in per_release(args.out, args.releases or environments.installed(), measure):
        print(release, " ".join(f"{r.get('status')}/{r.get('stage')}{'*' if r.get('needs_gpu') else ''}" for r in rows),
              flush=True)


def per_release(out: Path, releases: list[str],
                measure: Callable[[str], list[dict[str, Any]]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """``measure`` each release not yet in ``out`` (JSON lines with a ``release`` field), appending its rows as
    soon as they are measured, so an interrupted run resumes; yields each release measured and its rows."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["release"] for line in out.read_text().splitlines()} if out.exists() else set()
    for release in releases:
        if release in done:
            continue
        rows = measure(release)
        with out.open("a") as written:
            written.writelines(json.dumps(row) + "\n" for row in rows)
        yield release, rows


if __name__ == "__main__":
    main()

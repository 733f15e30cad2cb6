#!/usr/bin/env python
"""Measure every SGLang release: install it, then resolve the two EAGLE3 seed configurations.

Per release: install status, install seconds, overlay size (own overlay + shared layers),
and the outcome of

* A: ``--speculative-algorithm EAGLE3 --speculative-num-draft-tokens 3``
* B: A plus ``--speculative-num-steps 1``

on ``--model deepseek-v3 --draft eagle3`` with the default simulated hardware, with the
exception type and the innermost SGLang frame (file::function:line). This is what
``bisect-spec probe --sglang X --model deepseek-v3 --draft eagle3 --json -- ...`` prints,
done in one worker per release (both probes share it) to keep the run short.

Records go to a JSON-lines file as they are measured, so an interrupted run resumes.

Usage: python scripts/release_table.py [--releases 0.4.6..0.5.23 ...] [--out runs/release-table.jsonl] [--table]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bisect_spec.api import TargetSpec
from bisect_spec.errors import BisectSpecError, ReleaseUnavailable
from bisect_spec.model.flags import Config
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import Session

CONFIGS = {
    "A": Config((("--speculative-algorithm", "EAGLE3"), ("--speculative-num-draft-tokens", "3"))),
    "B": Config((("--speculative-algorithm", "EAGLE3"), ("--speculative-num-steps", "1"),
                 ("--speculative-num-draft-tokens", "3"))),
}


def outcome_summary(record: dict[str, Any]) -> str:
    """``passed`` or ``Type @ file::function:line``."""
    if record.get("status") == "passed":
        return "passed"
    frame = record.get("frame") or {}
    where = f"{frame.get('file', '?')}::{frame.get('function', '?')}:{frame.get('line', '?')}"
    return f"{record.get('exception', {}).get('type', record.get('status'))} @ {where}"


def measure(release: str) -> dict[str, Any]:
    row: dict[str, Any] = {"release": release}
    started = time.perf_counter()
    try:
        environments.ensure(release)
    except ReleaseUnavailable as exc:
        row.update(status="unavailable", reason=exc.reason, seconds=round(time.perf_counter() - started, 1))
        return row
    except BisectSpecError as exc:
        row.update(status="error", reason=str(exc), seconds=round(time.perf_counter() - started, 1))
        return row
    info = environments.describe(release)
    row.update(status="installed", seconds=info.get("install_seconds"), size_mb=round(environments.size_of(release) / 1e6, 1),
               layers=info.get("layers", []))
    target = TargetSpec(release=release, model="deepseek-v3", draft="eagle3").resolve()
    try:
        with Session(target, timeout=180) as session:
            for name, config in CONFIGS.items():
                record = session.pool.evaluate(session.argv(session.with_draft(session.canonical(config))))
                row[name] = outcome_summary(record)
                row[f"{name}_message"] = str(record.get("exception", {}).get("message", ""))[:160]
            after = session.pool.request({"op": "info"})  # stubs can be added by lazy imports during evaluation
            row["shims"] = after.get("version_shims", [])
            row["stubbed"] = after.get("stubbed_modules", [])
    except BisectSpecError as exc:
        row.update(status="probe-error", reason=str(exc)[:300])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--releases", nargs="+", default=["0.4.6..0.5.23"],
                        help="Releases or ranges; releases without .postN are measured first.")
    parser.add_argument("--out", default="runs/release-table.jsonl")
    parser.add_argument("--table", action="store_true", help="Only print the table of what is recorded.")
    parser.add_argument("--merge", nargs="*", default=[], help="More record files; their rows replace earlier ones.")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["release"]: json.loads(line) for line in out.read_text().splitlines()} if out.is_file() else {}
    for extra in args.merge:
        done.update({json.loads(line)["release"]: json.loads(line) for line in Path(extra).read_text().splitlines()})
    releases = environments.select_releases(args.releases)
    if not args.table:
        for release in sorted(releases, key=lambda r: ("post" in r, environments.version_key(r))):
            if release in done:
                continue
            row = measure(release)
            done[release] = row
            with out.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    print("| release | install | s | own MB | with layers MB | A: num-steps unset | B: num-steps 1 |")
    print("|---|---|---|---|---|---|---|")
    for release in releases:
        row = done.get(release)
        if row is None:
            continue
        status = row["status"] if row["status"] == "installed" else f"{row['status']}: {row.get('reason', '')}"
        own = round(environments.describe(release)["size_bytes"] / 1e6, 1) if environments.is_installed(release) else ""
        cells = [release, status, row.get("seconds", ""), own, row.get("size_mb", ""), row.get("A", "-"), row.get("B", "-")]
        print("| " + " | ".join(str(cell) for cell in cells) + " |")


if __name__ == "__main__":
    main()

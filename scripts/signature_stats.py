"""Signatures of a stored sweep: how many, from how many failing statements, stored and recomputed;
how many rows fail on checks unrelated to speculative decoding (by location and message, as the
summary's ``speculative`` column without a shrunk reproducer).

Recomputing applies this checkout's :func:`bisect_spec.model.signature.signature_of` to the run's own
records, so one run measures the grouping before and after a change of the signature code.

Example::

    python scripts/signature_stats.py runs/20261201-022813-kimi-k2.6-0.5.23-929c
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bisect_spec.model.signature import signature_of
from bisect_spec.report.summary import speculative_reason
from bisect_spec.runtime import store


def stats(run: Path) -> dict[str, Any]:
    """Counts of one run's results (``results.jsonl.gz``)."""
    stored: set[str] = set()
    recomputed: set[str] = set()
    keys: set[str] = set()
    statements: Counter[tuple[str, str, int]] = Counter()
    per_statement: dict[tuple[str, str, int], set[str]] = {}
    rows = failed = unrelated = 0
    speculative: set[str] = set()
    for data in store.read_results(run, "run the sweep again") or []:
        rows += 1
        if data.get("status") == "passed":
            continue
        failed += 1
        if data.get("signature"):
            stored.add(data["signature"]["id"])
        sig = signature_of(data)
        if sig is None:
            continue
        recomputed.add(sig.id)
        entry = {**sig.to_dict(), "example_frame": data.get("frame") or {}}
        if speculative_reason(entry):
            speculative.add(sig.id)
        else:
            unrelated += 1
        keys.add(sig.cross_release_key)
        frame = data.get("frame") or {}
        where = (str(frame.get("file", data.get("status"))), str(frame.get("function", "")),
                 int((frame.get("statement_lines") or [frame.get("line") or 0])[0]))
        statements[where] += 1
        per_statement.setdefault(where, set()).add(sig.id)
    return {"run": run.name, "rows": rows, "failed": failed, "signatures_stored": len(stored),
            "signatures_now": len(recomputed), "cross_release_keys_now": len(keys),
            "failing_statements": len(statements), "rows_failing_on_unrelated_checks": unrelated,
            "speculative_signatures": len(speculative),
            "most_split": sorted(((len(ids), f"{f}:{line} {fn}") for (f, fn, line), ids in per_statement.items()),
                                 reverse=True)[:8]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, nargs="+")
    for run in parser.parse_args().run:
        print(json.dumps(stats(run), indent=1))


if __name__ == "__main__":
    main()

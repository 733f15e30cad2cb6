#!/usr/bin/env python
"""``bisect-spec diff`` over every pair of consecutive installed releases, each example checked by ``probe``.

For each pair (OLD, NEW): the diff's counts per group, and up to three examples (the first group of the
most telling kinds: new, wider, defaults, fixed, moved, message), each evaluated again with the public
``probe`` on both releases; the check says whether probe's two verdicts are what the diff claims:

- new / wider: OLD does not fail with the group's failure, NEW does (same cross-release key);
- fixed / narrower: the other way round;
- moved / message: both fail with the same key; the places (moved) or the messages (message) differ;
- defaults: both pass, and the field resolves to the two values the diff names.

Writes a Markdown page (the table, then the examples) and a JSON file next to it.

Usage: python scripts/diff_history.py [--first 0.5.9] [--last 0.5.23] [--model kimi-k2.6] [--draft eagle3]
       [--strategy quick] [--out docs/diff-history.md] [--runs-dir /tmp/diff-history]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from bisect_spec import api
from bisect_spec.model.flags import Config
from bisect_spec.model.outcome import Outcome
from bisect_spec.model.verdict_kinds import KINDS
from bisect_spec.runtime import environments
from bisect_spec.runtime.session import DRAFT

EXAMPLE_KINDS = ("new", "wider", "defaults", "fixed", "moved", "message", "narrower")


def probe_both(old: str, new: str, config: Config, args: argparse.Namespace) -> dict[str, Outcome]:
    """``probe`` of exactly ``config`` on both releases: the draft profile only where the configuration names it."""
    uses_draft = config.get("--speculative-draft-model-path") == (DRAFT,)
    tokens = config.without("--speculative-draft-model-path").argv() if uses_draft else config.argv()
    found = {}
    for release in (old, new):
        spec = api.TargetSpec(release=release, model=args.model, draft=args.draft if uses_draft else None,
                              hardware=args.hardware)
        placeholders = [v for _, value in config.items for v in value if v.startswith("@") and v != DRAFT]
        if not tokens or placeholders:  # probe asks for a flag, and replaces a path it cannot find: these are
            # evaluated by the session probe uses, exactly as the diff had them
            from bisect_spec.runtime.session import Session

            with Session(spec.resolve(), jobs=1) as bare:
                found[release] = bare.evaluate(config)
            continue
        with api.ProbeSession(spec) as session:
            result = session.probe(tokens)
        if len(result.config) != len(config):  # probe adds the draft only where the algorithm takes one: a
            from bisect_spec.runtime.session import Session  # configuration that has it anyway is evaluated as is

            with Session(spec.resolve(), jobs=1) as exact:
                found[release] = exact.evaluate(config)
            continue
        found[release] = result.outcome
    return found


def check(group: Any, outcomes: dict[str, Outcome], old: str, new: str) -> tuple[bool, str]:
    """Whether probe's verdicts on both releases are what the diff says of this group, and in words."""
    a, b = outcomes[old], outcomes[new]

    def key(o: Outcome) -> str | None:
        return o.signature.cross_release_key if o.signature else None

    def words(o: Outcome) -> str:
        return "passes" if o.passed else o.headline

    kind = group["kind"]
    if kind in ("new", "wider"):
        ok = key(b) == group["key"] and key(a) != group["key"]
    elif kind in ("fixed", "narrower"):
        ok = key(a) == group["key"] and key(b) != group["key"]
    elif kind == "moved":
        ok = key(a) == key(b) == group["key"] and (a.frame.get("line"), a.frame.get("file"), a.frame.get("function")) != (
            b.frame.get("line"), b.frame.get("file"), b.frame.get("function"))
    elif kind == "message":
        ok = key(a) == key(b) == group["key"] and a.exception.get("message") != b.exception.get("message")
    elif kind == "replaced":  # the example fails on both sides, in two ways (or, unmasked, its reproducer alike)
        ok = not a.passed and not b.passed and (key(a) != key(b) or bool(group["detail"].get("unmasked")))
    else:
        field = group["detail"]["field"]
        ok = a.passed and b.passed and (a.resolved.get(field), b.resolved.get(field)) == (
            group["detail"]["old_value"], group["detail"]["new_value"])
        return ok, f"{field}: {a.resolved.get(field)!r} on {old}, {b.resolved.get(field)!r} on {new}"
    return ok, f"{old}: {words(a)[:160]}; {new}: {words(b)[:160]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first", default="0.5.9")
    parser.add_argument("--last", default="0.5.23")
    parser.add_argument("--model", default="kimi-k2.6")
    parser.add_argument("--draft", default="eagle3")
    parser.add_argument("--hardware", default="rtx-pro-6000")
    parser.add_argument("--strategy", default="quick")
    parser.add_argument("--out", default="docs/diff-history.md")
    parser.add_argument("--runs-dir", default="/tmp/diff-history")
    args = parser.parse_args()
    key = environments.version_key
    releases = sorted((r for r in environments.installed() if key(args.first) <= key(r) <= key(args.last)), key=key)
    if len(releases) < 2:
        raise SystemExit(f"fewer than two installed releases between {args.first} and {args.last}")
    rows: list[dict[str, Any]] = []
    for old, new in itertools.pairwise(releases):
        started = time.time()
        spec = api.TargetSpec(model=args.model, draft=args.draft, hardware=args.hardware)
        report = api.diff(old, new, spec, strategy=args.strategy, runs_dir=Path(args.runs_dir))
        data = report.to_dict()
        examples = []
        groups = data["groups"]
        # the first group of each telling kind, then the next groups in report order: three at most
        by_kind = [next(g for g in groups if g["kind"] == k) for k in EXAMPLE_KINDS if any(g["kind"] == k for g in groups)]
        chosen = (by_kind + [g for g in groups if all(g is not c for c in by_kind)])[:3]
        for group in chosen:
            kind = group["kind"]
            flags = (group.get("reproducer") or {}).get("argv") if kind != "replaced" else None
            flags = flags or group["example"]
            ok, said = check(group, probe_both(old, new, Config.from_argv(flags), args), old, new)
            examples.append({"kind": kind, "flags": flags, "agrees": ok, "probe": said})
        rows.append({"old": old, "new": new, "counts": data["counts"], "compared": data["compared"],
                     "not_compared": sum(data["not_compared"].values()), "gate": "fails" if data["gating"] else "passes",
                     "seconds": round(time.time() - started, 1), "examples": examples, "diff": data.get("path")})
        print(f"{old} -> {new}: {data['counts']} ({rows[-1]['seconds']} s)", file=sys.stderr, flush=True)
    write(rows, args)


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    command = (f"python scripts/diff_history.py --first {args.first} --last {args.last} --model {args.model} "
               f"--draft {args.draft} --hardware {args.hardware} --strategy {args.strategy}")
    agreed = sum(e["agrees"] for r in rows for e in r["examples"])
    total = sum(len(r["examples"]) for r in rows)
    out = ["# What each release changed: `bisect-spec diff` over consecutive releases", "",
           f"Every pair of consecutive installed releases from {args.first} to {args.last}, {args.model} + "
           f"{args.draft} on a simulated {args.hardware} box, strategy `{args.strategy}`: the same plan on both sides"
           " (module notes of `bisect_spec/workflows/diff.py`), grouped by `bisect_spec/reduce/verdict_changes.py`. "
           f"Produced by `{command}`.", "",
           f"Each pair's examples (up to three, from the most telling groups) were evaluated again with `probe` on both "
           f"releases: **{agreed} of {total}** gave the verdicts the diff claims.", "",
           "| old → new | compared | not compared | " + " | ".join(KINDS) + " | gate | seconds |",
           "|---|---|---|" + "---|" * len(KINDS) + "---|---|"]
    for row in rows:
        out.append(f"| {row['old']} → {row['new']} | {row['compared']} | {row['not_compared']} | "
                   + " | ".join(str(row["counts"].get(k, 0)) for k in KINDS) + f" | {row['gate']} | {row['seconds']} |")
    out += ["", "Columns: groups of each kind (a group is one failure, or one resolved field, with every configuration it"
            " holds). *not compared*: configurations one side refuses (a flag or value it does not have; most often an "
            "algorithm added since).", "", "## Examples, checked by probe on both releases", ""]
    for row in rows:
        if not row["examples"]:
            continue
        out += [f"### {row['old']} → {row['new']}", ""]
        for example in row["examples"]:
            mark = "agrees" if example["agrees"] else "**disagrees**"
            out.append(f"- {example['kind']}: `{shlex.join(example['flags']) or '(no flags)'}`; probe {mark}: "
                       f"{example['probe'].replace('|', '/')}")
        out.append("")
    Path(args.out).write_text("\n".join(out))
    Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

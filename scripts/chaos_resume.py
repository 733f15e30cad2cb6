#!/usr/bin/env python
"""Chaos check: kill -9 a sweep (and its shrink phase) at random points, resume, repeat.

One uninterrupted reference run, then one run that is SIGKILLed ``--kills`` times at
random moments (during the covering array, the Hypothesis search or the shrinking) and
resumed with ``--resume`` after each kill, until it completes. Reports lost and
duplicated journal records and whether the results and summary.json are
identical to the reference.

Usage: python scripts/chaos_resume.py [--kills 20] [--strategy quick] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bisect_spec.runtime import store

BISECT_SPEC = Path(sys.executable).with_name("bisect-spec")


def sweep_argv(runs: Path, strategy: str, resume: str | None) -> list[str]:
    argv = [str(BISECT_SPEC), "sweep", "--sglang", "0.5.23", "--model", "kimi-k2.6", "--draft", "eagle3",
            "--hardware", "rtx-pro-6000", "--strategy", strategy, "--runs-dir", str(runs), "--no-cache", "--jobs", "2"]
    return [*argv, "--resume", resume] if resume else argv


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    psutil.wait_procs(children, timeout=20)


def journal_keys(run: Path) -> list[str]:
    """The keys of the run's journal records (a torn last line left out: the next resume evaluates it again)."""
    return [entry["key"] for entry in store.read_journal(run)]


def progress_of(run: Path) -> int:
    """Work done so far: one unit per journal record, one per shrunk signature's reproducer files."""
    shrunk = len(list((run / "reproducers").iterdir())) if (run / "reproducers").exists() else 0
    return len(journal_keys(run)) + shrunk


def phase_of(run: Path) -> str:
    """Where the run was when it was killed: start-up, cover, search or shrink."""
    if (run / "reproducers").exists():
        return "shrink"
    entries = store.read_journal(run)
    return str(entries[-1]["phase"]) if entries else "start-up"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--strategy", default="quick")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="chaos-"))

    started = time.monotonic()
    subprocess.run(sweep_argv(root / "reference", args.strategy, None), check=True, capture_output=True)
    reference_seconds = time.monotonic() - started
    reference = next((root / "reference").iterdir())
    total = progress_of(reference)
    print(f"reference run: {reference_seconds:.1f} s, {len(journal_keys(reference))} journal records, "
          f"{len(list((reference / 'reproducers').iterdir()))} signatures shrunk")

    runs = root / "chaos"
    run_id: str | None = None
    kills = resumes = 0
    phases: dict[str, int] = {}
    while True:
        proc = subprocess.Popen(sweep_argv(runs, args.strategy, run_id), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if run_id is not None:
            resumes += 1
        if kills < args.kills:
            # kill at a random point of the remaining work: journal records, then shrunk signatures
            current = progress_of(runs / run_id) if run_id else 0
            step = max(1, 2 * (total - current) // (args.kills - kills + 1))  # spread the kills over what is left
            target = current + rng.randint(1, step)
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                made = sorted(runs.iterdir()) if runs.exists() else []
                if made and progress_of(made[0]) >= target:
                    break
                time.sleep(0.01)
            if proc.poll() is None:
                kill_group(proc)
                kills += 1
                made = sorted(runs.iterdir()) if runs.exists() else []
                if run_id is None and made:
                    run_id = made[0].name
                phase = phase_of(runs / run_id) if run_id else "start-up"
                phases[phase] = phases.get(phase, 0) + 1
                continue
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            sys.exit(f"resume failed: {err.decode()[-2000:]}")
        if run_id is None:
            run_id = next(runs.iterdir()).name
        break

    run = runs / run_id
    keys = journal_keys(run)
    reference_keys = journal_keys(reference)
    lost = len(set(reference_keys) - set(keys))
    duplicated = len(keys) - len(set(keys))
    same = {"results": store.read_results(run, "") == store.read_results(reference, ""),
            "summary.json": (run / "summary.json").read_bytes() == (reference / "summary.json").read_bytes()}
    print(f"kills: {kills} (at: {', '.join(f'{k} {v}' for k, v in sorted(phases.items()))}), resumes: {resumes}")
    print(f"journal records: {len(keys)} (reference {len(reference_keys)}), lost: {lost}, duplicated: {duplicated}")
    print("identical to the uninterrupted run: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items()))
    sys.exit(0 if lost == 0 and duplicated == 0 and all(same.values()) else 1)


if __name__ == "__main__":
    main()

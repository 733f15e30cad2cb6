#!/usr/bin/env python
"""Regenerate the README's report screenshots (docs/report-nightly.png, docs/report-sweep.png).

Renders the HTML report of the test fixtures (the nightly fixture and the stored quick sweep)
with headless chromium, the way tests/integration/test_report_browser.py does.

With --run DIR, also the main job's report at 1280 px (docs/report-main-1280.png), filtered by the page's
address when --filter is given (``#algorithm=EAGLE3``).

Usage: python scripts/report_screenshots.py [--out docs] [--run RUN_DIR [--filter '#q=TypeError']]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bisect_spec import api

ROOT = Path(__file__).resolve().parents[1]
RESOURCES = ROOT / "tests" / "resources"
PAGES = {"report-nightly.png": (RESOURCES / "nightly-3x2.json", 1100, 1400, ""),
         "report-sweep.png": (RESOURCES / "runs" / "20261130-183524-kimi-k2.6-0.5.23-5ae9", 1000, 1400, "")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--run", type=Path, default=None, help="a run directory: its report at 1280 px too")
    parser.add_argument("--filter", default="", help="the page address' filters, e.g. '#algorithm=EAGLE3'")
    args = parser.parse_args()
    pages = dict(PAGES)
    if args.run is not None:
        pages["report-main-1280.png"] = (args.run, 1400, 1280, args.filter)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium is not installed: apt-get install -y chromium", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name, (target, height, width, address) in pages.items():
            page = (target / "report.html") if address else Path(scratch) / f"{name}.html"
            if not address:
                page.write_text(api.report(target, "html"))
            shot = args.out / name
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--user-data-dir={Path(scratch) / 'profile'}", f"--screenshot={shot}",
                            f"--window-size={width},{height}", page.as_uri() + address], capture_output=True, check=True,
                           timeout=180)
            print(f"{shot}: {shot.stat().st_size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

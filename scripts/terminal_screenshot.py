#!/usr/bin/env python
"""A screenshot of a sweep's summary as a 100-column terminal shows it (docs/sweep-summary-100.png).

The summary is the CLI's own: :func:`bisect_spec.report.text.summary_text` at 100 columns, coloured by
:mod:`bisect_spec.cli.terminal` as on a real terminal. rich records it as SVG (a terminal window);
headless chromium turns that into the PNG (the SVG is kept next to it).

Usage: python scripts/terminal_screenshot.py RUN_DIR [--out docs] [--columns 100] [--lines 44]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from bisect_spec.cli import terminal
from bisect_spec.report import text as render

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished run's directory (holding summary.json)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--columns", type=int, default=100)
    parser.add_argument("--lines", type=int, default=44,
                        help="show the first LINES lines and the last two (where the files are), with … between")
    parser.add_argument("--command", default="bisect-spec --model kimi-k2.6 --draft eagle3",
                        help="the command line shown above the output")
    args = parser.parse_args()
    summary = json.loads((args.run / "summary.json").read_text())
    text = render.summary_text(summary, width=args.columns, run_path=f"runs/{args.run.name}")
    lines = text.splitlines()
    if len(lines) > args.lines + 3:
        text = "\n".join([*lines[:args.lines], f"… ({len(lines) - args.lines - 2} more lines)", *lines[-2:]])
    console = Console(record=True, width=args.columns, force_terminal=True, color_system="truecolor",
                      theme=terminal.THEME, highlighter=terminal.AnswerHighlighter(), markup=False, emoji=False,
                      soft_wrap=True, file=open("/dev/null", "w"))  # noqa: SIM115 (rich keeps the file)
    console.print(f"$ {args.command}", highlight=False)
    console.print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"sweep-summary-{args.columns}"
    svg = args.out / f"{name}.svg"
    console.save_svg(str(svg), title=f"bisect-spec · {args.columns} columns")
    print(f"{svg}: {svg.stat().st_size / 1024:.0f} KB")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium is not installed (apt-get install -y chromium): only the SVG was written", file=sys.stderr)
        return 0
    height = text.count("\n") + 3
    with tempfile.TemporaryDirectory() as scratch:
        png = args.out / f"{name}.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={Path(scratch) / 'profile'}", f"--screenshot={png}",
                        f"--window-size={args.columns * 12 + 60},{height * 24 + 110}", svg.resolve().as_uri()],
                       capture_output=True, check=True, timeout=180)
        print(f"{png}: {png.stat().st_size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

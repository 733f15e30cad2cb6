"""The HTML reports rendered by a real headless browser (Debian's chromium): the screenshot shows the
pictures (not a blank page, the regression red and the signature colours are on screen) and the
rendered DOM still holds every SVG picture.

Skips only when chromium is not installed (``.ci/run`` installs it when it runs as root).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest

from bisect_spec import api
from tests.conftest import RESOURCES
from tests.unit.test_report import parsed

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: apt-get install -y chromium")]

WIDTH, HEIGHT = 1400, 1000
NIGHTLY = RESOURCES / "nightly-3x2.json"
RUN_DIR = RESOURCES / "runs" / "20261130-183524-kimi-k2.6-0.5.23-5ae9"


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=180, check=False)


def png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """Width, height and RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, interlace) == (8, 0) and colour_type in (2, 6)
            channels = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    pixels: list[tuple[int, ...]] = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        pixels += [tuple(line[i:i + 3]) for i in range(0, stride, channels)]
        previous = line
    return width, height, pixels


def near(pixels: Counter[tuple[int, ...]], colour: str, tolerance: int = 6) -> int:
    """How many pixels have (about) this colour."""
    target = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return sum(n for pixel, n in pixels.items() if all(abs(a - b) <= tolerance for a, b in zip(pixel, target, strict=True)))


def render(tmp_path: Path, target: Path) -> tuple[Counter[tuple[int, ...]], str]:
    page = tmp_path / "report.html"
    page.write_text(api.report(target, "html"))
    shot = tmp_path / "report.png"
    result = chromium(tmp_path / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", page.as_uri())
    assert shot.is_file(), result.stderr[-2000:]
    width, height, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    colours = Counter(pixels)
    assert len(colours) > 50, "the screenshot is (nearly) one colour"
    assert colours.most_common(1)[0][1] < 0.9 * width * height, "the screenshot is mostly one colour"
    dom = chromium(tmp_path / "profile", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    return colours, dom.stdout


def test_nightly_page_renders_the_heat_maps(tmp_path: Path) -> None:
    colours, dom = render(tmp_path, NIGHTLY)
    assert near(colours, "#c62828") > 200  # the regression outline, NEW badge and "regression" badge
    assert near(colours, "#990000") > 1000  # the darkest heat cells (the most frequent failure)
    assert near(colours, "#2e7d32") > 50  # fixed
    elements = parsed(dom)
    assert len(elements.with_class("svg", "heatmap")) == 2
    assert len(elements.with_class("g", "regression")) == 1
    assert sum(1 for tag, _ in elements.tags if tag == "title") > 30  # tooltips survive rendering


def test_sweep_page_renders_the_flag_pair_maps(tmp_path: Path) -> None:
    colours, dom = render(tmp_path, RUN_DIR)
    assert near(colours, "#D55E00") > 1000  # first signature (TypeError): outcome bar and pair cells
    assert near(colours, "#0072B2") > 1000  # second signature (AssertionError)
    elements = parsed(dom)
    assert len(elements.with_class("svg", "pairmap")) == 6  # of the EAGLE3 rows (the draft's algorithm): 4 flags
    assert len(elements.with_class("svg", "outcomes")) == 1


def _rows(dom: str) -> dict[str, bool]:
    """Signature id -> whether its row is shown, as the browser left the DOM."""
    import re

    return {m["id"]: "hidden" not in m["tag"] for m in
            re.finditer(r'(?P<tag><tr[^>]*data-sig="(?P<id>[0-9a-f]+)"[^>]*>)', dom)}


def test_sweep_page_search_and_filters_work_in_a_real_browser_at_1280_px(tmp_path: Path) -> None:
    import re

    page = tmp_path / "report.html"
    page.write_text(api.report(RUN_DIR, "html"))
    shot = tmp_path / "report-1280.png"
    chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,1000", page.as_uri())
    assert shot.is_file()
    dom = chromium(tmp_path / "profile", "--window-size=1280,1000", "--dump-dom", page.as_uri()).stdout
    everything = _rows(dom)
    assert len(everything) >= 2 and all(everything.values())  # nothing filtered: every row shown
    width = re.search(r'data-scroll-width="(\d+)"', dom)
    assert width is not None and int(width[1]) <= 1280, "the page scrolls sideways at 1280 px"
    assert re.search(r'id="shown"[^>]*>(\d+) of (\d+) failure signatures shown<', dom)
    # an exception filter (carried by the page's address, as a link would)
    exceptions = dict(re.findall(r'<tr[^>]*data-sig="([0-9a-f]+)"[^>]*data-exception="(\w+)"', dom))
    chosen = sorted(set(exceptions.values()))[0]
    filtered = _rows(chromium(tmp_path / "profile", "--dump-dom", page.as_uri() + f"#exception={chosen}").stdout)
    assert filtered == {sig: exceptions[sig] == chosen for sig in everything}
    assert any(not shown for shown in filtered.values()) or len(set(exceptions.values())) == 1
    # a search: one signature's id finds that row alone
    one = next(iter(everything))
    searched = _rows(chromium(tmp_path / "profile", "--dump-dom", page.as_uri() + f"#q={one}").stdout)
    assert [sig for sig, shown in searched.items() if shown] == [one]
    # every row links to its reproducer files
    assert all(f'href="reproducers/{sig}/bug_report.md"' in dom and f'href="reproducers/{sig}/launch.sh"' in dom
               for sig in everything)

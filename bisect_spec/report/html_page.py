"""The HTML report: one self-contained page (inline CSS and SVG; no script, no fonts, no network).

Pictures where people would rather look than read:

* nightly: a heat map per facet (model + draft · hardware): rows are failures (cross-release
  keys, titled by exception and function), columns releases in version order, the colour the
  share of the cell's configurations that fail with it; regressions outlined red and marked
  NEW, fixed ones outlined green; a pass-rate bar above each release column;
* sweep: an outcome bar, then for each pair of flags in the run's space a small value × value
  grid, coloured by the dominant failure signature and as strong as the share of failing
  configurations with those two values.

Every mark carries an SVG ``<title>`` (a tooltip, and what screen readers read), every picture
a legend. Pure: model in, string out.
"""

from __future__ import annotations

import html
import itertools
import shlex
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bisect_spec.errors import UsageError
from bisect_spec.model.flags import Config
from bisect_spec.report import night
from bisect_spec.report.report_model import (
    STAGE_HEADERS,
    SweepInput,
    answer_first,
    cell_of,
    headline,
    stage_rows,
)

#: Okabe–Ito colours (distinguishable with the common colour-vision deficiencies), one per signature.
#: The most frequent signatures get their own colour; the rest share OTHER_COLOUR.
PALETTE = ("#D55E00", "#0072B2", "#E69F00", "#CC79A7", "#56B4E9", "#009E73", "#F0E442")
OTHER_COLOUR = "#999999"
LIGHT_PALETTE = {"#E69F00", "#56B4E9", "#F0E442", OTHER_COLOUR}  # dark text on these
LONG_ARGV = 8  # tokens; longer reproducers are folded in a <details>
#: Heat ramp from "rare" to "every configuration" (light orange to dark red).
RAMP = ((0.0, (254, 232, 200)), (0.35, (253, 187, 132)), (0.7, (227, 74, 51)), (1.0, (153, 0, 0)))
PASSED_FILL = "#e3eee3"
NEW, FIXED, CHANGED = "#c62828", "#2e7d32", "#ef6c00"
MOVED = "#4527a0"  # a failure that stays the same (cross-release key) but sits in another file or function
MAX_PAIRS = 16
MAX_VALUES = 12
OTHER = "other"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1f2328;margin:0;background:#fafafa}
main{max-width:1340px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:14px;margin:14px 0 6px;color:#333}
.lead{color:#444;margin:0 0 14px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0 6px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:22px}.card span{color:#555;font-size:12px}
.card.bad{border-color:#c62828;background:#fdecea}.card.good{border-color:#2e7d32;background:#edf7ed}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:6px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f0f0f0}
td.num{text-align:right}
td.knob{text-align:center;font-weight:600}td.knob.good{background:#edf7ed;color:#2e7d32}
td.knob.partial{background:#fff8e1;color:#8d6e00}td.knob.bad{background:#fdecea;color:#c62828}
#starts pre{background:#f3f3f3;padding:8px;white-space:pre-wrap;word-break:break-all}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f3f3;padding:1px 3px;border-radius:3px}
.badge{display:inline-block;white-space:nowrap;border-radius:3px;padding:0 6px;font-size:12px;font-weight:600;color:#fff}
.b-new{background:#c62828}.b-vanished{background:#2e7d32}.b-changed{background:#ef6c00}.b-known{background:#757575}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:5px}
.grid{display:flex;flex-wrap:wrap;align-items:flex-start;gap:14px 22px}
.grid figure{margin:0;background:#fff;border:1px solid #e3e3e3;border-radius:6px;padding:6px}
figcaption{font-size:12px;color:#333;font-weight:600;margin-bottom:2px}
.why{font-weight:400;color:#555;font-size:11px}
svg text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}
.note{color:#555;font-size:12px}.nw{white-space:nowrap}.scroll{overflow-x:auto}
td{max-width:420px}td code{overflow-wrap:break-word}summary{cursor:pointer;color:#555}
table.signatures{table-layout:fixed;width:100%}table.signatures td{max-width:none;overflow-wrap:anywhere}
table.signatures td.msg{white-space:normal}.filters{display:flex;flex-wrap:wrap;gap:8px 14px;align-items:center;
margin:8px 0;padding:8px 10px;background:#fff;border:1px solid #ddd;border-radius:6px;font-size:13px}
.filters input[type=search]{min-width:260px}.filters .count{color:#555}.links a{margin-right:6px;white-space:nowrap}
"""

#: the signature tables' filters: a search box, an algorithm, an exception, a flag; also read from the page's
#: address (``report.html#q=TypeError&algorithm=EAGLE3&exception=&flag=--page-size``) so a link can carry them
FILTER_SCRIPT = """
(function(){
  var form=document.getElementById('filters'); if(!form) return;
  var rows=[].slice.call(document.querySelectorAll('tr[data-sig]'));
  function apply(){
    var q=form.q.value.toLowerCase(), a=form.algorithm.value, e=form.exception.value, f=form.flag.value, shown=0;
    rows.forEach(function(r){
      var ok=(!q||r.getAttribute('data-text').indexOf(q)>=0)
        &&(!a||(' '+r.getAttribute('data-algorithms')+' ').indexOf(' '+a+' ')>=0)
        &&(!e||r.getAttribute('data-exception')===e)
        &&(!f||(' '+r.getAttribute('data-flags')+' ').indexOf(' '+f+' ')>=0);
      r.hidden=!ok; if(ok) shown++;
    });
    document.getElementById('shown').textContent=shown+' of '+rows.length+' failure signatures shown';
    var p=[];
    ['q','algorithm','exception','flag'].forEach(function(k){
      if(form[k].value) p.push(k+'='+encodeURIComponent(form[k].value));
    });
    history.replaceState(null,'',p.length?'#'+p.join('&'):location.pathname);
  }
  location.hash.replace(/^#/,'').split('&').forEach(function(kv){
    var i=kv.indexOf('='); if(i<0) return; var k=kv.slice(0,i), v=decodeURIComponent(kv.slice(i+1));
    if(form[k]) form[k].value=v;
  });
  form.addEventListener('input',apply); form.addEventListener('change',apply); apply();
  // the page's own width, for a test in a real browser: the tables fit the window, nothing scrolls sideways
  document.body.setAttribute('data-scroll-width', document.documentElement.scrollWidth);
})();
"""

HATCH = ('<pattern id="{id}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
         '<rect width="6" height="6" fill="#eee"/><line x1="0" y1="0" x2="0" y2="6" stroke="#bbb" stroke-width="2"/></pattern>')


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def el(name: str, content: str = "", /, **attrs: Any) -> str:
    """One element. ``content`` is markup (escape text with :func:`esc`); attribute values are escaped,
    ``_`` in a name becomes ``-`` (``font_size``), a trailing ``_`` is dropped (``class_``), None is left out.
    """
    parts = [name]
    for key, value in attrs.items():
        if value is None:
            continue
        text = f"{value:.1f}" if isinstance(value, float) else str(value)
        parts.append(f'{key.rstrip("_").replace("_", "-")}="{esc(text)}"')
    return f"<{' '.join(parts)}>{content}</{name}>"


def tip(text: str, *marks: str, class_: str | None = None) -> str:
    """A group of marks with a tooltip (SVG ``<title>``: also what screen readers read)."""
    return el("g", el("title", esc(text)) + "".join(marks), class_=class_)


def svg(width: float, height: float, title: str, content: str, class_: str) -> str:
    return el("svg", el("title", esc(title)) + content, xmlns="http://www.w3.org/2000/svg", width=round(width),
              height=round(height), role="img", aria_label=title, class_=class_)


def code(text: Any, class_: str | None = None) -> str:
    return el("code", esc(text), class_=class_)


def location_html(location: Any) -> str:
    """``srt/x/y.py::function`` that may wrap after a ``/`` or before ``::`` rather than anywhere."""
    return el("code", esc(location).replace("/", "/<wbr>").replace("::", "<wbr>::"))


def argv_html(argv: Sequence[str] | None) -> str:
    """Flags for a table cell: lines break between tokens, never inside one (``--speculative-...``)."""
    tokens = [shlex.quote(token) for token in argv] if argv else ["(defaults)"]
    return el("code", " ".join(el("span", esc(token), class_="nw") for token in tokens))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """An HTML table; cells are markup."""
    head = el("tr", "".join(el("th", esc(h)) for h in headers))
    body = "".join(el("tr", "".join(el("td", cell, class_="num" if i in numeric else None) for i, cell in enumerate(row)))
                   for row in rows)
    return el("table", head + body)


def page(model: dict[str, Any], data: Any) -> str:
    """The whole page for a report model (``data`` is the raw input: a sweep's results feed the pair maps)."""
    body = [el("h1", "bisect-spec " + esc(model["title"])), el("p", esc(headline(model)), class_="lead"), _cards(model)]
    if model["kind"] == "nightly":
        body += [_changes(model), _heatmaps(model), _cells_table(model)]
    else:
        assert isinstance(data, SweepInput)
        body += [_starts(data.summary), _sweep_pictures(model, data), _findings(model["findings"])]
    head = ('<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            + el("title", "bisect-spec " + esc(model["title"])) + el("style", CSS))
    script = el("script", FILTER_SCRIPT) if 'id="filters"' in "".join(body) else ""
    return ('<!DOCTYPE html>\n<html lang="en">' + el("head", head) + "\n"
            + el("body", el("main", "\n" + "\n".join(b for b in body if b) + "\n") + script) + "</html>\n")


def _cards(model: dict[str, Any]) -> str:
    totals = model["totals"]
    passed = totals["counts"].get("passed", 0)
    cards: list[tuple[Any, str, str | None]] = [(totals["evaluated"], "configurations", None), (passed, "passed", None),
             (totals["evaluated"] - passed, "failed", None), (totals["failures"], "distinct failures", None)]
    if model["kind"] == "nightly":
        odd = totals["cells_skipped"] or totals["cells_error"]
        label = f"cells ({totals['cells_skipped']} skipped, {totals['cells_error']} error)" if odd else "cells"
        cards.insert(0, (totals["cells"], label, None))
    if model["baseline"]:
        cards += [(totals["regressions"], "regressions", "bad" if totals["regressions"] else "good"),
                  (totals["fixed"], "fixed", "good" if totals["fixed"] else None), (totals["changed"], "changed", None)]
    return el("div", "".join(el("div", el("b", esc(n)) + el("span", esc(label)), class_=f"card {cls or ''}".strip())
                             for n, label, cls in cards), class_="cards")


# -- nightly ----------------------------------------------------------------------------------------------


def _changes(model: dict[str, Any]) -> str:
    """The night's verdict per failure (:func:`bisect_spec.report.night.by_failure`), ids by cross-release key."""
    notes = []
    if not model["baseline"]:
        notes.append(el("p", "No baseline: every failure is reported as found (known), none as new.", class_="note"))
    elif not model["changes"]:
        notes.append(el("p", f"None changed since {esc(model['baseline'])}: the same failures as the baseline."))
    rows = night.by_failure(model["failures"])
    if not rows:
        return "".join(notes)
    since = f" against {esc(model['baseline'])}" if model["baseline"] else ""
    classes = {night.NEW: "b-new", night.FIXED: "b-vanished"}
    body = []
    for row in rows:
        where = esc(row["detail"]) if row["detail"] else location_html(row["location"])
        shade = classes.get(row["verdict"]) or ("b-changed" if row["detail"] else "b-known")  # grey: not new, fixed or changed
        badge = el("span", esc(row["word"]), class_=f"badge {shade}")
        cells = el("span", esc(night.cells_text(row, brief=True)), title=night.cells_text(row))
        body.append([code(row["id"], "nw"), badge, cells, esc(row["title"]), where, argv_html(row["smallest"])])
    return ("".join(notes) + el("h2", f"The night's verdict per failure{since}")
            + table(["id", "verdict", "cells", "failure", "where", "smallest reproducer"], body)
            + el("p", esc(night.ID_LEGEND) + ".", class_="note legend-ids"))


def ramp(t: float) -> str:
    """Heat colour for ``t`` in [0, 1]."""
    t = min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in itertools.pairwise(RAMP):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(c0, c1, strict=True))
    return "#990000"


def _text_width(text: str, size: float) -> float:
    """Rough rendered width of ``text`` in a sans-serif font (capitals are wider)."""
    return sum(0.7 if c.isupper() else 0.36 if c in "ijl.,:;|' " else 0.58 for c in text) * size


def _cut(text: str, width: float, size: float) -> str:
    """``text`` shortened with an ellipsis to fit ``width`` pixels at font ``size``."""
    if _text_width(text, size) <= width:
        return text
    while text and _text_width(text + "…", size) > width:
        text = text[:-1]
    return text + "…"


def _heatmaps(model: dict[str, Any]) -> str:
    shares = [slot["share"] for table in model["matrix"] for row in table["rows"] for slot in row["cells"].values() if slot]
    top = max(shares, default=0.0) or 1.0
    parts = [el("h2", "Release × failure"),
             el("p", "Each row is one failure, followed across releases by its cross-release key; the colour is the share "
                     "of that cell's configurations that fail with it. Hover for details.", class_="note"), _heat_legend(top)]
    titles = [row["title"] for table in model["matrix"] for row in table["rows"]]
    label_w = min(430.0, max(220.0, max((_text_width(t, 13) for t in titles), default=0) + 24))  # one for all: columns align
    for table in model["matrix"]:
        parts.append(el("h3", esc(table["facet"])) + el("div", _heatmap(model, table, top, label_w), class_="scroll"))
    return "\n".join(parts)


def _heatmap(model: dict[str, Any], table: dict[str, Any], top: float, label_w: float) -> str:
    releases: list[str] = table["releases"]
    rows: list[dict[str, Any]] = table["rows"]
    col_w, row_h, head_h = 104, 38, 64
    out = [el("defs", HATCH.format(id="hatch")),
           el("text", "failure (cross-release key · file)", x=8, y=head_h - 10, font_size=12, fill="#555")]
    for number, release in enumerate(releases):
        x = label_w + number * col_w
        out.append(el("text", esc(release), x=x + col_w / 2, y=18, text_anchor="middle", font_size=14, font_weight=600))
        out.append(_column_head(cell_of(model, table["facet"], release), release, x, col_w))
    if not rows:
        out.append(el("text", "no failures in any release", x=label_w, y=head_h + 24, font_size=13, fill=FIXED))
    for index, row in enumerate(rows):
        y = head_h + index * row_h
        file = str(row["location"]).partition("::")[0].rpartition("/")[2]
        out.append(tip(f"{row['title']} [{row['cross_release_key']}] at {row['location']}",
                       el("text", esc(_cut(row["title"], label_w - 16, 13)), x=8, y=y + 17, font_size=13),
                       el("text", esc(f"{row['cross_release_key']} · {_cut(file, label_w - 90, 10.5)}"), x=8, y=y + 31,
                          font_size=10.5, fill="#666")))
        for number, release in enumerate(releases):
            out.append(_heat_cell(model, table, row, release, (label_w + number * col_w, y, col_w, row_h), top))
    width, height = label_w + col_w * len(releases) + 10, head_h + row_h * max(1, len(rows)) + 8
    return svg(width, height, f"Failures by SGLang release: {table['facet']}", "".join(out), "heatmap")


def _column_head(cell: dict[str, Any] | None, release: str, x: float, col_w: float) -> str:
    """Under a release's name: its pass rate as a bar, or why the cell did not run."""
    if cell is None:
        return ""
    middle = x + col_w / 2
    if cell["status"] != "done":
        return tip(f"SGLang {release}: {cell['status']}: {cell['reason']}",
                   el("text", esc(cell["status"]), x=middle, y=38, text_anchor="middle", font_size=12, fill="#777"))
    passed, evaluated = cell["counts"].get("passed", 0), cell["evaluated"]
    share = passed / evaluated if evaluated else 0.0
    bar_w = col_w - 20
    return tip(f"SGLang {release}: {passed} of {evaluated} configurations pass ({share:.0%})",
               el("rect", x=x + 10, y=28, width=bar_w, height=9, fill="#d9534f", rx=2),
               el("rect", x=x + 10, y=28, width=bar_w * share, height=9, fill="#5cb85c", rx=2),
               el("text", f"{share:.0%} pass", x=middle, y=50, text_anchor="middle", font_size=11, fill="#555"))


def _heat_cell(model: dict[str, Any], table: dict[str, Any], row: dict[str, Any], release: str,
               box: tuple[float, float, float, float], top: float) -> str:
    x, y, w, h = box
    slot = row["cells"][release]
    cell = cell_of(model, table["facet"], release)
    rect = {"x": x + 3, "y": y + 3, "width": w - 6, "height": h - 6, "rx": 3}
    label = {"x": x + w / 2, "y": y + h / 2 + 4, "text_anchor": "middle"}
    what = f"{row['title']} [{row['cross_release_key']}] on SGLang {release}"
    if cell is not None and cell["status"] != "done":
        return tip(f"{what}: cell {cell['status']} ({cell['reason']})", el("rect", **rect, fill="url(#hatch)"),
                   class_="cell skipped")
    if slot is None:
        return tip(f"{what}: not seen", el("rect", **rect, fill="#f5f5f5"), el("text", "–", **label, font_size=12, fill="#bbb"),
                   class_="cell absent")
    if slot.get("verdict") == night.FIXED or slot["change"] == "vanished":
        return tip(f"{what}: fixed (gone since the baseline)",
                   el("rect", **rect, fill="#edf7ed", stroke=FIXED, stroke_width=2, stroke_dasharray="4 2"),
                   el("text", "fixed", **label, font_size=12, fill=FIXED, font_weight=600), class_="cell fixed")
    t = slot["share"] / top
    evaluated = cell["evaluated"] if cell else 0
    notes = {"new": " — NEW since the baseline (regression)", "message-changed": " — message changed since the baseline",
             "location-moved": " — location moved since the baseline"}
    marks = [el("rect", **rect, fill=ramp(t)),
             el("text", str(slot["count"]), **label, font_size=13, font_weight=600, fill="#fff" if t > 0.55 else "#222")]
    if slot.get("verdict") == night.NEW or slot["change"] in ("message-changed", "location-moved"):
        word, colour = ("NEW", NEW) if slot.get("verdict") == night.NEW else ("CHANGED", CHANGED)
        badge_w = 14 + _text_width(word, 9)
        marks[0] = el("rect", **rect, fill=ramp(t), stroke=colour, stroke_width=3 if word == "NEW" else 2,
                      stroke_dasharray=None if word == "NEW" else "4 2")
        marks += [el("rect", x=x + w - badge_w - 2, y=y, width=badge_w, height=13, rx=3, fill=colour),
                  el("text", word, x=x + w - 2 - badge_w / 2, y=y + 10, text_anchor="middle", font_size=9, font_weight=700,
                     fill="#fff")]
    if slot.get("moved_from"):  # a bar on the left edge: the failure is the same, its place in SGLang moved
        marks.append(el("rect", x=x, y=y + 3, width=4, height=h - 6, rx=1, fill=MOVED))
    where = f" at {slot['location']}" if slot.get("location") else ""
    moved = f" (moved here from {slot['moved_from']})" if slot.get("moved_from") else ""
    text = (f"{what}: {slot['count']} of {evaluated} configurations ({slot['share']:.1%}){notes.get(slot['change'] or '', '')}"
            f"{'; ' + slot['verdict'] if slot.get('verdict') not in (None, night.NEW) else ''}{where}{moved}")
    return tip(text, *marks, class_="cell regression" if slot.get("verdict") == night.NEW else "cell")


def _heat_legend(top: float) -> str:
    stops = "".join(el("stop", offset=f"{t:.2f}", stop_color=ramp(t)) for t in (0.0, 0.25, 0.5, 0.75, 1.0))
    items: list[tuple[dict[str, Any], str]] = [({"fill": "#fff", "stroke": NEW, "stroke_width": 3}, "new (regression)"),
             ({"fill": "#edf7ed", "stroke": FIXED, "stroke_width": 2, "stroke_dasharray": "4 2"}, "fixed"),
             ({"fill": "#fff", "stroke": CHANGED, "stroke_width": 2, "stroke_dasharray": "4 2"}, "message / location changed"),
             ({"fill": MOVED, "width": 4}, "moved to another file/function"),
             ({"fill": "#f5f5f5"}, "not seen"), ({"fill": "url(#hatch-legend)"}, "cell skipped or failed")]
    out = [el("defs", el("linearGradient", stops, id="heat") + HATCH.format(id="hatch-legend")),
           el("text", "share failing", x=0, y=14, font_size=12, fill="#333"),
           el("rect", x=0, y=20, width=180, height=12, fill="url(#heat)", rx=2),
           el("text", "0%", x=0, y=43, font_size=10, fill="#555"),
           el("text", f"{top:.0%}", x=180, y=43, font_size=10, fill="#555", text_anchor="end")]
    x = 220.0
    for style, label in items:
        shape = {"width": 26, **style}
        out.append(tip(label, el("rect", x=x, y=14, height=18, rx=3, **shape),
                       el("text", esc(label), x=x + shape["width"] + 6, y=27, font_size=12)))
        x += shape["width"] + 20 + _text_width(label, 12)
    return svg(max(1000, int(x)), 44, "Legend: colour = share of the cell's configurations failing this way", "".join(out),
               "legend")


def _cells_table(model: dict[str, Any]) -> str:
    rows = []
    for cell in model["cells"]:
        passed = cell["counts"].get("passed", 0)
        rows.append([code(cell["id"], "nw"), esc(cell["status"]), str(cell["evaluated"]), str(passed),
                     str(cell["evaluated"] - passed), str(len({s["cross_release_key"] for s in cell["signatures"]})),
                     esc(cell["reason"] or "")])
    return el("h2", "Cells") + table(["cell", "status", "evaluated", "passed", "failed", "failures", "note"], rows,
                                     numeric=(2, 3, 4, 5))


# -- sweep ------------------------------------------------------------------------------------------------


def _colours(cell: dict[str, Any]) -> dict[str, str]:
    """A colour per signature: the first ones (speculative first, then most frequent: the model's order)
    their own, the rest grey."""
    return {sig["id"]: PALETTE[number] if number < len(PALETTE) else OTHER_COLOUR
            for number, sig in enumerate(cell["signatures"])}


def _others(cell: dict[str, Any]) -> list[dict[str, Any]]:
    others: list[dict[str, Any]] = cell["signatures"][len(PALETTE):]
    return others


#: the fewest configurations with the draft's algorithm that get flag-pair maps of their own
OWN_MAPS_AT_LEAST = 20


def _sweep_pictures(model: dict[str, Any], data: SweepInput) -> str:
    """The signature tables, the outcome bar and the flag-pair maps. With a draft whose algorithm enough rows
    ran, the maps are of those rows: what a choice does to the user's own configuration, not to every
    algorithm's (the others' failures would fill the maps)."""
    import dataclasses

    from bisect_spec.report.summary import users_algorithms

    cell = model["cells"][0]
    colours = _colours(cell)
    users = users_algorithms(data.summary.get("target") or {})
    own = [r for r in data.results if users and set(_config(r).get("--speculative-algorithm") or ()) & users]
    heading = "Flag pairs"
    if len(own) >= OWN_MAPS_AT_LEAST:
        data = dataclasses.replace(data, results=own)
        heading = (f"Flag pairs, with your draft's algorithm ({'/'.join(sorted(users))}): what each choice does to "
                   f"your configuration ({len(own)} configurations)")
    return "\n".join([_signature_tables(cell, colours), el("h2", "Outcomes"), _outcome_bar(cell, colours),
                      _stages(cell), el("h2", heading), _pair_maps(data, cell, colours)])


#: A knob map cell's colour class by verdict level (its words: ``summary.KNOB_MARKS``)
_KNOB_CLASSES = {"will_start": "good", "passed_up_to": "partial", "will_not_start": "bad", "failed": "bad"}


def _starts(summary: dict[str, Any]) -> str:
    """"Starts on your box": the command to launch, what SGLang resolves it to, and the draft's knobs by verdict at
    the deployment shape (the same answer as the terminal's first lines)."""
    from bisect_spec.report.summary import KNOB_LEGEND, KNOB_MARKS, knob_grid

    starts = summary.get("starts")
    if not starts:
        return ""
    family = "/".join(starts.get("algorithms") or [])
    target = summary.get("target") or {}
    parts = [el("h2", f"Starts on your box ({esc(family)}, {esc(target.get('hardware'))})")]
    if not starts.get("argv"):
        parts.append(el("p", f"No configuration of {esc(family)} passed: see the failures below.", class_="note"))
        return el("section", "".join(parts), id="starts")
    said = ("every check a CPU can run, ran" if starts["verdict"] == "PASSED" else
            "passed up to " + esc(starts["reached"]) + ": "
            + esc("; ".join(f"{k}: {v}" for k, v in (starts.get("stopped") or {}).items())))
    parts += [el("p", f"{esc(starts['verdict'])}: {said} ({starts['full_passes']} of {starts['passes']} passing "
                      f"{esc(family)} configurations ran every check)"),
              el("pre", el("code", esc(starts.get("command") or " ".join(starts["argv"]))))]
    resolved = starts.get("resolved") or {}
    if resolved:
        parts.append(table(["resolved", "value"], [[code(k), esc(v)] for k, v in resolved.items()]))
    cells = starts.get("knobs") or []
    if cells:
        tokens, rows = knob_grid(cells)
        head = el("tr", el("th", "steps, topk \\ draft tokens") + "".join(el("th", esc(t or "-")) for t in tokens))
        body = []
        for (steps, topk), marks in rows.items():
            tds = []
            for t in tokens:
                level = marks.get(t, "")
                tds.append(el("td", KNOB_MARKS.get(level, ""), class_=f"knob {_KNOB_CLASSES.get(level, '')}".strip()))
            body.append(el("tr", el("th", f"{esc(steps or '-')}, {esc(topk or '-')}") + "".join(tds)))
        parts += [el("h3", "The draft's knobs at this shape"),
                  el("table", el("thead", head) + el("tbody", "".join(body)), class_="knobs"),
                  el("p", esc(KNOB_LEGEND), class_="note")]
    return el("section", "".join(parts), id="starts")


def _stages(cell: dict[str, Any]) -> str:
    """How far configurations got along launch_server's path, a row per stage (none for a run that predates it)."""
    rows = stage_rows(cell.get("stages"))
    if not rows:
        return ""
    return el("h2", "How far configurations got") + table(
        STAGE_HEADERS, [(code(name), "yes" if after else "", esc(passed), esc(stopped), esc(failed))
                        for name, after, passed, stopped, failed in rows], numeric=(2, 3, 4))


def _outcome_bar(cell: dict[str, Any], colours: dict[str, str]) -> str:
    total = cell["evaluated"] or 1
    width = 1000.0
    segments = [("passed", cell["counts"].get("passed", 0), PASSED_FILL)]
    segments += [(f"{sig['title']} [{sig['id']}]", sig["count"], colours[sig["id"]])
                 for sig in cell["signatures"][:len(PALETTE)]]
    others = _others(cell)
    if others:
        segments.append((f"{len(others)} other signatures", sum(s["count"] for s in others), OTHER_COLOUR))
    other = cell["evaluated"] - sum(n for _, n, _ in segments)
    if other > 0:
        segments.append(("other outcomes (no signature)", other, "#bbb"))
    out = []
    x = 0.0
    for label, count, colour in segments:
        w = width * count / total
        if w <= 0:
            continue
        marks = [el("rect", x=x, y=4, width=w, height=26, fill=colour, stroke="#fff")]
        if w > 40:
            short = label.split(" [")[0]
            text = f"{short} · {count}" if _text_width(f"{short} · {count}", 12) < w - 8 else str(count)
            ink = "#222" if colour in LIGHT_PALETTE or colour in (PASSED_FILL, "#bbb") else "#fff"
            marks.append(el("text", esc(text), x=x + w / 2, y=22, text_anchor="middle", font_size=12, fill=ink))
        out.append(tip(f"{label}: {count} of {cell['evaluated']} ({count / total:.0%})", *marks))
        x += w
    return svg(width, 36, f"{cell['evaluated']} configurations by outcome", "".join(out), "outcomes")


def _signature_tables(cell: dict[str, Any], colours: dict[str, str]) -> str:
    """The answer first, as in the terminal: the failures a user of the draft can hit (or, without a draft,
    speculative decoding's failures), then the rest; a filter bar above them."""
    signatures = cell["signatures"]
    if any(s.get("yours") for s in signatures):
        first = [s for s in signatures if s.get("yours")]
        heading = f"Your draft ({cell.get('draft')}): {_failures(len(first))}, fewest flags first"
        rest_heading = "Everything else"
    else:
        first = [s for s in signatures if s.get("speculative")]
        heading = f"Speculative decoding: {_failures(len(first))}"
        rest_heading = "Other constraints met on the way"
    ids = {s["id"] for s in first}
    other = [s for s in signatures if s["id"] not in ids]
    none = "No failure signatures: every configuration resolved." if not other else "No failure of this kind."
    return "\n".join([_filters(signatures), el("h2", heading), _signature_table(first, colours, none),
                      el("h2", f"{rest_heading}: {_failures(len(other))}"),
                      _signature_table(other, colours, "") if other else ""])


def _filters(signatures: list[dict[str, Any]]) -> str:
    """Search and filters over every signature row (a few lines of script; the page works without it)."""
    if not signatures:
        return ""

    def choice(name: str, label: str, values: Sequence[str]) -> str:
        options = el("option", "any", value="") + "".join(el("option", esc(v), value=v) for v in values)
        return el("label", f"{label} " + el("select", options, name=name))

    algorithms = sorted({a for s in signatures for a in s.get("algorithms") or []})
    exceptions = sorted({str(s.get("exc_type") or s.get("kind")) for s in signatures})
    flags = sorted({t for s in signatures for t in (s.get("minimal") or s.get("smallest") or []) if t.startswith("--")})
    controls = (el("label", "search " + '<input type="search" name="q" placeholder="message, statement, location">')
                + choice("algorithm", "algorithm", algorithms) + choice("exception", "exception", exceptions)
                + choice("flag", "reproducer sets", flags) + el("span", "", id="shown", class_="count"))
    return el("form", controls, id="filters", class_="filters", onsubmit="return false")


def _failures(count: int) -> str:
    return f"{count} failure{'' if count == 1 else 's'}"


def _signature_table(signatures: list[dict[str, Any]], colours: dict[str, str], empty: str) -> str:
    if not signatures:
        return el("p", esc(empty))
    head = el("tr", "".join(el("th", h, style=f"width:{w}") for h, w in (
        ("signature", "9%"), ("type", "9%"), ("location", "14%"), ("count", "5%"), ("minimal (shrunk) / smallest seen", "24%"),
        ("message (SGLang's own words)", "29%"), ("files", "10%"))))
    body = []
    for sig in signatures:
        swatch = el("span", "", class_="swatch", style=f"background:{colours[sig['id']]}")
        reproducer = (argv_html(sig["minimal"]) if sig["minimal"] is not None
                      else el("span", "seen: ", class_="note") + _folded_argv(sig["smallest"]))
        folder = sig.get("reproducers")
        links = el("span", "".join(el("a", name, href=f"{folder}/{name}") for name in
                                   ("launch.sh", "repro.py", "bug_report.md")), class_="links") if folder else "–"
        argv = sig["minimal"] if sig["minimal"] is not None else sig["smallest"]
        text = " ".join(str(x or "") for x in (sig["id"], sig.get("exc_type"), sig.get("location"), sig.get("message"),
                                              sig.get("statement"))).lower()
        cells = [el("span", swatch + code(sig["id"]), class_="nw"), esc(sig["exc_type"] or sig["kind"]),
                 location_html(sig["location"]), str(sig["count"]), reproducer,
                 esc(sig["message"] or sig["statement"]), links]
        row = "".join(el("td", cell, class_="num" if i == 3 else "msg" if i == 5 else None) for i, cell in enumerate(cells))
        body.append(el("tr", row, **{"data-sig": sig["id"], "data-text": text,
                                     "data-algorithms": " ".join(sig.get("algorithms") or []),
                                     "data-exception": str(sig.get("exc_type") or sig.get("kind")),
                                     "data-flags": " ".join(t for t in argv if t.startswith("--"))}))
    return el("table", head + "".join(body), class_="signatures")


def _folded_argv(argv: Sequence[str]) -> str:
    """A reproducer; a long one folded behind a summary (a native ``<details>``: no script)."""
    if len(argv) <= LONG_ARGV:
        return argv_html(argv)
    flags = sum(1 for token in argv if token.startswith("--"))
    return el("details", el("summary", f"{flags} flags") + argv_html(argv))


def flag_label(flag: str) -> str:
    """``--speculative-num-draft-tokens`` → ``num-draft-tokens`` (the full name is in the tooltip)."""
    return flag.removeprefix("--speculative-") if flag.startswith("--speculative-") else flag.removeprefix("--")


def value_label(value: Sequence[str] | None) -> str:
    if value is None:
        return "unset"
    return " ".join(value) if value else "on"


def flag_domains(data: SweepInput) -> dict[str, list[str]]:
    """Each swept flag's values as labels, in the space's order (values only seen in results appended)."""
    space = (data.meta.get("space") or {}).get("flags") or {}
    domains: dict[str, list[str]] = {flag: [value_label(v) for v in values] for flag, values in space.items()}
    for record in data.results:
        config = _config(record)
        for flag in list(domains):
            label = value_label(config.get(flag))
            if label not in domains[flag]:
                domains[flag].append(label)
    return domains


def _config(record: dict[str, Any]) -> Config:
    try:
        return Config.from_argv(record.get("config") or [])
    except UsageError:
        return Config()


def omega_squared(groups: Sequence[tuple[int, int]], total: int, failed: int) -> float:
    """How much of the variance of "fails" the grouping explains, corrected for the number of groups (ω²).

    ``groups`` are ``(configurations, failing)`` per group. Uncorrected (η²), a grid with more
    cells always explains more, if only by chance: a flag with 27 values would win every ranking.
    """
    k = len(groups)
    if total <= k or failed in (0, total):
        return 0.0
    mean = failed / total
    ss_total = total * mean * (1 - mean)
    ss_between = sum(n * (f / n - mean) ** 2 for n, f in groups)
    ms_within = (ss_total - ss_between) / (total - k)
    return (ss_between - (k - 1) * ms_within) / (ss_total + ms_within)


def _fold(column: list[str], failing: list[bool], order: list[str]) -> list[str]:
    """Keep a flag's :data:`MAX_VALUES` - 1 values that fail most often; the rest become ``other``."""
    if len(set(column)) <= MAX_VALUES:
        return column
    seen: Counter[str] = Counter(column)
    fails: Counter[str] = Counter(v for v, bad in zip(column, failing, strict=True) if bad)
    kept = set(sorted(seen, key=lambda v: (-fails[v], -seen[v], order.index(v) if v in order else len(order)))[:MAX_VALUES - 1])
    return [v if v in kept else OTHER for v in column]


def _groups(failing: list[bool], *columns: list[str]) -> list[tuple[int, int]]:
    counts: dict[tuple[str, ...], list[int]] = {}
    for bad, *key in zip(failing, *columns, strict=True):
        slot = counts.setdefault(tuple(key), [0, 0])
        slot[0] += 1
        slot[1] += bad
    return [(n, f) for n, f in counts.values()]


def pair_grids(data: SweepInput) -> list[dict[str, Any]]:
    """For pairs of flags (each with two or more values seen): value × value counts of outcomes.

    Each grid is ``{"flags": (a, b), "values": (values_a, values_b), "cells": {(va, vb): {"total",
    "failed", "signatures": Counter}}, "why": signature id or None, "of": pairs considered}``.
    When every pair fits (:data:`MAX_PAIRS`), all are shown in the space's order. Otherwise the
    pictures follow the failures: for each signature, most frequent first, the pair of flags of
    its (shrunk) reproducer, or its one flag and the partner that best tells where it fails
    (ω² of "fails with this signature"); ``why`` names the signature. Free places go to the
    pairs whose two values together explain failing best beyond either flag alone (ω²(a × b) −
    max(ω²(a), ω²(b))). A flag with more than :data:`MAX_VALUES` values shows those that fail
    most, the rest as ``other``.
    """
    domains = flag_domains(data)
    configs = [_config(r) for r in data.results]
    failing = [r.get("status") != "passed" for r in data.results]
    signature = [(r.get("signature") or {}).get("id") or str(r.get("status")) for r in data.results]
    columns = {flag: _fold([value_label(c.get(flag)) for c in configs], failing, order) for flag, order in domains.items()}
    flags = [flag for flag in domains if len(set(columns[flag])) >= 2]
    pairs = list(itertools.combinations(flags, 2))
    chosen: dict[tuple[str, str], str | None] = dict.fromkeys(pairs)
    if len(pairs) > MAX_PAIRS:
        chosen = _chosen_pairs(data, flags, columns, failing, signature)
    grids: list[dict[str, Any]] = []
    for (a, b), why in chosen.items():
        cells: dict[tuple[str, str], dict[str, Any]] = {}
        for va, vb, bad, sig in zip(columns[a], columns[b], failing, signature, strict=True):
            slot = cells.setdefault((va, vb), {"total": 0, "failed": 0, "signatures": Counter()})
            slot["total"] += 1
            if bad:
                slot["failed"] += 1
                slot["signatures"][sig] += 1
        values = tuple([v for v in [*domains[flag], OTHER] if v in set(columns[flag])] for flag in (a, b))
        grids.append({"flags": (a, b), "values": values, "cells": cells, "why": why, "of": len(pairs)})
    return grids


def _chosen_pairs(data: SweepInput, flags: list[str], columns: dict[str, list[str]], failing: list[bool],
                  signature: list[str]) -> dict[tuple[str, str], str | None]:
    """At most :data:`MAX_PAIRS` pairs: one per signature first, then the strongest interactions."""
    index = {flag: number for number, flag in enumerate(flags)}

    def pair(a: str, b: str) -> tuple[str, str]:
        return (a, b) if index[a] < index[b] else (b, a)

    def omega(outcome: list[bool], *cols: list[str]) -> float:
        return omega_squared(_groups(outcome, *cols), len(outcome), sum(outcome))

    chosen: dict[tuple[str, str], str | None] = {}
    for sig in answer_first(list(data.summary.get("signatures") or []), data.summary.get("target") or {}):
        if len(chosen) >= MAX_PAIRS:
            break
        argv = (sig.get("shrink") or {}).get("minimal_argv") or sig.get("smallest") or []
        own = [flag for flag in dict.fromkeys(t for t in argv if t.startswith("--")) if flag in index]
        fails_so = [s == sig.get("id") for s in signature]
        if not own or not any(fails_so):
            continue
        if len(own) >= 2:
            best = max(itertools.combinations(own, 2), key=lambda ab: omega(fails_so, columns[ab[0]], columns[ab[1]]))
        else:
            partner = max((f for f in flags if f != own[0]), key=lambda f: omega(fails_so, columns[own[0]], columns[f]))
            best = (own[0], partner)
        chosen.setdefault(pair(*best), str(sig.get("id")))
    if len(chosen) < MAX_PAIRS:
        alone = {flag: omega(failing, columns[flag]) for flag in flags}
        gain = {(a, b): omega(failing, columns[a], columns[b]) - max(alone[a], alone[b])
                for a, b in itertools.combinations(flags, 2) if (a, b) not in chosen}
        for extra in sorted(gain, key=lambda ab: -gain[ab])[:MAX_PAIRS - len(chosen)]:
            chosen[extra] = None
    return chosen


def _pair_maps(data: SweepInput, cell: dict[str, Any], colours: dict[str, str]) -> str:
    if not data.results:
        return el("p", "No results.jsonl in this run: no flag-pair maps.", class_="note")
    grids = pair_grids(data)
    if not grids:
        return el("p", "Fewer than two flags vary in this run: no flag-pair maps.", class_="note")
    shown = ""
    if len(grids) < grids[0]["of"]:
        shown = (f"Showing {len(grids)} of the {grids[0]['of']} pairs: for each failure signature (most frequent "
                 "first) the flags of its reproducer, then the pairs whose two values together explain failing best "
                 "beyond either flag alone. ")
    titles = {sig["id"]: sig["title"] for sig in cell["signatures"]}
    legend = [el("span", el("span", "", class_="swatch", style=f"background:{colours[s['id']]}") + esc(s["title"]) + " "
                 + code(s["id"])) for s in cell["signatures"][:len(PALETTE)]]
    if _others(cell):
        legend.append(el("span", el("span", "", class_="swatch", style=f"background:{OTHER_COLOUR}")
                         + f"{len(_others(cell))} other signatures"))
    legend.append(el("span", el("span", "", class_="swatch", style=f"background:{PASSED_FILL}") + "all pass"))
    intro = (shown + "For each pair of flags: rows are the first flag's values, columns the second's. A cell's colour is the "
             "signature most of its failing configurations share; the stronger, the larger the share failing (the number, "
             "in %). Pale green: all pass; white: combination not evaluated. Hover for counts.")
    return (el("p", intro, class_="note") + el("p", " &nbsp; ".join(legend))
            + el("div", "".join(_pair_map(grid, colours, titles) for grid in grids), class_="grid"))


def _pair_map(grid: dict[str, Any], colours: dict[str, str], titles: dict[str, str]) -> str:
    a, b = grid["flags"]
    rows, cols = grid["values"]
    size = 26
    left, top = max(_text_width(v, 11) for v in rows) + 12, max(_text_width(v, 11) for v in cols) * 0.65 + 16
    overhang = max(left + j * size + size / 2 + _text_width(v, 11) * 0.77 for j, v in enumerate(cols))  # rotated labels
    out = []
    for j, value in enumerate(cols):
        x, y = left + j * size + size / 2, top - 6
        out.append(el("text", esc(value), x=x, y=y, font_size=11, transform=f"rotate(-40 {x:.1f} {y:.1f})", fill="#333"))
    for i, row_value in enumerate(rows):
        y = top + i * size
        out.append(el("text", esc(row_value), x=left - 6, y=y + size / 2 + 4, font_size=11, text_anchor="end", fill="#333"))
        for j, col_value in enumerate(cols):
            x = left + j * size
            out.append(_pair_cell(grid["cells"].get((row_value, col_value)), f"{a} {row_value}, {b} {col_value}",
                                  (x, y, size - 2), colours, titles))
    width, height = max(left + size * len(cols), overhang) + 6, top + size * len(rows) + 4
    picture = svg(width, height, f"{a} (rows) × {b} (columns): share of configurations failing", "".join(out), "pairmap")
    caption = f"{esc(flag_label(a))} × {esc(flag_label(b))}"
    why = grid.get("why")
    if why:
        swatch = el("span", "", class_="swatch", style=f"background:{colours.get(why, OTHER_COLOUR)}")
        caption += el("div", swatch + f"for {esc(titles.get(why, why))} {code(why)}", class_="why")
    return el("figure", el("figcaption", caption) + picture)


def _pair_cell(slot: dict[str, Any] | None, what: str, box: tuple[float, float, float], colours: dict[str, str],
               titles: dict[str, str]) -> str:
    x, y, side = box
    rect = {"x": x, "y": y, "width": side, "height": side, "rx": 2}
    if slot is None:
        return tip(f"{what}: not evaluated", el("rect", **rect, fill="#fff", stroke="#e0e0e0"))
    if not slot["failed"]:
        return tip(f"{what}: all {slot['total']} pass", el("rect", **rect, fill=PASSED_FILL))
    share = slot["failed"] / slot["total"]
    dominant, count = slot["signatures"].most_common(1)[0]
    return tip(f"{what}: {slot['failed']} of {slot['total']} fail ({share:.0%}); mostly "
               f"{titles.get(dominant, dominant)} [{dominant}] ({count})",
               el("rect", **rect, fill=colours.get(dominant, "#777"), fill_opacity=f"{0.18 + 0.82 * share:.2f}"),
               el("text", f"{share * 100:.0f}", x=x + side / 2, y=y + side / 2 + 3, font_size=9, text_anchor="middle",
                  fill="#fff" if share > 0.55 else "#222"))


def _findings(findings: list[dict[str, Any]]) -> str:
    if not findings:
        return ""
    rows = [[code(f.get("id")), esc(f.get("kind")), code(f.get("field")), esc(f.get("count")), argv_html(f.get("smallest")),
             esc(f.get("detail"))] for f in findings]
    return el("h2", "Findings in passing configurations") + table(["id", "finding", "field", "count", "smallest", "detail"],
                                                                  rows, numeric=(3,))

"""The report in each of its formats, by name: ``md``, ``json``, ``junit`` and ``html``.

A registry (picire's style): the CLI's ``--format`` choices and the API's dispatch read
:data:`FORMATS`. It sits above :mod:`bisect_spec.report.report_model` (the one model and the text
formats) and :mod:`bisect_spec.report.html_page` (the page drawn from that model).
"""

from __future__ import annotations

from collections.abc import Callable

from bisect_spec.report.html_page import page
from bisect_spec.report.report_model import ReportInput, report_model, to_json, to_junit, to_markdown


def to_html(data: ReportInput) -> str:
    """One self-contained HTML page with SVG pictures (see :mod:`bisect_spec.report.html_page`)."""
    return page(report_model(data), data)


FORMATS: dict[str, Callable[[ReportInput], str]] = {"md": to_markdown, "json": to_json, "junit": to_junit, "html": to_html}


def render(data: ReportInput, fmt: str) -> str:
    """The report in one of :data:`FORMATS` (``md``, ``json``, ``junit``, ``html``).

    :raises KeyError: unknown format (the API checks it first and raises a usage error).
    """
    return FORMATS[fmt](data)

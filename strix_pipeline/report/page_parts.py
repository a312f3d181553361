"""What both kinds of page write alike: "none" for an empty list, a link to a run's page (or its
name, when the warehouse no longer holds it), a time in the site's time zone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strix_pipeline.report.markup import esc, link, local_time
from strix_pipeline.report.names import run_page
from strix_pipeline.report.site_data import ReportData


def or_none(items: Iterable[Any], body: str) -> str:
    return body if list(items) else "<p>none</p>"


def run_link(data: ReportData, run_id: str | None, text: str | None = None) -> str:
    if not run_id:
        return "–"
    if data.run(run_id) is None:  # evidence of a run this warehouse no longer holds: named, not linked
        return esc(run_id)
    return link(run_page(run_id), text or run_id)


def when_text(data: ReportData, t: Any, fmt: str = "%Y-%m-%d %H:%M %Z") -> str:
    return esc(local_time(t, data.timezone, fmt))


def figure(data: ReportData, run_id: str, scenario: str, level: int | None = None) -> dict[str, Any] | None:
    """A run's aggregate of ``scenario`` (at ``level``; the last level when None), or None."""
    rows = [a for a in data.figures.get(run_id, []) if a["scenario"] == scenario]
    if level is not None:
        rows = [a for a in rows if a["level"] == level]
    return rows[-1] if rows else None

"""The forest plot as one of the report's charts: its points open their candidate run's page."""

from __future__ import annotations

from strix_pipeline.analysis.charts.forest import TITLE, ForestRow, forest_spec
from strix_pipeline.report.charts import ReportChart, linked


def forest_chart(rows: list[ForestRow]) -> ReportChart:
    note = (
        "Each row is a ratio with its interval; the grey line is 1.0 (equal), the black tick on a row "
        "its threshold. A point opens its candidate run's page."
    )
    if not rows:
        note = "no comparison measured this week"
    return ReportChart("forest", TITLE, note, linked(forest_spec(rows)))

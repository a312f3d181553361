"""Trend charts (Altair), each written three ways: Vega-Lite JSON, HTML (offline, JS inlined) and PNG.

Rules every chart keeps:
- versions are spaced evenly in version order (an ordinal axis sorted by the image's sort key), never
  by the date a run happened;
- a failed run is marked (a red dashed rule with its reason in the tooltip), never drawn as zero;
- a panel never mixes hosts, engines or model profiles: each (host, engine, model profile) is its own
  series;
- an empty or nearly empty warehouse still gives every file, with a note saying what is missing.

Re-exports only: ``data`` queries the views and groups rows, ``marks`` holds the pieces charts share,
``trends`` and ``matrix`` build the charts, ``page`` writes a chart's safe HTML, ``write`` writes every
chart and the index page, ``embed`` reads written charts back.
"""

from strix_pipeline.analysis.charts.data import (
    CHART_DECISIONS_SQL,
    CHART_MEMORY_SQL,
    CHART_SCENARIO_SQL,
    CHART_SUPPORT_SQL,
    CHART_TTFT_SQL,
    DEFAULT_CONCURRENCY,
    NO_VERSION,
    label_versions,
    support_matrix_rows,
)
from strix_pipeline.analysis.charts.embed import markdown_image, png_base64
from strix_pipeline.analysis.charts.marks import OUTCOME_COLORS, OUTCOME_MARKS, STATUS_COLORS
from strix_pipeline.analysis.charts.matrix import support_matrix_chart, support_matrix_markdown
from strix_pipeline.analysis.charts.page import chart_html
from strix_pipeline.analysis.charts.trends import (
    decision_timeline_chart,
    memory_chart,
    prefill_chart,
    throughput_chart,
    ttft_by_version_chart,
)
from strix_pipeline.analysis.charts.write import (
    CHART_TITLES,
    ChartFiles,
    ChartSet,
    chart_builders,
    chart_title,
    write_charts,
)

__all__ = [
    "CHART_DECISIONS_SQL",
    "CHART_MEMORY_SQL",
    "CHART_SCENARIO_SQL",
    "CHART_SUPPORT_SQL",
    "CHART_TITLES",
    "CHART_TTFT_SQL",
    "DEFAULT_CONCURRENCY",
    "NO_VERSION",
    "OUTCOME_COLORS",
    "OUTCOME_MARKS",
    "STATUS_COLORS",
    "ChartFiles",
    "ChartSet",
    "chart_builders",
    "chart_html",
    "chart_title",
    "decision_timeline_chart",
    "label_versions",
    "markdown_image",
    "memory_chart",
    "png_base64",
    "prefill_chart",
    "support_matrix_chart",
    "support_matrix_markdown",
    "support_matrix_rows",
    "throughput_chart",
    "ttft_by_version_chart",
    "write_charts",
]

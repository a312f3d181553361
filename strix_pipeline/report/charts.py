"""The report's trend charts: the charts package's own, each point linked to its run's page (Vega-Lite's
``href`` channel), drawn by one inlined copy of the Vega libraries (no CDN: the page opens offline)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strix_pipeline.analysis.charts import chart_builders, chart_title
from strix_pipeline.analysis.charts.marks import note_chart
from strix_pipeline.analysis.charts.page import json_for_html
from strix_pipeline.report.markup import esc
from strix_pipeline.report.names import run_page
from strix_pipeline.warehouse.unreadable import refuse_unreadable

if TYPE_CHECKING:
    from strix_pipeline.analysis.changepoints import Change
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)

# the trend charts, in the order the page shows them (the support matrix is the page's own table)
REPORT_CHARTS = (
    "ttft_p95_by_version",
    "switch_metric",
    "throughput_vs_concurrency",
    "throughput_per_user",
    "prefill_vs_input_length",
    "memory_held_by_version",
    "efficiency_by_version",
    "decision_timeline",
)
BOOT_JS = (
    "for (const s of document.querySelectorAll('script.strix-chart')) {"
    "vegaEmbed(document.getElementById(s.dataset.target), JSON.parse(s.textContent),"
    " {renderer: 'svg', actions: false}).catch(console.error);}"
)


@dataclass
class ReportChart:
    name: str
    title: str
    note: str
    spec: dict[str, Any]

    @property
    def element_id(self) -> str:
        return f"chart-{self.name}"

    def html(self) -> str:
        """The chart's box and its spec as a JSON block (parsed, never run: any string stays data)."""
        spec = json_for_html(json.dumps(self.spec))
        return (
            f"<div class='scroll'><div id='{self.element_id}' role='img' "
            f"aria-label='{esc(self.title)}'></div></div>"
            "<script type='application/json' class='strix-chart' "
            f"data-target='{self.element_id}'>{spec}</script>"
        )


def _has_runs(records: Any) -> bool:
    return isinstance(records, list) and any(isinstance(r, dict) and r.get("run_id") for r in records)


def _link_records(records: list[Any]) -> None:
    for r in records:
        if isinstance(r, dict) and isinstance(r.get("run_id"), str):
            r["href"] = run_page(r["run_id"])


# marks drawn once per record: a link there is one run's. A line joins records, and an aggregate
# merges them; an href there would split the line (or the mean) into one piece per run.
LINKED_MARKS = ("point", "circle", "square", "rect", "bar", "tick", "rule", "text")


def _one_mark_per_record(unit: dict[str, Any]) -> bool:
    mark = unit["mark"]["type"] if isinstance(unit["mark"], dict) else unit["mark"]
    encoding = unit.get("encoding") or {}
    aggregated = any(isinstance(e, dict) and e.get("aggregate") for e in encoding.values())
    return mark in LINKED_MARKS and not aggregated and "transform" not in unit


def linked(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with each record that names a run given that run's page, and every mark drawn once
    per such record opening it when clicked."""
    datasets = spec.get("datasets") or {}
    with_runs = {name for name, recs in datasets.items() if _has_runs(recs)}
    for name in with_runs:
        _link_records(datasets[name])

    def carries_runs(data: Any) -> bool | None:
        if not isinstance(data, dict):
            return None
        if "values" in data:
            if _has_runs(data["values"]):
                _link_records(data["values"])
                return True
            return False
        return data.get("name") in with_runs

    def walk(node: Any, runs: bool) -> None:
        if isinstance(node, list):
            for x in node:
                walk(x, runs)
            return
        if not isinstance(node, dict):
            return
        own = carries_runs(node.get("data"))
        runs = runs if own is None else own
        if "mark" in node and runs and _one_mark_per_record(node):
            node.setdefault("encoding", {})["href"] = {"field": "href", "type": "nominal"}
        for key in ("layer", "vconcat", "hconcat", "concat", "spec"):
            if key in node:
                walk(node[key], runs)

    walk(spec, False)
    return spec


def report_charts(
    wh: Warehouse, *, changes: list[Change], concurrency: int, roles: dict[str, str] | None = None
) -> list[ReportChart]:
    builders = chart_builders(wh, changes=changes, concurrency=concurrency, roles=roles)
    out = []
    for name in REPORT_CHARTS:
        title = chart_title(name, concurrency)
        try:
            chart, note = builders[name]()
        except Exception as e:  # noqa: BLE001 - one broken chart must not take the report with it
            refuse_unreadable(e)
            log.exception("chart %s failed", name)
            note = f"this chart could not be drawn: {type(e).__name__}: {e}"
            chart = note_chart(title, note)
        out.append(ReportChart(name, title, note, linked(chart.to_dict())))
    return out

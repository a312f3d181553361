"""Every chart written three ways (Vega-Lite JSON, HTML, PNG) into one folder, with its index page."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import altair as alt
import vl_convert as vlc

from strix_pipeline.analysis.changepoints import Change
from strix_pipeline.analysis.changes import stored_changes
from strix_pipeline.analysis.charts.data import DEFAULT_CONCURRENCY
from strix_pipeline.analysis.charts.frontier import throughput_per_user_chart
from strix_pipeline.analysis.charts.index_page import IndexChart, answer, index_html
from strix_pipeline.analysis.charts.limits import efficiency_by_version_chart, switch_metric_chart
from strix_pipeline.analysis.charts.marks import note_chart
from strix_pipeline.analysis.charts.matrix import support_matrix_chart
from strix_pipeline.analysis.charts.page import chart_html
from strix_pipeline.analysis.charts.trends import (
    decision_timeline_chart,
    memory_chart,
    prefill_chart,
    throughput_chart,
    ttft_by_version_chart,
)
from strix_pipeline.safe_write import Folder, UnsafeTarget, write_file
from strix_pipeline.warehouse.unreadable import refuse_unreadable

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)


@dataclass
class ChartFiles:
    name: str
    title: str
    html: Path
    png: Path
    json: Path
    note: str = ""  # what is missing, shown under the title
    spec: str = field(default="", repr=False)  # the Vega-Lite JSON written (the index draws it again)


@dataclass
class ChartSet:
    out_dir: Path
    charts: dict[str, ChartFiles] = field(default_factory=dict)
    index_html: Path | None = None


def _write(chart: alt.TopLevelMixin, out_dir: Path, name: str, title: str, note: str) -> ChartFiles:
    files = ChartFiles(
        name=name,
        title=title,
        html=out_dir / f"{name}.html",
        png=out_dir / f"{name}.png",
        json=out_dir / f"{name}.vl.json",
        note=note,
        spec=chart.to_json(indent=1),
    )
    spec = files.spec
    # no link followed where a chart file is expected (strix_pipeline.safe_write)
    with Folder.open(out_dir) as folder:
        folder.write_text(files.json.name, spec)
        folder.write_bytes(files.png.name, vlc.vegalite_to_png(spec, scale=2))
        folder.write_text(files.html.name, chart_html(spec, title))
    return files


def _index(cs: ChartSet, generated_at: datetime, top: tuple[str, dict]) -> Path:
    """index.html: the verdict and the forest plot on top, then every chart drawn interactively."""
    charts = [
        IndexChart(c.name, c.title, c.note, json.loads(c.spec), (c.html.name, c.png.name, c.json.name))
        for c in cs.charts.values()
    ]
    page = index_html(top[0], top[1], charts, generated_at)
    return write_file(cs.out_dir / "index.html", lambda f: f.write(page.encode()))


CHART_TITLES = {
    "ttft_p95_by_version": "TTFT p95 at 5 clients by image version",
    "throughput_vs_concurrency": "Output throughput vs concurrency, newest image per engine",
    "throughput_per_user": "Throughput against tokens/s per user, per engine and release",
    "prefill_vs_input_length": "Prefill tokens/s vs input length",
    "memory_held_by_version": "Memory held by engine and version",
    "decision_timeline": "Switch decision timeline",
    "support_matrix": "Support matrix: engine × image version × model profile",
    "switch_metric": "C3: TTFT p95 at 5 clients, baseline and candidate over time, with the verdicts",
    "efficiency_by_version": "Share of the memory-bandwidth limit by version (decode efficiency)",
}


def chart_title(name: str, concurrency: int = DEFAULT_CONCURRENCY) -> str:
    return CHART_TITLES[name].replace(" 5 clients", f" {concurrency} clients")


def chart_builders(
    wh: Warehouse,
    *,
    changes: list[Change],
    concurrency: int = DEFAULT_CONCURRENCY,
    roles: dict[str, str] | None = None,
) -> dict[str, Callable[[], tuple[alt.TopLevelMixin, str]]]:
    """Every chart by name (the keys of CHART_TITLES), each built when called: (chart, note). The one
    list of the charts, for the chart folder and the weekly report alike."""
    return {
        "ttft_p95_by_version": lambda: ttft_by_version_chart(wh, concurrency=concurrency, changes=changes),
        "throughput_vs_concurrency": lambda: throughput_chart(wh),
        "throughput_per_user": lambda: throughput_per_user_chart(wh),
        "prefill_vs_input_length": lambda: prefill_chart(wh),
        "memory_held_by_version": lambda: memory_chart(wh),
        "decision_timeline": lambda: decision_timeline_chart(wh),
        "support_matrix": lambda: support_matrix_chart(wh),
        "switch_metric": lambda: switch_metric_chart(wh, concurrency=concurrency, roles=roles),
        "efficiency_by_version": lambda: efficiency_by_version_chart(wh),
    }


def _broken(title: str, e: Exception) -> tuple[alt.TopLevelMixin, str]:
    note = f"this chart could not be drawn: {type(e).__name__}: {e}"
    return note_chart(title, note), note


def write_charts(
    wh: Warehouse,
    out_dir: Path,
    *,
    changes: list[Change] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    now: datetime | None = None,
    roles: dict[str, str] | None = None,
) -> ChartSet:
    """Write every chart (JSON, HTML, PNG) and index.html into `out_dir`; returns their paths.

    `changes` None: the change points stored in the warehouse are annotated; `roles` (engine ->
    baseline/candidate) names the engines of the switch chart. Every chart is built (its rows read)
    before the first file is written: a warehouse that cannot be read raises
    ``WarehouseUnreadable`` with the folder as it was, never half of it emptied."""
    out_dir = Path(out_dir)
    Folder.open(out_dir, create=True).close()  # made here; a link in its place is refused by name
    cs = ChartSet(out_dir=out_dir)
    if changes is None:
        try:
            changes = stored_changes(wh)
        except Exception as e:  # noqa: BLE001 - a chart without change markers beats no chart
            refuse_unreadable(e)
            log.warning("could not read stored changes: %s", e)
            changes = []
    built: dict[str, tuple[alt.TopLevelMixin, str]] = {}
    for name, build in chart_builders(wh, changes=changes, concurrency=concurrency, roles=roles).items():
        try:
            built[name] = build()
        except Exception as e:  # one broken chart must not take the others (or the run) with it
            refuse_unreadable(e)  # ... but an unreadable warehouse takes them all: nothing is written
            log.exception("chart %s failed", name)
            built[name] = _broken(chart_title(name, concurrency), e)
    top = answer(wh, roles, concurrency)  # read before the first file is written, as the charts are
    for name, (chart, note) in built.items():
        title = chart_title(name, concurrency)
        try:
            cs.charts[name] = _write(chart, out_dir, name, title, note)
        except UnsafeTarget:
            raise  # a link where a chart file goes: no chart is written there, the note neither
        except Exception as e:  # a chart that cannot be drawn says so in its place
            log.exception("chart %s failed", name)
            chart, note = _broken(title, e)
            cs.charts[name] = _write(chart, out_dir, name, title, note)
    cs.index_html = _index(cs, now or datetime.now(UTC), top)
    return cs

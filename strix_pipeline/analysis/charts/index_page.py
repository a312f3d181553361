"""The charts folder's index.html: the latest verdict in one sentence and the forest plot on top, then
every chart drawn interactively (one inlined copy of the Vega libraries; each spec a JSON data block,
never script text), each with its HTML, PNG and Vega-Lite files linked."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from strix_pipeline.analysis.charts.data import chart_rows
from strix_pipeline.analysis.charts.forest import criterion_rows, forest_spec
from strix_pipeline.analysis.charts.marks import is_note_chart
from strix_pipeline.analysis.charts.page import csp_hash, json_for_html, vega_bundle
from strix_pipeline.analysis.decision import (
    Wording,
    engine_name,
    no_evaluation_sentence,
    previous_decision,
    verdict_sentence,
)

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

LATEST_HOST_SQL = "SELECT host FROM decisions ORDER BY evaluated_at DESC LIMIT 1"
HELD_SQL = "SELECT run_id, held_bytes FROM v_run_base"
BOOT_JS = (
    "for (const s of document.querySelectorAll('script.strix-chart')) {"
    "vegaEmbed(document.getElementById(s.dataset.target), JSON.parse(s.textContent),"
    " {renderer: 'svg', actions: false}).catch(console.error);}"
)
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:80rem;margin:2em auto;padding:0 1rem}"
    ".note{color:#555}.answer{font-size:1.25rem;font-weight:600;border:3px solid #111;padding:.5rem 1rem}"
    ".chart{margin:1rem 0 2.5rem;overflow-x:auto}#chart-forest{display:block;width:100%}"
)


@dataclass(frozen=True)
class IndexChart:
    name: str
    title: str
    note: str
    spec: dict[str, Any]
    files: tuple[str, ...] = ()  # (html, png, json) file names beside the index


def answer(wh: Warehouse, roles: dict[str, str] | None, concurrency: int) -> tuple[str, dict[str, Any]]:
    """The latest evaluation's sentence and its forest plot's spec (no evaluation: says so)."""
    roles = roles or {}
    by_role = {role: engine for engine, role in roles.items()}
    w = Wording(
        candidate_engine=engine_name(by_role.get("candidate", "the candidate")),
        baseline_engine=engine_name(by_role.get("baseline", "the baseline")),
        concurrency=concurrency,
    )
    hosts = chart_rows(wh, LATEST_HOST_SQL)
    d = previous_decision(wh, hosts[0]["host"]) if hosts else None
    if d is None:
        return no_evaluation_sentence("the decision host", w), forest_spec([])
    held = {r["run_id"]: r["held_bytes"] for r in chart_rows(wh, HELD_SQL)}
    return verdict_sentence(d, w), forest_spec(criterion_rows(d, held, w))


def _chart(c: IndexChart) -> str:
    links = (f"<a href='{html.escape(f)}'>{html.escape(f.rsplit('.', 1)[-1])}</a>" for f in c.files)
    files = " · ".join(links)
    if is_note_chart(c.spec) and c.name != "forest":  # nothing to draw: its note, no empty panel
        return (
            f"<div class='chart'><h2 id='{html.escape(c.name)}'>{html.escape(c.title)}</h2>"
            f"<p class='note'>{html.escape(c.note or 'nothing to draw yet')}</p>"
            + (f"<p class='note'>{files}</p>" if files else "")
            + "</div>"
        )
    note = f"<p class='note'>{html.escape(c.note)}</p>" if c.note else ""
    return (
        f"<div class='chart'><h2 id='{html.escape(c.name)}'>{html.escape(c.title)}</h2>{note}"
        f"<div id='chart-{html.escape(c.name)}' role='img' aria-label='{html.escape(c.title)}'></div>"
        f"<script type='application/json' class='strix-chart' data-target='chart-{html.escape(c.name)}'>"
        f"{json_for_html(json.dumps(c.spec))}</script>"
        + (f"<p class='note'>{files}</p>" if files else "")
        + "</div>"
    )


def index_html(
    sentence: str, forest: dict[str, Any], charts: list[IndexChart], generated_at: datetime
) -> str:
    bundle = vega_bundle()
    csp = (
        f"default-src 'none'; script-src {csp_hash(bundle)} {csp_hash(BOOT_JS)} 'unsafe-eval'; "
        "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )
    top = IndexChart(
        "forest", "The week's comparisons: candidate / baseline, with 95 % intervals", "", forest
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            "<html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
            "<title>strix-pipeline trends</title>",
            f"<style>{STYLE}</style></head><body>",
            "<h1>strix-pipeline: trends and the switch decision</h1>",
            f"<p class='answer' id='verdict-sentence'>{html.escape(sentence)}</p>",
            _chart(top),
            f"<p class='note'>generated {generated_at:%Y-%m-%d %H:%M} UTC</p>",
            *(_chart(c) for c in charts),
            f"<script>{bundle}</script><script>{BOOT_JS}</script>",
            "</body></html>",
            "",
        ]
    )

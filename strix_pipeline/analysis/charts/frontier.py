"""Throughput against tokens/s per user: what a concurrency sweep trades. Each engine and release is
one curve through its sweep's levels (total output tokens/s up, each user's decode speed across), its
frontier -- the levels no other level of the curve beats on both -- marked with a filled point."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

from strix_pipeline.analysis.charts.data import by_panel, chart_rows, json_values, label_versions
from strix_pipeline.analysis.charts.marks import PANEL_WIDTH, note_chart, series_color, series_colors

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

TITLE = "Throughput against tokens/s per user, per engine and release (the concurrency sweep)"
CHART_FRONTIER_SQL = """
SELECT run_id, host, engine, model_profile, image_version, image_tag, image_digest, version_order,
       started_at, level, requests_ok, output_tokens_per_s, tpot_p50_ms
FROM v_run_aggregates
WHERE scenario = 'concurrency_sweep' AND usable AND output_tokens_per_s IS NOT NULL
ORDER BY run_id, level
"""


def per_user(r: dict[str, Any]) -> float | None:
    """One user's decode speed at this level: 1000 / TPOT p50, else the throughput shared by its clients."""
    if r.get("tpot_p50_ms"):
        return 1000.0 / r["tpot_p50_ms"]
    if r.get("output_tokens_per_s") is not None and r.get("level"):
        return r["output_tokens_per_s"] / r["level"]
    return None


def frontier(points: list[dict[str, Any]]) -> set[int]:
    """The levels of one curve no other level beats on both tokens/s per user and total tokens/s."""
    out = set()
    for p in points:
        beaten = any(
            q is not p
            and q["per_user_tok_s"] >= p["per_user_tok_s"]
            and q["output_tokens_per_s"] >= p["output_tokens_per_s"]
            and (q["per_user_tok_s"], q["output_tokens_per_s"])
            != (p["per_user_tok_s"], p["output_tokens_per_s"])
            for q in points
        )
        if not beaten:
            out.add(p["level"])
    return out


def frontier_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each engine and release's newest sweep (one run per curve), with its per-user speed and frontier."""
    out: list[dict[str, Any]] = []
    for _, panel in by_panel(rows).items():
        label_versions(panel)
        newest: dict[str, str] = {}
        for r in sorted(panel, key=lambda r: str(r["started_at"])):
            newest[r["version"]] = r["run_id"]
        for run_id in newest.values():
            points = [r | {"per_user_tok_s": per_user(r)} for r in panel if r["run_id"] == run_id]
            points = [p for p in points if p["per_user_tok_s"] is not None]
            best = frontier(points)
            for p in points:
                p["curve"] = f"{p['engine']} {p['version']} · {p['model_profile']} @ {p['host']}"
                p["on_frontier"] = p["level"] in best
                p["level_text"] = f"{p['level']}"
            out += points
    return out


def throughput_per_user_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    rows = frontier_rows(chart_rows(wh, CHART_FRONTIER_SQL))
    if not rows:
        note = "no concurrency sweep yet"
        return note_chart(TITLE, note), note
    data = alt.Data(values=json_values(rows))
    color = series_color(rows, "curve", series_colors(wh))
    x = alt.X("per_user_tok_s:Q", title="tokens/s per user (1000 / TPOT p50)", scale=alt.Scale(zero=True))
    y = alt.Y("output_tokens_per_s:Q", title="total output tokens/s", scale=alt.Scale(zero=True))
    tooltip = [
        "curve:N",
        alt.Tooltip("level:Q", title="clients"),
        alt.Tooltip("per_user_tok_s:Q", format=".1f"),
        alt.Tooltip("output_tokens_per_s:Q", format=".1f"),
        "requests_ok:Q",
        "on_frontier:N",
        "run_id:N",
    ]
    base = alt.Chart(data).encode(x=x, y=y, color=color)
    chart = alt.layer(
        base.mark_line(opacity=0.7).encode(order="level:Q", detail="curve:N"),
        base.mark_point(size=70, filled=False).encode(tooltip=tooltip),
        base.transform_filter("datum.on_frontier").mark_point(size=70, filled=True).encode(tooltip=tooltip),
        base.mark_text(dx=8, dy=-8, fontSize=10).encode(text="level_text:N"),
    ).properties(
        title=alt.TitleParams(
            TITLE, subtitle=["each point one level of clients (its number beside it); filled: the frontier"]
        ),
        width=PANEL_WIDTH,
        height=300,
    )
    return chart, ""

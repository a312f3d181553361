"""Altair pieces every chart shares: the palettes, a panel's size, the note chart that stands in for
a chart with nothing to draw, and the layers marking failed runs and change points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

from strix_pipeline.analysis.charts.data import json_values

if TYPE_CHECKING:
    from strix_pipeline.analysis.changepoints import Change

STATUS_COLORS = {"pass": "#2e7d32", "fail": "#c62828", "unknown": "#9e9e9e"}
# the support matrix's outcomes (v_support_matrix), best first
OUTCOME_COLORS = {"serves": "#2e7d32", "starts": "#f9a825", "fails": "#c62828", "not_run": "#9e9e9e"}
OUTCOME_MARKS = {"serves": "✅ serves", "starts": "⚠️ starts", "fails": "❌ fails", "not_run": "⏭️ not run"}
# one colour per engine across every chart (and the report's tables and forest plot words do not rely
# on it: each mark carries its engine's name too); an engine not listed falls back to grey
ENGINE_COLORS = {"llamacpp": "#1f77b4", "vllm": "#d62728", "sglang": "#2ca02c"}
OTHER_ENGINE = "#7f7f7f"
PANEL_WIDTH = 520
PANEL_HEIGHT = 220


def note_chart(title: str, note: str) -> alt.Chart:
    return (
        alt.Chart(alt.Data(values=[{"note": note}]), title=alt.TitleParams(title, subtitle=[note]))
        .mark_text(size=14, color="#555")
        .encode(text="note:N")
        .properties(width=PANEL_WIDTH, height=80)
    )


def is_note_chart(spec: dict[str, Any]) -> bool:
    """A spec of :func:`note_chart` (nothing to draw): pages say its note in a line, not an empty panel."""
    values = (spec.get("data") or {}).get("values") or []
    return "layer" not in spec and "vconcat" not in spec and len(values) == 1 and set(values[0]) == {"note"}


def titled(title: str, subtitle: list[str]) -> alt.TitleParams:
    return alt.TitleParams(title, subtitle=subtitle) if subtitle else alt.TitleParams(title)


def failure_layers(failed: list[dict[str, Any]], x: alt.X) -> list[alt.Chart]:
    if not failed:
        return []
    data = alt.Data(values=json_values(failed))
    tooltip = ["run_id:N", "version:N", "status:N", "failure_reason:N", "started_at:N"]
    rule = alt.Chart(data).mark_rule(color="#c62828", strokeDash=[4, 3]).encode(x=x, tooltip=tooltip)
    text = (
        alt.Chart(data)
        .mark_text(color="#c62828", dy=-4, baseline="bottom", fontSize=10)
        .encode(x=x, y=alt.value(12), text=alt.value("failed"), tooltip=tooltip)
    )
    return [rule, text]


def change_layers(marks: list[dict[str, Any]], x: alt.X) -> list[alt.Chart]:
    if not marks:
        return []
    data = alt.Data(values=marks)
    tooltip = [
        "change_id:N",
        "version_before:N",
        "version:N",
        "magnitude_pct:Q",
        "pvalue:Q",
        "status:N",
        "ack_status:N",
    ]
    rule = alt.Chart(data).mark_rule(color="#ef6c00", strokeWidth=2).encode(x=x, tooltip=tooltip)
    text = (
        alt.Chart(data)
        .mark_text(color="#ef6c00", align="left", dx=4, fontSize=10)
        .encode(x=x, y=alt.value(26), text="label:N", tooltip=tooltip)
    )
    return [rule, text]


def change_marks(
    changes: list[Change] | None, panel_rows: list[dict[str, Any]], metric: str, scenario: str, level: int
) -> list[dict[str, Any]]:
    """Changes on this panel's series, placed at the version label of their first run after the step."""
    if not changes:
        return []
    by_key = {
        (f"{r['fingerprint']}/{scenario}", r["version_order"]): r for r in panel_rows if "fingerprint" in r
    }
    out = []
    for c in changes:
        if c.metric != metric or c.scenario != scenario or c.level != level:
            continue
        r = by_key.get((c.fingerprint, c.sort_key_after))
        if r is None:
            continue
        ack = " ack" if c.ack_status == "acknowledged" else ""
        out.append(
            {
                "change_id": c.change_id,
                "version_before": c.version_before,
                "version": r["version"],
                "magnitude_pct": c.magnitude_pct,
                "pvalue": c.pvalue,
                "status": c.status,
                "ack_status": c.ack_status,
                "label": f"{c.magnitude_pct:+.1f}% {c.status}{ack}",
            }
        )
    return out


def palette(field: str, colors: dict[str, str]) -> alt.Color:
    """``field`` coloured by its fixed palette (value -> colour), titled by its name."""
    return alt.Color(
        f"{field}:N", scale=alt.Scale(domain=list(colors), range=list(colors.values())), title=field
    )


def engine_color(rows: list[dict[str, Any]], field: str = "engine", *, title: str | None = None) -> alt.Color:
    """``field`` (the engine, or a label of one: ``engine_label``, a series) coloured by each row's
    engine in :data:`ENGINE_COLORS`: the same engine the same colour in every chart."""
    domain: list[str] = []
    colors: list[str] = []
    for r in rows:
        value = r.get(field)
        if value is None or value in domain:
            continue
        domain.append(value)
        colors.append(ENGINE_COLORS.get(r.get("engine", ""), OTHER_ENGINE))
    return alt.Color(
        f"{field}:N",
        scale=alt.Scale(domain=domain, range=colors),
        title=title,
        legend=alt.Legend(orient="bottom", columns=1, labelLimit=0),
    )

"""Altair pieces every chart shares: the palettes (one colour per engine and model profile), a panel's
size, the note chart that stands in for a chart with nothing to draw, and the layers marking failed runs
and change points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

from strix_pipeline.analysis.charts.data import chart_rows, json_values

if TYPE_CHECKING:
    from strix_pipeline.analysis.changepoints import Change
    from strix_pipeline.warehouse import Warehouse

STATUS_COLORS = {"pass": "#2e7d32", "fail": "#c62828", "unknown": "#9e9e9e"}
# the support matrix's outcomes (v_support_matrix), best first
OUTCOME_COLORS = {"serves": "#2e7d32", "starts": "#f9a825", "fails": "#c62828", "not_run": "#9e9e9e"}
OUTCOME_MARKS = {"serves": "✅ serves", "starts": "⚠️ starts", "fails": "❌ fails", "not_run": "⏭️ not run"}
# One hue per engine and, within it, one shade per model profile, the same in every chart (the
# report's tables and the forest plot's words do not rely on it: each mark carries its engine's and
# profile's names too). An engine's profiles take its shades in name order, so an engine with one
# profile is drawn in its first shade, its colour; an engine not listed is drawn in greys.
ENGINE_SHADES = {
    "llamacpp": ("#1f77b4", "#6baed6", "#08306b", "#9ecae1"),
    "vllm": ("#d62728", "#fc9272", "#67000d", "#fcbba1"),
    "sglang": ("#2ca02c", "#a1d99b", "#00441b", "#74c476"),
}
OTHER_SHADES = ("#7f7f7f", "#bdbdbd", "#252525", "#969696")
ENGINE_COLORS = {engine: shades[0] for engine, shades in ENGINE_SHADES.items()}
OTHER_ENGINE = OTHER_SHADES[0]
PROFILES_SQL = "SELECT DISTINCT engine, model_profile FROM runs ORDER BY engine, model_profile"
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


class SeriesColors:
    """The colour of each (engine, model profile) of a warehouse: every chart built from it draws one
    profile of one engine in the same colour."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._colors: dict[tuple[str, str], str] = {}
        per_engine: dict[str, list[str]] = {}
        for engine, profile in sorted(set(pairs)):
            per_engine.setdefault(engine, []).append(profile)
        for engine, profiles in per_engine.items():
            shades = ENGINE_SHADES.get(engine, OTHER_SHADES)
            for i, profile in enumerate(profiles):
                self._colors[(engine, profile)] = shades[i % len(shades)]

    def of(self, engine: str, profile: str | None) -> str:
        """The colour of one engine's profile (a profile the warehouse does not hold: the engine's)."""
        return self._colors.get((engine, profile or ""), ENGINE_SHADES.get(engine, OTHER_SHADES)[0])


def series_colors(wh: Warehouse) -> SeriesColors:
    """The warehouse's (engine, model profile) colours: every chart reads them here, so they agree."""
    return SeriesColors([(r["engine"], r["model_profile"]) for r in chart_rows(wh, PROFILES_SQL)])


def series_color(
    rows: list[dict[str, Any]], field: str, colors: SeriesColors, *, title: str | None = None
) -> alt.Color:
    """``field`` (a label naming one engine's profile: a series, a curve) coloured by each row's
    engine and model profile in ``colors``: the same profile of the same engine the same colour in
    every chart."""
    domain: list[str] = []
    range_: list[str] = []
    for r in rows:
        value = r.get(field)
        if value is None or value in domain:
            continue
        domain.append(value)
        range_.append(colors.of(r.get("engine", ""), r.get("model_profile")))
    return alt.Color(
        f"{field}:N",
        scale=alt.Scale(domain=domain, range=range_),
        title=title,
        legend=alt.Legend(orient="bottom", columns=1, labelLimit=0),
    )

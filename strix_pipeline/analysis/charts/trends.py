"""The trend charts: TTFT p95 and memory held by image version, throughput and prefill of the newest
image of each engine, and the switch decision over time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import altair as alt

from strix_pipeline.analysis.charts.data import (
    CHART_DECISIONS_SQL,
    CHART_MEMORY_SQL,
    CHART_SCENARIO_SQL,
    CHART_TTFT_SQL,
    DEFAULT_CONCURRENCY,
    by_panel,
    chart_rows,
    failed_run,
    json_values,
    label_versions,
    newest_runs,
    panel_title,
)
from strix_pipeline.analysis.charts.marks import (
    PANEL_HEIGHT,
    PANEL_WIDTH,
    STATUS_COLORS,
    change_layers,
    change_marks,
    failure_layers,
    note_chart,
    palette,
    series_color,
    series_colors,
    titled,
)
from strix_pipeline.units import GIB

if TYPE_CHECKING:
    from strix_pipeline.analysis.changepoints import Change
    from strix_pipeline.warehouse import Warehouse


def ttft_by_version_chart(
    wh: Warehouse, *, concurrency: int = DEFAULT_CONCURRENCY, changes: list[Change] | None = None
) -> tuple[alt.TopLevelMixin, str]:
    title = f"TTFT p95 at {concurrency} clients by image version"
    rows = chart_rows(wh, CHART_TTFT_SQL, [concurrency])
    # a run that never ran the sweep but did not fail either (a smoke-only run) has nothing to say here
    rows = [r for r in rows if r["ttft_p95_ms"] is not None or failed_run(r, "ttft_p95_ms")]
    if not rows:
        note = f"no run has a {concurrency}-client sweep yet"
        return note_chart(title, note), note
    panels = []
    notes = []
    colors = series_colors(wh)
    for key, prow in by_panel(rows).items():
        color = colors.of(key[1], key[2])
        order = label_versions(prow)
        x = alt.X(
            "version:O", sort=order, scale=alt.Scale(domain=order), title="image version (version order)"
        )
        ok = [r for r in prow if not failed_run(r, "ttft_p95_ms")]
        failed = [r for r in prow if failed_run(r, "ttft_p95_ms")]
        subtitle = []
        if len(order) == 1:
            subtitle.append("one version so far: a trend needs more")
        if not ok:
            subtitle.append("no successful run yet")
        layers: list[alt.Chart] = []
        if ok:
            data = alt.Data(values=json_values(ok))
            y = alt.Y("ttft_p95_ms:Q", title="TTFT p95 (ms)", scale=alt.Scale(zero=False))
            tooltip = [
                "run_id:N",
                "version:N",
                "image_digest:N",
                "quantization:N",
                alt.Tooltip("ttft_p95_ms:Q", format=".1f"),
                alt.Tooltip("ttft_p95_ci_low_ms:Q", format=".1f"),
                alt.Tooltip("ttft_p95_ci_high_ms:Q", format=".1f"),
                "requests_failed:Q",
                "started_at:N",
            ]
            layers += [
                alt.Chart(data)
                .mark_rule(color=color)
                .encode(x=x, y="ttft_p95_ci_low_ms:Q", y2="ttft_p95_ci_high_ms:Q"),
                alt.Chart(data)
                .mark_line(color=color)
                .encode(x=x, y=alt.Y("mean(ttft_p95_ms):Q", title="TTFT p95 (ms)")),
                alt.Chart(data)
                .mark_point(filled=True, size=60, color=color)
                .encode(x=x, y=y, tooltip=tooltip),
            ]
        layers += failure_layers(failed, x)
        layers += change_layers(
            change_marks(changes, prow, "ttft_p95_ms", "concurrency_sweep", concurrency), x
        )
        panels.append(
            alt.layer(*layers).properties(
                title=titled(panel_title(key), subtitle), width=PANEL_WIDTH, height=PANEL_HEIGHT
            )
        )
        notes += [f"{panel_title(key)}: {s}" for s in subtitle]
    # one y scale for every panel: two engines' TTFTs are compared by height, never each zoomed alone
    chart = alt.vconcat(*panels, title=title).resolve_scale(x="independent", y="shared")
    return chart, "; ".join(notes)


@dataclass(frozen=True)
class _Line:
    """What the newest-image line chart of a scenario plots: its metric against the scenario's level."""

    metric: str
    y_title: str
    fmt: str  # of the metric in the tooltip
    x_title: str
    log2: bool = False  # levels that double (the ladder's input lengths) on a log-2 axis
    more_tooltip: tuple[str, ...] = ()


_LINES = {
    "concurrency_sweep": _Line(
        "output_tokens_per_s",
        "output tokens/s",
        ".1f",
        "concurrent clients",
        more_tooltip=("requests_failed:Q",),
    ),
    "prefill_ladder": _Line("prefill_tokens_per_s", "prefill tokens/s", ".0f", "input tokens", log2=True),
}


def _newest_line_chart(wh: Warehouse, title: str, scenario: str) -> tuple[alt.TopLevelMixin, str]:
    """The scenario's ``_LINES`` metric against its level, one line per newest image of each engine."""
    line = _LINES[scenario]
    title += " (newest image of each engine)"
    rows = [r for r in chart_rows(wh, CHART_SCENARIO_SQL, [scenario]) if r[line.metric] is not None]
    if not rows:
        note = f"no {scenario.replace('_', ' ')} yet"
        return note_chart(title, note), note
    newest = newest_runs(rows)
    data = alt.Data(values=json_values(newest))
    if line.log2:
        x = alt.X("level:Q", title=line.x_title, scale=alt.Scale(type="log", base=2))
    else:
        x = alt.X("level:Q", title=line.x_title, axis=alt.Axis(format="d", tickMinStep=1))
    value = alt.Tooltip(f"{line.metric}:Q", format=line.fmt)
    base = alt.Chart(data).encode(
        x=x,
        y=alt.Y(f"{line.metric}:Q", title=line.y_title),
        color=series_color(newest, "series", series_colors(wh)),
        tooltip=["series:N", "run_id:N", "level:Q", value, *line.more_tooltip],
    )
    chart = (base.mark_line() + base.mark_point(filled=True)).properties(
        title=title, width=PANEL_WIDTH, height=300
    )
    return chart, ""


def throughput_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    return _newest_line_chart(wh, "Output throughput vs concurrency", "concurrency_sweep")


def prefill_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    return _newest_line_chart(wh, "Prefill tokens/s vs input length", "prefill_ladder")


def memory_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    # On the Box this is VRAM + GTT above the idle baseline; on a host without a GPU, the engine's RSS.
    title = "Memory held after load (above the idle baseline) by engine and version"
    rows = [r for r in chart_rows(wh, CHART_MEMORY_SQL) if r["held_bytes"] is not None or not r["usable"]]
    if not rows:
        note = "no memory reading yet"
        return note_chart(title, note), note
    panels = []
    colors = series_colors(wh)
    for key, prow in by_panel(rows).items():
        order = label_versions(prow)
        for r in prow:
            r["held_gib"] = r["held_bytes"] / GIB if r["held_bytes"] is not None else None
        x = alt.X(
            "version:O", sort=order, scale=alt.Scale(domain=order), title="image version (version order)"
        )
        ok = [r for r in prow if r["held_gib"] is not None and r["usable"]]
        failed = [r for r in prow if not r["usable"]]
        layers: list[alt.Chart] = []
        if ok:
            layers.append(
                alt.Chart(alt.Data(values=json_values(ok)))
                .mark_bar(color=colors.of(key[1], key[2]), opacity=0.8)
                .encode(
                    x=x,
                    y=alt.Y("mean(held_gib):Q", title="held (GiB)"),
                    tooltip=[
                        "version:N",
                        "image_digest:N",
                        "quantization:N",
                        alt.Tooltip("mean(held_gib):Q", format=".2f"),
                    ],
                )
            )
        layers += failure_layers(failed, x)
        panels.append(alt.layer(*layers).properties(title=panel_title(key), width=PANEL_WIDTH, height=180))
    # one y scale from zero: 0.48 GiB and 6.41 GiB are drawn as the 13x they are, never as equal bars
    chart = alt.vconcat(*panels, title=title).resolve_scale(x="independent", y="shared")
    return chart, ""


def decision_timeline_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    title = "Switch decision over time (each criterion's status)"
    rows = chart_rows(wh, CHART_DECISIONS_SQL)
    if not rows:
        note = "no decision stored yet"
        return note_chart(title, note), note
    crit = [{**r, "row": f"{r['criterion']} {r['name']}"} for r in rows]
    verdicts = {r["evaluation_id"]: r for r in rows}.values()
    rows_order = ["verdict", *sorted({r["row"] for r in crit})]
    y = alt.Y("row:N", sort=rows_order, scale=alt.Scale(domain=rows_order), title=None)
    # A date format on the axis: with a single evaluation Vega picks a millisecond tick (".884").
    x = alt.X(
        "evaluated_at:T",
        title="evaluated at (UTC)",
        scale=alt.Scale(padding=40),
        axis=alt.Axis(format="%Y-%m-%d %H:%M", labelAngle=-30, tickCount=6),
    )
    squares = (
        alt.Chart(alt.Data(values=json_values(crit)))
        .mark_square(size=160)
        .encode(
            x=x,
            y=y,
            color=palette("status", STATUS_COLORS),
            tooltip=["evaluated_at:T", "host:N", "criterion:N", "status:N", "reason:N"],
        )
    )
    verdict_text = (
        alt.Chart(alt.Data(values=json_values({**v, "row": "verdict"} for v in verdicts)))
        .mark_text(fontWeight="bold", fontSize=10)
        .encode(x=x, y=y, text="verdict:N", tooltip=["evaluated_at:T", "host:N", "verdict:N"])
    )
    chart = alt.layer(squares, verdict_text).properties(title=title, width=PANEL_WIDTH, height=200)
    return chart, ""

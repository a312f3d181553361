"""Two pictures of the question the project exists for: how close each release comes to the hardware's
limit, and whether the candidate has overtaken the baseline on C3's metric.

- Share of the memory-bandwidth limit by version: each run's decode efficiency (runner/efficiency.py),
  one panel per engine and model profile on one shared scale; a run whose inputs gave no figure is
  named in the chart's note with why, and a panel with nothing to draw is left out.
- The switch metric over time: TTFT p95 at N clients of every engine on one axis (the run's date, since
  the baseline's and the candidate's versions are different series), with each point's confidence
  interval and version, and the verdict of each evaluation along the top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

from strix_pipeline.analysis.charts.data import (
    CHART_DECISIONS_SQL,
    CHART_TTFT_SQL,
    DEFAULT_CONCURRENCY,
    by_panel,
    chart_rows,
    json_values,
    label_versions,
    panel_title,
)
from strix_pipeline.analysis.charts.marks import (
    PANEL_HEIGHT,
    PANEL_WIDTH,
    failure_layers,
    note_chart,
    series_color,
    series_colors,
)

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse

CHART_EFFICIENCY_SQL = """
SELECT run_id, host, engine, model_profile, quantization, image_version, image_tag, image_digest,
       version_order, started_at, status, usable, failure_reason, decode_efficiency,
       efficiency_problem, decode_tok_s, bandwidth_bytes_per_s / 1e9 AS bandwidth_gb_s,
       model_weight_bytes, kv_bytes_per_token, decode_context_tokens
FROM v_run_base
"""


def efficiency_by_version_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    title = "Share of the memory-bandwidth limit reached by the single-client decode, by version"
    rows = [
        r
        for r in chart_rows(wh, CHART_EFFICIENCY_SQL)
        if r["decode_efficiency"] is not None or not r["usable"] or r["efficiency_problem"]
    ]
    if not any(r["decode_efficiency"] is not None or r["efficiency_problem"] for r in rows):
        note = "no run has a decode efficiency yet (local runs record one)"
        return note_chart(title, note), note
    panels, notes = [], []
    colors = series_colors(wh)
    for key, prow in by_panel(rows).items():
        order = label_versions(prow)
        x = alt.X("version:O", sort=order, scale=alt.Scale(domain=order), title="version (version order)")
        ok = [r for r in prow if r["decode_efficiency"] is not None]
        failed = [r for r in prow if not r["usable"]]
        missing = [r for r in prow if r["usable"] and r["decode_efficiency"] is None]
        if missing:
            why = sorted({r["efficiency_problem"] or "no reason recorded" for r in missing})
            notes.append(f"{panel_title(key)}: {len(missing)} run(s) without a figure ({'; '.join(why)})")
        if not ok and not failed:  # nothing to draw: the panel is left out, the note says why
            continue
        layers: list[alt.Chart] = []
        if ok:
            layers.append(
                alt.Chart(alt.Data(values=json_values(ok)))
                .mark_point(filled=True, size=70, color=colors.of(key[1], key[2]))
                .encode(
                    x=x,
                    y=alt.Y(
                        "decode_efficiency:Q", title="share of the limit", scale=alt.Scale(domain=[0, 1])
                    ),
                    tooltip=[
                        "run_id:N",
                        "version:N",
                        alt.Tooltip("decode_efficiency:Q", format=".3f"),
                        alt.Tooltip("decode_tok_s:Q", format=".1f", title="decode tok/s (1 client)"),
                        alt.Tooltip("bandwidth_gb_s:Q", format=".1f", title="copy bandwidth GB/s"),
                        "model_weight_bytes:Q",
                        "kv_bytes_per_token:Q",
                        alt.Tooltip("decode_context_tokens:Q", format=".0f"),
                    ],
                )
            )
        layers += failure_layers(failed, x)
        panels.append(alt.layer(*layers).properties(title=panel_title(key), width=PANEL_WIDTH, height=180))
    if not panels:
        note = "; ".join(notes) or "no run has a decode efficiency yet"
        return note_chart(title, note), note
    chart = alt.vconcat(*panels, title=title).resolve_scale(x="independent", y="shared")
    return chart, "; ".join(notes)


def _engine_label(engine: str, roles: dict[str, str]) -> str:
    return f"{engine} ({roles[engine]})" if engine in roles else engine


def switch_metric_chart(
    wh: Warehouse, *, concurrency: int = DEFAULT_CONCURRENCY, roles: dict[str, str] | None = None
) -> tuple[alt.TopLevelMixin, str]:
    """C3's metric for every engine on one time axis, with intervals, versions and the verdicts."""
    roles = roles or {}
    title = f"C3: TTFT p95 at {concurrency} clients, baseline and candidate over time"
    rows = [
        r
        for r in chart_rows(wh, CHART_TTFT_SQL, [concurrency])
        if r["usable"] and r["ttft_p95_ms"] is not None
    ]
    if not rows:
        note = f"no run has a {concurrency}-client sweep yet"
        return note_chart(title, note), note
    for host_rows in _by_host(rows).values():
        for panel in by_panel(host_rows).values():
            label_versions(panel)
    for r in rows:
        r["engine_label"] = _engine_label(r["engine"], roles)
        r["series_label"] = f"{r['engine_label']} · {r['model_profile']}"  # one colour per profile
    decisions = {r["evaluation_id"]: r for r in chart_rows(wh, CHART_DECISIONS_SQL)}.values()
    panels = []
    colors = series_colors(wh)
    for host, hrows in _by_host(rows).items():
        data = alt.Data(values=json_values(hrows))
        x = alt.X(
            "started_at:T",
            title="run started (UTC)",
            axis=alt.Axis(format="%Y-%m-%d %H:%M", labelAngle=-30, tickCount=6),
        )
        color = series_color(hrows, "series_label", colors)
        # linear: the two engines' gap is drawn as it is (a log axis shrinks a 2x lead to a step)
        y = alt.Y("ttft_p95_ms:Q", title="TTFT p95 (ms)", scale=alt.Scale(zero=True))
        layers = [
            alt.Chart(data)
            .mark_rule()
            .encode(x=x, y="ttft_p95_ci_low_ms:Q", y2="ttft_p95_ci_high_ms:Q", color=color),
            alt.Chart(data).mark_line(opacity=0.6).encode(x=x, y=y, color=color, detail="model_profile:N"),
            alt.Chart(data)
            .mark_point(filled=True, size=60)
            .encode(
                x=x,
                y=y,
                color=color,
                tooltip=[
                    "engine_label:N",
                    "version:N",
                    "model_profile:N",
                    alt.Tooltip("ttft_p95_ms:Q", format=".0f"),
                    alt.Tooltip("ttft_p95_ci_low_ms:Q", format=".0f"),
                    alt.Tooltip("ttft_p95_ci_high_ms:Q", format=".0f"),
                    "run_id:N",
                ],
            ),
            alt.Chart(data).mark_text(dy=-10, fontSize=9).encode(x=x, y=y, text="version:N", color=color),
        ]
        verdicts = [dict(d) for d in decisions if d["host"] == host]
        if verdicts:
            layers.append(
                alt.Chart(alt.Data(values=json_values(verdicts)))
                .mark_text(fontWeight="bold", fontSize=10, baseline="top")
                .encode(
                    x=alt.X("evaluated_at:T"),
                    y=alt.value(2),
                    text="verdict:N",
                    tooltip=["evaluated_at:T", "verdict:N"],
                )
            )
        panels.append(
            alt.layer(*layers).properties(title=f"@ {host}", width=PANEL_WIDTH, height=PANEL_HEIGHT + 60)
        )
    return alt.vconcat(*panels, title=title), ""


def _by_host(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["host"], []).append(r)
    return dict(sorted(out.items()))

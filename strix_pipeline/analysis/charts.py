"""Trend charts (Altair), each written three ways: Vega-Lite JSON, HTML (offline, JS inlined) and PNG.

Rules every chart keeps:
- versions are spaced evenly in version order (an ordinal axis sorted by the image's sort key), never
  by the date a run happened;
- a failed run is marked (a red dashed rule with its reason in the tooltip), never drawn as zero;
- a panel never mixes hosts, engines or model profiles: each (host, engine, model profile) is its own
  series;
- an empty or nearly empty warehouse still gives every file, with a note saying what is missing.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import logging
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
import vl_convert as vlc

if TYPE_CHECKING:
    from strix_pipeline.analysis.changepoints import Change
    from strix_pipeline.warehouse import Warehouse

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 5
GIB = 2**30
STATUS_COLORS = {"pass": "#2e7d32", "fail": "#c62828", "unknown": "#9e9e9e"}
# the support matrix's outcomes (v_support_matrix), best first
OUTCOME_COLORS = {"serves": "#2e7d32", "starts": "#f9a825", "fails": "#c62828", "not_run": "#9e9e9e"}
OUTCOME_MARKS = {"serves": "✅ serves", "starts": "⚠️ starts", "fails": "❌ fails", "not_run": "⏭️ not run"}
PANEL_WIDTH = 520
PANEL_HEIGHT = 220

# The read model's views (warehouse/sql/views.sql) define "usable", "version order" and "series":
# every run, with its concurrency-N aggregate when it has one (a failed run has none and must still show).
CHART_TTFT_SQL = """
SELECT r.run_id, r.host, r.engine, r.model_profile, r.quantization, r.fingerprint, r.image_version,
       r.image_tag, r.image_digest, r.version_order, r.started_at, r.status, r.usable,
       r.failure_reason, a.requests_ok, a.requests_failed, a.ttft_p95_ms, a.ttft_p95_ci_low_ms,
       a.ttft_p95_ci_high_ms
FROM v_run_base r
LEFT JOIN aggregates a ON a.run_id = r.run_id AND a.scenario = 'concurrency_sweep' AND a.level = ?
"""
CHART_SCENARIO_SQL = """
SELECT run_id, host, engine, model_profile, image_version, image_tag, image_digest,
       version_order, started_at, level, requests_ok, requests_failed,
       output_tokens_per_s, prefill_tokens_per_s, ttft_p95_ms
FROM v_run_aggregates
WHERE scenario = ? AND usable
"""
CHART_MEMORY_SQL = """
SELECT run_id, host, engine, model_profile, quantization, image_version, image_tag, image_digest,
       version_order, started_at, status, usable, failure_reason, held_bytes, peak_bytes
FROM v_run_base
"""
CHART_SUPPORT_SQL = """
SELECT host, engine, image_version, version_order, version_rank, model_profile, quantization, outcome,
       starts, serves, fails, status, reason, run_id, started_at, attempts, attempts_served, cell
FROM v_support_matrix
ORDER BY host, engine, version_rank, model_profile
"""
CHART_DECISIONS_SQL = """
SELECT evaluation_id, evaluated_at, host, verdict, criterion, name, status, reason
FROM v_decisions ORDER BY evaluated_at, criterion
"""


@dataclass
class ChartFiles:
    name: str
    title: str
    html: Path
    png: Path
    json: Path
    note: str = ""  # what is missing, shown under the title


@dataclass
class ChartSet:
    out_dir: Path
    charts: dict[str, ChartFiles] = field(default_factory=dict)
    index_html: Path | None = None

    def pngs(self) -> list[Path]:
        return [c.png for c in self.charts.values()]


# --------------------------------------------------------------------------------------------------
# Data helpers


def _rows(wh: Warehouse, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    try:
        return list(wh.query_df(sql, params).iter_rows(named=True))
    except Exception as e:  # a chart is never worth failing the pipeline over
        log.warning("chart query failed: %s", e)
        return []


def _plain(v: Any) -> Any:
    if isinstance(v, datetime | date):
        return v.isoformat()
    return v


def _values(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in r.items()} for r in rows]


def _order_key(r: dict[str, Any]) -> tuple[str, str]:
    return (r["version_order"], str(r["started_at"]))


def _panel_key(r: dict[str, Any]) -> tuple[str, str, str]:
    return (r["host"], r["engine"], r["model_profile"])


def _panel_title(key: tuple[str, str, str]) -> str:
    host, engine, profile = key
    return f"{engine} · {profile} @ {host}"


def label_versions(rows: list[dict[str, Any]]) -> list[str]:
    """Give each row a `version` label (digest added where one tag names several digests); return the
    labels in version order. Rows must be one panel's."""
    digests: dict[str, set[str]] = {}
    for r in rows:
        base = r.get("image_version") or r.get("image_tag") or (r.get("image_digest") or "?")[:19]
        r["version"] = base
        digests.setdefault(base, set()).add(r.get("image_digest") or "")
    for r in rows:
        if len(digests[r["version"]]) > 1 and r.get("image_digest"):
            r["version"] = f"{r['version']}@{r['image_digest'].removeprefix('sha256:')[:8]}"
    order: list[str] = []
    for r in sorted(rows, key=_order_key):
        if r["version"] not in order:
            order.append(r["version"])
    return order


def _group(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        panels.setdefault(_panel_key(r), []).append(r)
    return dict(sorted(panels.items()))


def _failed(r: dict[str, Any], metric: str) -> bool:
    if not r["usable"]:
        return True
    return r.get("requests_ok") is not None and r["requests_ok"] == 0 and r.get(metric) is None


def _note_chart(title: str, note: str) -> alt.Chart:
    return (
        alt.Chart(alt.Data(values=[{"note": note}]), title=alt.TitleParams(title, subtitle=[note]))
        .mark_text(size=14, color="#555")
        .encode(text="note:N")
        .properties(width=PANEL_WIDTH, height=80)
    )


def _titled(title: str, subtitle: list[str]) -> alt.TitleParams:
    return alt.TitleParams(title, subtitle=subtitle) if subtitle else alt.TitleParams(title)


def _failure_layers(failed: list[dict[str, Any]], x: alt.X) -> list[alt.Chart]:
    if not failed:
        return []
    data = alt.Data(values=_values(failed))
    tooltip = ["run_id:N", "version:N", "status:N", "failure_reason:N", "started_at:N"]
    rule = alt.Chart(data).mark_rule(color="#c62828", strokeDash=[4, 3]).encode(x=x, tooltip=tooltip)
    text = (
        alt.Chart(data)
        .mark_text(color="#c62828", dy=-4, baseline="bottom", fontSize=10)
        .encode(x=x, y=alt.value(12), text=alt.value("failed"), tooltip=tooltip)
    )
    return [rule, text]


def _change_layers(marks: list[dict[str, Any]], x: alt.X) -> list[alt.Chart]:
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


def _change_marks(
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


# --------------------------------------------------------------------------------------------------
# The charts


def ttft_by_version_chart(
    wh: Warehouse, *, concurrency: int = DEFAULT_CONCURRENCY, changes: list[Change] | None = None
) -> tuple[alt.TopLevelMixin, str]:
    title = f"TTFT p95 at {concurrency} clients by image version"
    rows = _rows(wh, CHART_TTFT_SQL, [concurrency])
    # a run that never ran the sweep but did not fail either (a smoke-only run) has nothing to say here
    rows = [r for r in rows if r["ttft_p95_ms"] is not None or _failed(r, "ttft_p95_ms")]
    if not rows:
        note = f"no run has a {concurrency}-client sweep yet"
        return _note_chart(title, note), note
    panels = []
    notes = []
    for key, prow in _group(rows).items():
        order = label_versions(prow)
        x = alt.X(
            "version:O", sort=order, scale=alt.Scale(domain=order), title="image version (version order)"
        )
        ok = [r for r in prow if not _failed(r, "ttft_p95_ms")]
        failed = [r for r in prow if _failed(r, "ttft_p95_ms")]
        subtitle = []
        if len(order) == 1:
            subtitle.append("one version so far: a trend needs more")
        if not ok:
            subtitle.append("no successful run yet")
        layers: list[alt.Chart] = []
        if ok:
            data = alt.Data(values=_values(ok))
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
                .mark_rule(color="#1565c0")
                .encode(x=x, y="ttft_p95_ci_low_ms:Q", y2="ttft_p95_ci_high_ms:Q"),
                alt.Chart(data)
                .mark_line(color="#1565c0")
                .encode(x=x, y=alt.Y("mean(ttft_p95_ms):Q", title="TTFT p95 (ms)")),
                alt.Chart(data)
                .mark_point(filled=True, size=60, color="#1565c0")
                .encode(x=x, y=y, tooltip=tooltip),
            ]
        layers += _failure_layers(failed, x)
        layers += _change_layers(
            _change_marks(changes, prow, "ttft_p95_ms", "concurrency_sweep", concurrency), x
        )
        panels.append(
            alt.layer(*layers).properties(
                title=_titled(_panel_title(key), subtitle), width=PANEL_WIDTH, height=PANEL_HEIGHT
            )
        )
        notes += [f"{_panel_title(key)}: {s}" for s in subtitle]
    chart = alt.vconcat(*panels, title=title).resolve_scale(x="independent", y="independent")
    return chart, "; ".join(notes)


def _palette(field: str, colors: dict[str, str]) -> alt.Color:
    """``field`` coloured by its fixed palette (value -> colour), titled by its name."""
    return alt.Color(
        f"{field}:N", scale=alt.Scale(domain=list(colors), range=list(colors.values())), title=field
    )


def _newest_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the newest image's latest run in each (host, engine, model profile)."""
    out: list[dict[str, Any]] = []
    for _, prow in _group(rows).items():
        newest = max(prow, key=_order_key)
        label_versions(prow)
        out += [r for r in prow if r["run_id"] == newest["run_id"]]
    for r in out:
        r["series"] = f"{r['engine']} {r['version']} · {r['model_profile']} @ {r['host']}"
    return out


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
    rows = [r for r in _rows(wh, CHART_SCENARIO_SQL, [scenario]) if r[line.metric] is not None]
    if not rows:
        note = f"no {scenario.replace('_', ' ')} yet"
        return _note_chart(title, note), note
    data = alt.Data(values=_values(_newest_runs(rows)))
    if line.log2:
        x = alt.X("level:Q", title=line.x_title, scale=alt.Scale(type="log", base=2))
    else:
        x = alt.X("level:Q", title=line.x_title, axis=alt.Axis(format="d", tickMinStep=1))
    value = alt.Tooltip(f"{line.metric}:Q", format=line.fmt)
    base = alt.Chart(data).encode(
        x=x,
        y=alt.Y(f"{line.metric}:Q", title=line.y_title),
        color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom", columns=1, labelLimit=0)),
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
    rows = [r for r in _rows(wh, CHART_MEMORY_SQL) if r["held_bytes"] is not None or not r["usable"]]
    if not rows:
        note = "no memory reading yet"
        return _note_chart(title, note), note
    panels = []
    for key, prow in _group(rows).items():
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
                alt.Chart(alt.Data(values=_values(ok)))
                .mark_bar(color="#6a1b9a", opacity=0.8)
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
        layers += _failure_layers(failed, x)
        panels.append(alt.layer(*layers).properties(title=_panel_title(key), width=PANEL_WIDTH, height=180))
    chart = alt.vconcat(*panels, title=title).resolve_scale(x="independent", y="independent")
    return chart, ""


def support_matrix_rows(wh: Warehouse) -> list[dict[str, Any]]:
    """v_support_matrix: one row per (host, engine, image version, model profile), newest version first."""
    return _rows(wh, CHART_SUPPORT_SQL)


NO_VERSION = "(no image version)"


def _matrix_version(r: dict[str, Any]) -> str:
    # an imported peer run has no image, so no version: a null in Vega-Lite's sort list is invalid
    return r["image_version"] if r["image_version"] is not None else NO_VERSION


def _short_reason(reason: str | None, limit: int = 100) -> str:
    text = " ".join((reason or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def support_matrix_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    """Engine × image version × model profile -> serves / starts / fails, one panel per (host, engine),
    newest version at the top; each cell names its outcome, its run and (unless the run was ok, when
    it is only a note) its reason, in full in the tooltip."""
    title = "Support matrix: does each image version start and serve each model profile?"
    rows = support_matrix_rows(wh)
    if not rows:
        note = "no run yet: nothing has been tried"
        return _note_chart(title, note), note
    panels = []
    for (host, engine), prow in _group_by_engine(rows).items():
        for r in prow:
            r["version"] = _matrix_version(r)
        versions = [r["version"] for r in sorted(prow, key=lambda r: r["version_rank"])]
        versions = list(dict.fromkeys(versions))
        profiles = sorted({r["model_profile"] for r in prow})
        for r in prow:
            r["label"] = f"{r['outcome'].replace('_', ' ')} · {r['run_id'][-12:]}"
            r["reason_short"] = _short_reason(r["reason"], 40) if r["status"] != "ok" else ""
        data = alt.Data(values=_values(prow))
        x = alt.X("model_profile:N", sort=profiles, title="model profile", axis=alt.Axis(labelAngle=0))
        y = alt.Y("version:O", sort=versions, title="image version (newest first)")
        tooltip = [
            alt.Tooltip("version:N", title="image version"),
            "model_profile:N",
            "outcome:N",
            "status:N",
            "reason:N",
            "run_id:N",
            "started_at:N",
            "attempts:Q",
            "attempts_served:Q",
        ]
        cells = (
            alt.Chart(data)
            .mark_rect(stroke="white", strokeWidth=2)
            .encode(
                x=x,
                y=y,
                color=_palette("outcome", OUTCOME_COLORS),
                tooltip=tooltip,
            )
        )
        # each cell says its outcome and run id, and under them the reason (in full in the tooltip)
        label = (
            alt.Chart(data)
            .mark_text(fontSize=10, color="white", fontWeight="bold", dy=-7)
            .encode(x=x, y=y, text="label:N", tooltip=tooltip)
        )
        reason = (
            alt.Chart(data)
            .mark_text(fontSize=9, color="white", dy=8)
            .encode(x=x, y=y, text="reason_short:N", tooltip=tooltip)
        )
        panels.append(
            alt.layer(cells, label, reason).properties(
                title=f"{engine} @ {host}",
                width=max(230 * len(profiles), 260),
                height=42 * len(versions),
            )
        )
    chart = alt.vconcat(*panels, title=title).resolve_scale(x="independent", y="independent")
    return chart, ""


def _group_by_engine(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        panels.setdefault((r["host"], r["engine"]), []).append(r)
    return dict(sorted(panels.items()))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def support_matrix_markdown(rows: list[dict[str, Any]], *, max_versions: int | None = 8) -> str:
    """The support matrix as markdown tables, one per host: a row per (engine, image version), newest
    version first, a column per model profile; each cell the outcome, its reason and its run id.
    ``max_versions``: the newest this many versions of each engine (None: all)."""
    if not rows:
        return "_No run yet: nothing has been tried._"
    out: list[str] = []
    hosts = sorted({r["host"] for r in rows})
    for host in hosts:
        mine = [r for r in rows if r["host"] == host]
        profiles = sorted({r["model_profile"] for r in mine})
        cells: dict[tuple[str, str, int], dict[str, str]] = {}
        hidden: dict[str, int] = {}
        for r in sorted(mine, key=lambda r: (r["engine"], r["version_rank"], r["model_profile"])):
            if max_versions is not None and r["version_rank"] > max_versions:
                hidden[r["engine"]] = max(hidden.get(r["engine"], 0), r["version_rank"] - max_versions)
                continue
            key = (r["engine"], _matrix_version(r), r["version_rank"])
            text = OUTCOME_MARKS.get(r["outcome"], r["outcome"])
            if r["reason"] and r["status"] != "ok":  # on an ok run the reason is only a note
                text += f": {_short_reason(r['reason'])}"
            text += f" (`{r['run_id']}`)"
            if r["attempts"] and r["attempts"] > 1:
                text += f", {r['attempts_served']}/{r['attempts']} served"
            cells.setdefault(key, {})[r["model_profile"]] = _md_cell(text)
        if len(hosts) > 1:
            out += [f"**{host}**", ""]
        out.append("| engine | image version | " + " | ".join(_md_cell(p) for p in profiles) + " |")
        out.append("|---|---|" + "---|" * len(profiles))
        for (engine, version, _), by_profile in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][2])):
            row = [_md_cell(engine), f"`{_md_cell(version)}`"] + [by_profile.get(p, "—") for p in profiles]
            out.append("| " + " | ".join(row) + " |")
        for engine, n in sorted(hidden.items()):
            out.append(f"\n_{engine}: {n} older version(s) not shown (`SELECT * FROM v_support_matrix`)._")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def decision_timeline_chart(wh: Warehouse) -> tuple[alt.TopLevelMixin, str]:
    title = "Switch decision over time (each criterion's status)"
    rows = _rows(wh, CHART_DECISIONS_SQL)
    if not rows:
        note = "no decision stored yet"
        return _note_chart(title, note), note
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
        alt.Chart(alt.Data(values=_values(crit)))
        .mark_square(size=160)
        .encode(
            x=x,
            y=y,
            color=_palette("status", STATUS_COLORS),
            tooltip=["evaluated_at:T", "host:N", "criterion:N", "status:N", "reason:N"],
        )
    )
    verdict_text = (
        alt.Chart(alt.Data(values=_values({**v, "row": "verdict"} for v in verdicts)))
        .mark_text(fontWeight="bold", fontSize=10)
        .encode(x=x, y=y, text="verdict:N", tooltip=["evaluated_at:T", "host:N", "verdict:N"])
    )
    chart = alt.layer(squares, verdict_text).properties(title=title, width=PANEL_WIDTH, height=200)
    return chart, ""


# --------------------------------------------------------------------------------------------------
# Writing


def _write(chart: alt.TopLevelMixin, out_dir: Path, name: str, title: str, note: str) -> ChartFiles:
    files = ChartFiles(
        name=name,
        title=title,
        html=out_dir / f"{name}.html",
        png=out_dir / f"{name}.png",
        json=out_dir / f"{name}.vl.json",
        note=note,
    )
    spec = chart.to_json(indent=1)
    files.json.write_text(spec)
    files.png.write_bytes(vlc.vegalite_to_png(spec, scale=2))
    files.html.write_text(chart_html(spec, title))
    return files


# The chart's JSON goes in a data block, never in script text: vl_convert's own page pastes the spec
# raw into a <script>, so a version like "v1</script><script>..." (an image label any publisher sets)
# ran as code. JSON's \u escapes keep the value the same for JSON.parse and leave no "<" for the
# HTML parser to end the block on.
_JSON_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_BOOT_JS = (
    "const spec = JSON.parse(document.getElementById('strix-chart-spec').textContent);"
    "vegaEmbed('#vega-chart', spec, {renderer: 'svg'}).catch(console.error);"
)
_CHART_STYLE = (
    "vega-chart.vega-embed{width:100%;display:flex}"
    "vega-chart.vega-embed details,vega-chart.vega-embed details summary{position:relative}"
)


def _json_for_html(spec: str) -> str:
    text = json.dumps(json.loads(spec), ensure_ascii=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _JSON_UNSAFE[m.group()], text)


def _csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


@functools.cache
def _vega_bundle() -> str:
    # JS inlined: the charts open on the Box without reaching a CDN
    bundle = vlc.javascript_bundle()
    if re.search("</script|<!--", bundle, re.IGNORECASE):  # would end or garble the block it sits in
        raise ValueError("the Vega bundle from vl_convert cannot be inlined in a <script> as it is")
    return bundle


def chart_html(spec: str, title: str) -> str:
    """A self-contained page drawing the Vega-Lite ``spec`` (JSON text). Any string in the data is shown
    as text: the spec is parsed from a JSON block, and the page's Content-Security-Policy runs only its
    own two scripts (a second lock: an injected <script> or onerror= attribute is refused even if it
    ever got into the markup). Vega compiles its expressions with Function(), hence 'unsafe-eval'."""
    bundle = _vega_bundle()
    csp = (
        f"script-src {_csp_hash(bundle)} {_csp_hash(_BOOT_JS)} 'unsafe-eval'; "
        "object-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            "<html><head><meta charset='utf-8'>",
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_CHART_STYLE}</style>",
            f"<script>{bundle}</script>",
            "</head><body>",
            "<div id='vega-chart'></div>",
            f"<script type='application/json' id='strix-chart-spec'>{_json_for_html(spec)}</script>",
            f"<script>{_BOOT_JS}</script>",
            "</body></html>",
            "",
        ]
    )


def _index(cs: ChartSet, generated_at: datetime) -> Path:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>strix-pipeline trends</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto}img{max-width:100%;"
        "border:1px solid #ddd}.note{color:#777}</style></head><body>",
        "<h1>strix-pipeline: trends and the switch decision</h1>",
        f"<p class='note'>generated {generated_at:%Y-%m-%d %H:%M} UTC</p><ul>",
    ]
    for c in cs.charts.values():
        parts.append(
            f"<li><a href='{c.html.name}'>{html.escape(c.title)}</a> "
            f"(<a href='{c.png.name}'>PNG</a>, <a href='{c.json.name}'>Vega-Lite</a>)</li>"
        )
    parts.append("</ul>")
    for c in cs.charts.values():
        note = f"<p class='note'>{html.escape(c.note)}</p>" if c.note else ""
        parts.append(
            f"<h2 id='{c.name}'>{html.escape(c.title)}</h2>{note}"
            f"<a href='{c.html.name}'><img src='{c.png.name}' alt='{html.escape(c.title)}'></a>"
        )
    parts.append("</body></html>")
    path = cs.out_dir / "index.html"
    path.write_text("\n".join(parts))
    return path


CHART_TITLES = {
    "ttft_p95_by_version": "TTFT p95 at 5 clients by image version",
    "throughput_vs_concurrency": "Output throughput vs concurrency, newest image per engine",
    "prefill_vs_input_length": "Prefill tokens/s vs input length",
    "memory_held_by_version": "Memory held by engine and version",
    "decision_timeline": "Switch decision timeline",
    "support_matrix": "Support matrix: engine × image version × model profile",
}


def write_charts(
    wh: Warehouse,
    out_dir: Path,
    *,
    changes: list[Change] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    now: datetime | None = None,
) -> ChartSet:
    """Write every chart (JSON, HTML, PNG) and index.html into `out_dir`; returns their paths.

    `changes` None: the change points stored in the warehouse are annotated."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cs = ChartSet(out_dir=out_dir)
    if changes is None:
        from strix_pipeline.analysis.changepoints import stored_changes

        try:
            changes = stored_changes(wh)
        except Exception as e:
            log.warning("could not read stored changes: %s", e)
            changes = []
    builders = {
        "ttft_p95_by_version": lambda: ttft_by_version_chart(wh, concurrency=concurrency, changes=changes),
        "throughput_vs_concurrency": lambda: throughput_chart(wh),
        "prefill_vs_input_length": lambda: prefill_chart(wh),
        "memory_held_by_version": lambda: memory_chart(wh),
        "decision_timeline": lambda: decision_timeline_chart(wh),
        "support_matrix": lambda: support_matrix_chart(wh),
    }
    for name, build in builders.items():
        title = CHART_TITLES[name].replace(" 5 clients", f" {concurrency} clients")
        try:
            chart, note = build()
            cs.charts[name] = _write(chart, out_dir, name, title, note)
        except Exception as e:  # one broken chart must not take the others (or the run) with it
            log.exception("chart %s failed", name)
            note = f"this chart could not be drawn: {type(e).__name__}: {e}"
            cs.charts[name] = _write(_note_chart(title, note), out_dir, name, title, note)
    cs.index_html = _index(cs, now or datetime.now(UTC))
    return cs


def _png_width(data: bytes) -> int:
    # IHDR is the first chunk: 8-byte signature, 4-byte length, b"IHDR", then width, height
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return struct.unpack(">I", data[16:20])[0]


def png_base64(path: Path, max_width: int = 600) -> str:
    """The PNG as base64 (for Dagster markdown metadata: `![](data:image/png;base64,...)`), at most
    `max_width` pixels wide: a wider one is re-rendered from its Vega-Lite JSON beside it."""
    path = Path(path)
    data = path.read_bytes()
    width = _png_width(data)
    spec = path.with_suffix(".vl.json")
    if width > max_width and spec.exists():
        # the PNG was written at scale 2; its natural width is half that
        natural = width / 2
        data = vlc.vegalite_to_png(spec.read_text(), scale=max_width / natural)
    return base64.b64encode(data).decode("ascii")


def markdown_image(path: Path, max_width: int = 600) -> str:
    return f"![{Path(path).stem}](data:image/png;base64,{png_base64(path, max_width)})"


def chart_points(spec: dict[str, Any] | str | Path) -> list[dict[str, Any]]:
    """Every data record in a Vega-Lite spec (top-level datasets and inline values): tests read charts back."""
    if isinstance(spec, Path):
        spec = spec.read_text()
    if isinstance(spec, str):
        spec = json.loads(spec)
    out: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "datasets" and isinstance(v, dict):
                    for recs in v.values():
                        out.extend(x for x in recs if isinstance(x, dict))
                elif k == "values" and isinstance(v, list) and v and isinstance(v[0], dict):
                    out.extend(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for x in node:
                walk(x)

    walk(spec)
    return out

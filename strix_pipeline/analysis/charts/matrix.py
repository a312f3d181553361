"""The support matrix (engine x image version x model profile -> serves / starts / fails): as a chart
and as markdown tables for the Dagster UI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

from strix_pipeline.analysis.charts.data import by_engine, json_values, matrix_version, support_matrix_rows
from strix_pipeline.analysis.charts.marks import OUTCOME_COLORS, OUTCOME_MARKS, note_chart, palette
from strix_pipeline.outside_text import markdown_text

if TYPE_CHECKING:
    from strix_pipeline.warehouse import Warehouse


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
        return note_chart(title, note), note
    panels = []
    for (host, engine), prow in by_engine(rows).items():
        for r in prow:
            r["version"] = matrix_version(r)
        versions = [r["version"] for r in sorted(prow, key=lambda r: r["version_rank"])]
        versions = list(dict.fromkeys(versions))
        profiles = sorted({r["model_profile"] for r in prow})
        for r in prow:
            r["label"] = f"{r['outcome'].replace('_', ' ')} · {r['run_id'][-12:]}"
            r["reason_short"] = _short_reason(r["reason"], 40) if r["status"] != "ok" else ""
        data = alt.Data(values=json_values(prow))
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
                color=palette("outcome", OUTCOME_COLORS),
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
            key = (r["engine"], matrix_version(r), r["version_rank"])
            # every value is the warehouse's (a run id or reason a server or file chose): text, never Markdown
            text = OUTCOME_MARKS.get(r["outcome"]) or markdown_text(r["outcome"])
            if r["reason"] and r["status"] != "ok":  # on an ok run the reason is only a note
                text += f": {markdown_text(_short_reason(r['reason']))}"
            text += f" ({markdown_text(r['run_id'])})"
            if r["attempts"] and r["attempts"] > 1:
                text += f", {r['attempts_served']}/{r['attempts']} served"
            cells.setdefault(key, {})[r["model_profile"]] = text
        if len(hosts) > 1:
            out += [f"**{markdown_text(host)}**", ""]
        out.append("| engine | image version | " + " | ".join(markdown_text(p) for p in profiles) + " |")
        out.append("|---|---|" + "---|" * len(profiles))
        for (engine, version, _), by_profile in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][2])):
            cells = (by_profile.get(p, "—") for p in profiles)
            row = [markdown_text(engine), markdown_text(version), *cells]
            out.append("| " + " | ".join(row) + " |")
        for engine, n in sorted(hidden.items()):
            out.append(
                f"\n_{markdown_text(engine)}: {n} older version(s) not shown "
                "(`SELECT * FROM v_support_matrix`)._"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"

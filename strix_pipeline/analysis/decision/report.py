"""An evaluation as markdown (the asset's and ``strix decide``'s table), and the numbers' text."""

from __future__ import annotations

from strix_pipeline.analysis.decision.outcome import Decision
from strix_pipeline.units import gib_text


def ratio_text(v: float | None) -> str:
    """A ratio in a reason: ``n/a`` where there is none (an interval that does not exist)."""
    return "n/a" if v is None else f"{v:.2f}x"


def format_value(v: float | None, unit: str | None) -> str:
    if v is None:
        return "–"
    if unit == "bytes":
        return gib_text(v, 1)
    if unit == "ms":
        return f"{v:.0f} ms"
    if unit == "ratio":
        return f"{v:.2f}x"
    return f"{v:g}"


def _table_cell(s: str) -> str:
    """Text kept inside one markdown table cell: a pipe or a newline would end it."""
    return s.replace("|", "\\|").replace("\n", " ")


def decision_markdown(d: Decision) -> str:
    icon = {"pass": "✅ pass", "fail": "❌ fail", "unknown": "❔ unknown"}
    lines = [
        f"**Verdict: `{d.label}`** on host `{d.host}` — {d.reason} "
        f"(evaluated {d.evaluated_at:%Y-%m-%d %H:%M} UTC, id `{d.evaluation_id}`)",
    ]
    if d.previous_verdict is not None:
        moved = " — **changed**" if d.verdict_changed else ""
        lines.append(f"Previous verdict: `{d.previous_verdict}`{moved}")
    lines += [
        "",
        "| id | criterion | required | status | value | threshold | CI | quant. mismatch | first held | evidence | reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in d.criteria:
        ci = (
            f"{format_value(c.ci_low, c.unit)} – {format_value(c.ci_high, c.unit)}"
            if c.ci_low is not None and c.ci_high is not None
            else "–"
        )
        evidence = ", ".join(f"`{r}`" for r in c.evidence_run_ids) or "–"
        if c.image_digests:
            evidence += " · " + ", ".join(f"`{g[:19]}`" for g in c.image_digests)
        lines.append(
            "| "
            + " | ".join(
                [
                    c.criterion,
                    f"`{c.name}`",
                    "yes" if c.required else "no",
                    icon.get(c.status, c.status),
                    format_value(c.value, c.unit),
                    format_value(c.threshold, c.unit),
                    ci,
                    "⚠️ yes" if c.quantization_mismatch else "no",
                    f"{c.first_held_at:%Y-%m-%d}" if c.first_held_at else "–",
                    _table_cell(evidence),
                    _table_cell(c.reason),
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"

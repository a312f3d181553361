"""An evaluation as markdown (the asset's and ``strix decide``'s table), and the numbers' text."""

from __future__ import annotations

from dataclasses import dataclass

from strix_pipeline.analysis.decision.outcome import Decision
from strix_pipeline.outside_text import markdown_text
from strix_pipeline.records import CriterionResult
from strix_pipeline.units import gib_text

MATCHUP_LABELS = {"production": "production", "equal_weights": "equal weights"}


def matchup_name(matchup: str) -> str:
    """A match-up named in a sentence: "the production match-up", "the equal-weights match-up" (the label
    as a compound adjective)."""
    return MATCHUP_LABELS.get(matchup, matchup).replace(" ", "-") + " match-up"


@dataclass(frozen=True)
class MatchupRow:
    """C3 or C5 on one match-up: the deciding match-up's figures, or the other one's shown beside them."""

    criterion: str
    matchup: str  # "production" | "equal_weights"
    decides: bool
    status: str
    value: float | None
    threshold: float | None
    ci_low: float | None
    ci_high: float | None
    unit: str | None
    run_ids: tuple[str, ...]

    @property
    def label(self) -> str:
        return MATCHUP_LABELS.get(self.matchup, self.matchup)

    @property
    def interval(self) -> str:
        if self.ci_low is None or self.ci_high is None:
            return "–"
        return f"{format_value(self.ci_low, self.unit)} – {format_value(self.ci_high, self.unit)}"


def deciding_row(c: CriterionResult, matchup: str) -> MatchupRow:
    """The criterion's own result as the row of ``matchup`` (the one its verdict was taken on)."""
    return MatchupRow(
        c.criterion,
        matchup,
        True,
        c.status,
        c.value,
        c.threshold,
        c.ci_low,
        c.ci_high,
        c.unit,
        tuple(c.evidence_run_ids),
    )


def matchup_rows(d: Decision) -> list[MatchupRow]:
    """Each criterion judged on two match-ups, the deciding one first (none before schema v15)."""
    rows = []
    for c in d.criteria:
        if c.matchup is None:
            continue
        rows.append(deciding_row(c, c.matchup))
        if c.other_matchup is not None:
            rows.append(
                MatchupRow(
                    c.criterion,
                    c.other_matchup,
                    False,
                    c.other_status or "unknown",
                    c.other_value,
                    c.other_threshold,
                    c.other_ci_low,
                    c.other_ci_high,
                    c.unit,
                    tuple(c.other_run_ids or ()),
                )
            )
    return rows


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


def _and(names: list[str]) -> str:
    """``C3 and C5``, ``C3, C5 and C6``."""
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


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
        "| id | criterion | required | status | value | threshold | CI | quant. mismatch | first "
        "held | evidence | reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in d.criteria:
        ci = (
            f"{format_value(c.ci_low, c.unit)} – {format_value(c.ci_high, c.unit)}"
            if c.ci_low is not None and c.ci_high is not None
            else "–"
        )
        evidence = ", ".join(markdown_text(r) for r in c.evidence_run_ids) or "–"
        if c.image_digests:
            evidence += " · " + ", ".join(markdown_text(g[:19]) for g in c.image_digests)
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
                    evidence,  # run ids and digests are the warehouse's, escaped as Markdown text
                    _table_cell(c.reason),
                ]
            )
            + " |"
        )
    matchups = matchup_rows(d)
    if matchups:
        lines += [
            "",
            f"**{_and(sorted({p.criterion for p in matchups}))} on both match-ups** (production: each "
            "engine's production format; equal weights: the baseline serving the candidate's weights)",
            "",
            "| criterion | match-up | decides | status | value | threshold | CI | runs |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {p.criterion} | {p.label} | {'yes' if p.decides else 'no'} | "
            f"{icon.get(p.status, p.status)} | "
            f"{format_value(p.value, p.unit)} | {format_value(p.threshold, p.unit)} | {p.interval} | "
            f"{', '.join(markdown_text(r) for r in p.run_ids) or '–'} |"
            for p in matchups
        ]
    return "\n".join(lines) + "\n"

"""The week's comparisons drawn as a forest plot (the report's first screen and the charts index): one
row per ratio (candidate / baseline) with its interval, the line at 1.0 (equal) and each row's
threshold.

The chart's data is a plain list of :class:`ForestRow`: the criteria give C3's TTFT ratio and C5's
memory ratio today; a paired comparison (different / same / unknown) is one more row with its
``verdict``, drawn the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import altair as alt

from strix_pipeline.analysis.charts.marks import STATUS_COLORS, note_chart
from strix_pipeline.analysis.decision import Decision, MatchupRow, Wording, matchup_rows, ratio_x
from strix_pipeline.analysis.decision.matchup_table import deciding_row

TITLE = "The week's comparisons: candidate / baseline, with 95 % intervals"
ROW_HEIGHT = 44
LOG_SPAN = 8  # the axis's high / low past which the forest plot is drawn on a log scale
# a paired comparison's verdicts beside the criteria's statuses, each with a colour (the word is drawn too)
VERDICT_COLORS = {**STATUS_COLORS, "different": "#c62828", "same": "#2e7d32"}


@dataclass(frozen=True)
class ForestRow:
    label: str  # short: the axis shows it whole
    ratio: float  # candidate / baseline
    low: float | None  # its interval (None: a single figure, e.g. memory held)
    high: float | None
    threshold: float | None  # the ratio the verdict is judged against
    verdict: str | None = None  # a criterion's pass/fail/unknown, or a comparison's different/same/unknown
    detail: str = ""  # the figures behind it (the tooltip)
    run_id: str | None = None  # the candidate's run: the point opens its page


def criterion_rows(d: Decision | None, held: Mapping[str, float | None], w: Wording) -> list[ForestRow]:
    """C3's TTFT ratio and, where both runs have a held figure (``held``: run id -> bytes), C5's
    memory ratio, each with its status as the verdict: on the deciding match-up, then on the
    other (equal weights or production), labelled with its match-up."""
    if d is None:
        return []
    rows = []
    matchups = matchup_rows(d)
    for p in matchups or _unpaired(d):
        suffix = f" · {p.label}" if matchups else ""
        if p.criterion == "C3" and p.value is not None and p.value > 0:
            rows.append(_ratio_row(p, f"C3 TTFT p95 at {w.concurrency}{suffix}", "", "95 % interval", w))
        if p.criterion == "C5" and p.unit == "ratio" and p.value is not None and p.value > 0:
            # decided by a Box's interleaved pairs: the paired ratio with its interval
            what = " held after load by interleaved pairs"
            rows.append(_ratio_row(p, f"C5 memory held{suffix}", what, "interval", w))
        elif p.criterion == "C5" and p.value is not None and p.threshold is not None and len(p.run_ids) == 2:
            base = held.get(p.run_ids[1])
            if base:
                rows.append(
                    ForestRow(
                        label=f"C5 memory held{suffix}",
                        ratio=p.value / base,
                        low=None,
                        high=None,
                        threshold=p.threshold / base,
                        verdict=p.status,
                        detail=f"{w.candidate} / {w.baseline_engine} ({p.label}): "
                        f"{ratio_x(p.value / base)}× held after load",
                        run_id=p.run_ids[0],
                    )
                )
    return rows


def _ratio_row(p: MatchupRow, label: str, what: str, interval: str, w: Wording) -> ForestRow:
    """A criterion decided on a ratio with its interval (C3; C5 on a Box's pairs)."""
    assert p.value is not None
    has_ci = bool(p.ci_low and p.ci_high)
    ci = f", {interval} {ratio_x(p.ci_low)}–{ratio_x(p.ci_high)}×" if has_ci else ""
    return ForestRow(
        label=label,
        ratio=p.value,
        low=p.ci_low if has_ci else None,
        high=p.ci_high if has_ci else None,
        threshold=p.threshold,
        verdict=p.status,
        detail=f"{w.candidate} / {w.baseline_engine} ({p.label}): {ratio_x(p.value)}×{what}{ci}",
        run_id=p.run_ids[0] if p.run_ids else None,
    )


def _unpaired(d: Decision) -> list[MatchupRow]:
    """An evaluation stored before the two match-ups (schema < 15): its C3 and C5 as they were judged."""
    return [deciding_row(c, "production") for c in d.criteria if c.criterion in ("C3", "C5")]


def _domain(rows: list[ForestRow]) -> list[float]:
    """A log axis around every figure, 1.0 and the thresholds, with room either side for the words
    centred above a point (a phone's plot is narrow: the words would be cut at its edge)."""
    xs = [1.0] + [v for r in rows for v in (r.ratio, r.low, r.high, r.threshold) if v and v > 0]
    return [min(xs) / 1.6, max(xs) * 2]


def forest_spec(rows: list[ForestRow]) -> dict[str, Any]:
    """The Vega-Lite spec (Altair) of ``rows``: an interval rule, the figure's point, the threshold's
    tick on each row, the line at 1.0, and the verdict word beside each point where there is one."""
    if not rows:
        return note_chart(TITLE, "no comparison measured this week").to_dict()
    # the word beside each point: its figure and, where the row has one, its verdict (no colour needed)
    records = [
        asdict(r) | {"verdict_text": f"{ratio_x(r.ratio)}×" + (f" · {r.verdict}" if r.verdict else "")}
        for r in rows
    ]
    data = alt.Data(values=records)
    low, high = _domain(rows)
    # ratios near 1 on a linear axis (a log one hides a 10 % gap); a log one only where they span far
    log = high / low > LOG_SPAN
    x_scale = (
        alt.Scale(type="log", domain=[low, high])
        if log
        else alt.Scale(type="linear", domain=[min(low, 0.9) * 0.9, high * 0.75], zero=False)
    )
    y = alt.Y("label:N", sort=None, title=None, axis=alt.Axis(labelLimit=200, labelFontSize=12))
    x = alt.X("ratio:Q", scale=x_scale, title="candidate / baseline" + (" (log scale)" if log else ""))
    color = alt.Color(
        "verdict:N",
        scale=alt.Scale(domain=list(VERDICT_COLORS), range=list(VERDICT_COLORS.values())),
        legend=None,
    )
    tooltip = ["label:N", "detail:N", "verdict:N", alt.Tooltip("threshold:Q", format=".2f")]
    layers = [
        alt.Chart(alt.Data(values=[{"one": 1.0}]))
        .mark_rule(color="#999", strokeWidth=1)
        .encode(x=alt.X("one:Q", scale=x_scale)),
        alt.Chart(data)
        .transform_filter("isValid(datum.low) && isValid(datum.high)")
        .mark_rule(strokeWidth=3)
        .encode(x=alt.X("low:Q", scale=x_scale), x2="high:Q", y=y, color=color),
        alt.Chart(data)
        .transform_filter("isValid(datum.threshold)")
        .mark_tick(thickness=3, size=ROW_HEIGHT * 0.7, color="#111")
        .encode(x=alt.X("threshold:Q", scale=x_scale), y=y, tooltip=tooltip),
        alt.Chart(data)
        .mark_point(filled=True, size=90, shape="diamond")
        .encode(x=x, y=y, color=color, tooltip=tooltip),
        alt.Chart(data)
        .mark_text(dy=-13, fontSize=11, color="#111")
        .encode(x=x, y=y, text=alt.Text("verdict_text:N")),
    ]
    # as wide as its box (a phone's too): the page never scrolls sideways for it
    # (the title is the page's heading: a chart title does not wrap on a phone)
    chart = alt.layer(*layers).properties(width="container", height=ROW_HEIGHT * len(rows) + 10)
    return chart.to_dict()

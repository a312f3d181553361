"""The switch_decision asset's numeric metadata, named for Dagster's Plots view.

The view draws one chart per numeric key, headed by the key, in key order, two charts a row, its y axis
titled "Value" whatever the key. So each key says its metric and unit, and a metric's baseline and
candidate keys differ only in their last word: sorted together ("· baseline" before "· candidate"),
they are drawn side by side in one row. A third key per metric plots candidate / baseline, the two in
one line. A figure without evidence is left out, never written as 0."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from strix_pipeline.analysis.decision import Decision
from strix_pipeline.units import gib
from strix_pipeline.warehouse import Warehouse

# The verdict as a number, so the switch_decision asset's plots show it over time (higher = closer to
# switching). Documented in the asset's description; keep the two in step.
VERDICT_SCORE = {"switch": 3, "evaluate": 2, "stay": 1, "unknown": 0}
ROLES = ("baseline", "candidate")  # the order their charts sit in a row: the key's order

# The figures the verdict rests on: TTFT p95 and output tokens/s at the decision's concurrency of
# the C3 evidence runs, and the held memory of the C5 evidence runs.
DECISION_FIGURES_SQL = """
SELECT run_id, ttft_p95_ms, output_tokens_per_s
FROM aggregates
WHERE scenario = 'concurrency_sweep' AND level = ? AND list_contains(?, run_id)
"""
DECISION_HELD_SQL = "SELECT run_id, held_bytes FROM runs WHERE list_contains(?, run_id)"
CONCURRENCY_KEY = "decision concurrency (clients)"  # the level C3's figures are read at


@dataclass(frozen=True)
class PlottedFigure:
    criterion: str  # whose evidence runs it is read from: "C3"
    metric: str  # "TTFT p95 at 5 clients"
    unit: str  # "ms"

    def key(self, role: str) -> str:
        """``C3 TTFT p95 at 5 clients (ms) · baseline``: one chart of the pair."""
        return f"{self.criterion} {self.metric} ({self.unit}) · {role}"

    @property
    def ratio_key(self) -> str:
        """``ratio · C3 TTFT p95 at 5 clients, candidate / baseline (×)``: the pair in one line."""
        return f"ratio · {self.criterion} {self.metric}, candidate / baseline (×)"


def plotted_figures(concurrency: int) -> tuple[PlottedFigure, PlottedFigure, PlottedFigure]:
    return (
        PlottedFigure("C3", f"TTFT p95 at {concurrency} clients", "ms"),
        PlottedFigure("C3", f"output at {concurrency} clients", "tok/s"),
        PlottedFigure("C5", "memory held after load", "GiB"),
    )


def _pair_metadata(fig: PlottedFigure, by_role: dict[str, float | None], digits: int) -> dict:
    out: dict[str, dg.MetadataValue] = {}
    for role in ROLES:
        if by_role.get(role) is not None:
            out[fig.key(role)] = dg.MetadataValue.float(round(float(by_role[role]), digits))
    base, cand = by_role.get("baseline"), by_role.get("candidate")
    if base and cand is not None:
        out[fig.ratio_key] = dg.MetadataValue.float(round(cand / base, 3))
    return out


def decision_figures(wh: Warehouse, decision: Decision, concurrency: int) -> dict[str, dg.MetadataValue]:
    """Numeric metadata for the decision's plots: ``verdict_score`` (always); and, when the criterion
    had its evidence pair, each :func:`plotted_figures` metric's baseline and candidate figure and
    their ratio (C3's runs at :data:`CONCURRENCY_KEY` clients; C5's, GiB = 2^30 bytes)."""
    out: dict[str, dg.MetadataValue] = {
        "verdict_score": dg.MetadataValue.int(VERDICT_SCORE.get(decision.verdict, 0)),
        CONCURRENCY_KEY: dg.MetadataValue.int(concurrency),
    }
    ttft, output, held = plotted_figures(concurrency)
    by_id = {c.criterion: c for c in decision.criteria}
    c3, c5 = by_id.get("C3"), by_id.get("C5")
    if c3 is not None and len(c3.evidence_run_ids) == 2:
        rows = wh.query_df(DECISION_FIGURES_SQL, [concurrency, c3.evidence_run_ids]).iter_rows(named=True)
        figures = {r["run_id"]: r for r in rows}
        # the evidence runs are candidate first, then baseline
        runs = dict(zip(("candidate", "baseline"), c3.evidence_run_ids, strict=True))
        for fig, column, digits in ((ttft, "ttft_p95_ms", 1), (output, "output_tokens_per_s", 2)):
            values = {role: (figures.get(run) or {}).get(column) for role, run in runs.items()}
            out |= _pair_metadata(fig, values, digits)
    if c5 is not None and len(c5.evidence_run_ids) == 2:
        rows = wh.query_df(DECISION_HELD_SQL, [c5.evidence_run_ids]).iter_rows(named=True)
        held_bytes = {r["run_id"]: r["held_bytes"] for r in rows}
        runs = dict(zip(("candidate", "baseline"), c5.evidence_run_ids, strict=True))
        values = {
            role: gib(held_bytes[run]) if held_bytes.get(run) is not None else None
            for role, run in runs.items()
        }
        out |= _pair_metadata(held, values, 3)
    return out

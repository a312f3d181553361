"""A series' run-to-run noise as measured (table ``noise_figures``).

:class:`NoiseRecord` is the table's columns, in order. The weekly analysis (analysis/changes.py)
computes one row per canary series from the canary's latest runs of its one release
(analysis/noise.canary_noise) and stores them as a set per ``computed_at``; ``strix changes`` shows
the newest set. This module only stores and reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from strix_pipeline.records import column_names
from strix_pipeline.warehouse.arrow import records_table
from strix_pipeline.warehouse.connection import in_transaction, insert


@dataclass
class NoiseRecord:
    """One row of ``noise_figures``: one canary series' noise as of one analysis."""

    computed_at: datetime
    host: str
    engine: str
    version: str  # the canary's release: every run behind the figure is of it
    fingerprint: str  # the series (run fingerprint / scenario), as table ``changes`` names it
    scenario: str
    level: int
    metric: str
    runs: int
    mean: float
    cv: float  # the coefficient of variation of one run (0.05: 5 %)
    step_3_pairs: float  # the smallest step a comparison by 3 / 5 / 10 pairs detects at this CV
    step_5_pairs: float
    step_10_pairs: float
    run_ids: list[str]

    @property
    def steps_text(self) -> str:
        """ "14.8% / 7.6% / 4.4%": the steps 3 / 5 / 10 pairs detect, as `strix changes` and the asset
        show them."""
        return " / ".join(f"{x:.1%}" for x in (self.step_3_pairs, self.step_5_pairs, self.step_10_pairs))


NOISE_COLUMNS = column_names(NoiseRecord)

LATEST_NOISE_SQL = f"""
SELECT {", ".join(NOISE_COLUMNS)} FROM noise_figures
WHERE computed_at = (SELECT max(computed_at) FROM noise_figures)
ORDER BY host, engine, scenario, level, metric
"""


def save_noise(con: duckdb.DuckDBPyConnection, rows: list[NoiseRecord]) -> None:
    """Store one analysis's figures; the same analysis (its ``computed_at`` and hosts) saved again
    replaces its rows."""
    if not rows:
        return
    data = records_table(NoiseRecord, rows)

    def write() -> None:
        for at, host in sorted({(r.computed_at, r.host) for r in rows}):
            con.execute("DELETE FROM noise_figures WHERE computed_at = ? AND host = ?", [at, host]).fetchall()
        insert(con, "noise_figures", data)

    in_transaction(con, write)


def latest_noise(con: duckdb.DuckDBPyConnection) -> list[NoiseRecord]:
    """The newest analysis's figures (empty before the first canary has two runs)."""
    return [NoiseRecord(*row) for row in con.execute(LATEST_NOISE_SQL).fetchall()]

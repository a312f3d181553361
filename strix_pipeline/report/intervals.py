"""The 95 % intervals of the percentiles the report prints beside TTFT p95's: TTFT p99, ITL p50 and ITL
p99 of a level, from its stored requests. The values are the aggregate's own (``metric_values``: TTFT
over successful measured requests, ITL the pooled gaps between content events) and the interval is
TTFT p95's (``quantile_ci``, distribution-free); a level with too few values for one says so."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from strix_pipeline.loadgen.metrics import metric_values
from strix_pipeline.records import RequestRecord
from strix_pipeline.report.markup import with_interval
from strix_pipeline.stats.quantiles import min_samples_for_ci, quantile_ci

# (metric of metric_values, percentile): the aggregate's column is f"{metric}_p{p}_ms". TTFT p95's
# interval is stored with the aggregate already.
WITH_INTERVAL = (("ttft", 99), ("itl", 50), ("itl", 99))

# what each metric's values are, for "no interval: 150 <values>"
_VALUES = {"ttft": ("request", "requests"), "itl": ("gap between tokens", "gaps between tokens")}

# every field of a stored request, by the project's own names (a warehouse's are never formatted in)
_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))
LEVEL_REQUESTS_SQL = (
    f"SELECT {', '.join(_FIELDS)} FROM requests WHERE run_id = ? AND NOT warmup "
    "ORDER BY scenario, level, request_index"
)


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None
    values: int  # the values behind it (requests for TTFT, gaps for ITL)
    metric: str
    p: float

    def text(self, value: float | None, unit: str) -> str:
        """``812 ms (95 % CI 790–850 ms)``, or the value and why it has no interval."""
        if value is None or self.low is not None or not self.values:
            return with_interval(value, self.low, self.high, unit)
        one, many = _VALUES[self.metric]
        need = min_samples_for_ci(self.p)
        return (
            f"{value:,.0f} {unit} (no interval: {self.values:,} {one if self.values == 1 else many}, "
            f"a p{self.p:g} interval needs {need})"
        )


def interval_key(metric: str, p: float) -> str:
    """The key an aggregate row holds a percentile's :class:`Interval` under: ``itl_p99_ci``."""
    return f"{metric}_p{p:g}_ci"


def interval_of(agg: dict[str, Any], column: str) -> Interval | None:
    """The interval an aggregate row holds for its percentile column (``itl_p99_ms``), if any."""
    return agg.get(column.removesuffix("_ms") + "_ci")


def level_intervals(records: list[RequestRecord]) -> dict[str, Interval]:
    """The intervals of :data:`WITH_INTERVAL` over one level's requests, by :func:`interval_key`."""
    values = metric_values(records)
    out = {}
    for metric, p in WITH_INTERVAL:
        low, high = quantile_ci(values[metric], p)
        out[interval_key(metric, p)] = Interval(low, high, len(values[metric]), metric, p)
    return out


def add_intervals(aggregates: list[dict[str, Any]], requests: list[dict[str, Any]]) -> None:
    """Each of one run's aggregate rows gets the intervals of its level's requests (rows of
    :data:`LEVEL_REQUESTS_SQL`); a level without stored requests gets none."""
    levels: dict[tuple[str, int], list[RequestRecord]] = {}
    for row in requests:
        levels.setdefault((row["scenario"], row["level"]), []).append(RequestRecord(**row))
    for a in aggregates:
        got = levels.get((a["scenario"], a["level"]))
        if got:
            a.update(level_intervals(got))

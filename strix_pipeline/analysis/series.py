"""The series change detection reads: one fingerprint (everything that must match for two runs to be
comparable) plus one scenario, level and metric, ordered by the image's explicit version sort key --
never by the date the run happened, so a re-run of an old image lands where that image belongs.

Before detection the runs of one release in one ISO week (UTC) become one point, their mean
(:func:`weekly_means`): a release's repeat runs and the runs of a comparison by pairs count once, with
the noise of one run over sqrt(n). A release measured in two weeks stays two points, so a slow drift
of the host shows as one. A series with fewer than ``MIN_POINTS`` means is read on its runs, as
E-divisive cannot place a step among two points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from strix_pipeline.stats.changepoints import MIN_POINTS
from strix_pipeline.warehouse.series import aggregate_rows, memory_rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from strix_pipeline.warehouse import Warehouse

# Which aggregate columns form series, and whether a rise is bad (latency, memory) or good (throughput).
SERIES_METRICS: dict[str, tuple[tuple[str, bool], ...]] = {
    "concurrency_sweep": (("ttft_p95_ms", True), ("tpot_p95_ms", True), ("output_tokens_per_s", False)),
    "prefill_ladder": (("prefill_tokens_per_s", False),),
    "decode": (("decode_tokens_per_s", False),),
    "prefix_cache": (("ttft_p95_ms", True),),
}
MEMORY_SCENARIO = "memory"  # held_bytes lives on the run, not on an aggregate
HIGHER_IS_WORSE = {m: bad for ms in SERIES_METRICS.values() for m, bad in ms} | {"held_bytes": True}


@dataclass
class SeriesPoint:
    """One run, or the weekly mean of several runs of one release (:func:`weekly_means`)."""

    run_id: str  # a mean's latest run, so a change's bracketing runs are real runs
    version: str  # what a person calls the image (tag / label), with a digest prefix when ambiguous
    sort_key: str
    started_at: datetime  # when ``run_id`` started
    value: float  # a mean's: the mean of its runs
    run_ids: tuple[str, ...] = ()  # a mean's runs, in series order; () for a single run
    run_values: tuple[float, ...] = ()

    @property
    def n(self) -> int:
        """The runs behind the point."""
        return len(self.run_values) or 1

    @property
    def values(self) -> tuple[float, ...]:
        """The values of the runs behind the point."""
        return self.run_values or (self.value,)


@dataclass
class Series:
    fingerprint: str  # run fingerprint + "/" + scenario, as the `changes` table stores it
    engine: str
    host: str
    scenario: str
    level: int
    metric: str
    points: list[SeriesPoint] = field(default_factory=list)


def iso_week(at: datetime) -> tuple[int, int]:
    """(ISO year, ISO week) of a moment in UTC; a naive time is taken as UTC."""
    year, week, _ = (at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)).isocalendar()
    return year, week


def weekly_means(points: Sequence[SeriesPoint]) -> list[SeriesPoint]:
    """The runs of one release (its label and its place in the version order) in one ISO week as one
    point, their mean, in the order the points came (first run of each group).

    Repeat runs and a comparison's pairs would otherwise weigh a release by how often it was run, and
    their runs' noise would pass for the series'. Another week stays another point: the host's drift.
    """
    groups: dict[tuple[str, str, tuple[int, int]], list[SeriesPoint]] = {}
    for p in points:
        groups.setdefault((p.version, p.sort_key, iso_week(p.started_at)), []).append(p)
    return [_mean_point(g) for g in groups.values()]


def detection_points(points: Sequence[SeriesPoint]) -> list[SeriesPoint]:
    """What E-divisive reads: the weekly means, or the runs themselves while the means are too few
    for it to place a step at all (two releases, each measured in one week)."""
    means = weekly_means(points)
    return means if len(means) >= MIN_POINTS else list(points)


def _mean_point(group: list[SeriesPoint]) -> SeriesPoint:
    if len(group) == 1:
        return group[0]
    latest = max(group, key=lambda p: p.started_at)
    values = tuple(v for p in group for v in p.values)
    run_ids = tuple(r for p in group for r in (p.run_ids or (p.run_id,)))
    return SeriesPoint(
        latest.run_id,
        latest.version,
        latest.sort_key,
        latest.started_at,
        float(np.mean(values)),
        run_ids,
        values,
    )


def _version_label(version: str | None, tag: str | None, digest: str | None) -> str:
    return version or tag or (digest[:19] if digest else "unknown")


def _disambiguate(points: list[SeriesPoint], digests: list[str | None]) -> None:
    """A floating tag ('latest') names several digests: add the digest so each version is distinct."""
    by_label: dict[str, set[str | None]] = {}
    for p, d in zip(points, digests, strict=True):
        by_label.setdefault(p.version, set()).add(d)
    for p, d in zip(points, digests, strict=True):
        if len(by_label[p.version]) > 1 and d:
            p.version = f"{p.version}@{d.removeprefix('sha256:')[:8]}"


def _sort_key(version_order: str, started_at: datetime) -> tuple[str, datetime]:
    # The read model's version order, and within one version, run order.
    return (version_order, started_at)


def load_series(wh: Warehouse) -> list[Series]:
    """Every series in the warehouse, points in version order."""
    groups: dict[tuple[str, str, int, str], Series] = {}
    raw: dict[tuple[str, str, int, str], list[tuple[tuple[str, datetime], SeriesPoint, str | None]]] = {}

    def add(rec: dict[str, Any], scenario: str, level: int, metric: str, value: float | None) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        key = (rec["fingerprint"], scenario, int(level), metric)
        if key not in groups:
            groups[key] = Series(
                fingerprint=f"{rec['fingerprint']}/{scenario}",
                engine=rec["engine"],
                host=rec["host"],
                scenario=scenario,
                level=int(level),
                metric=metric,
            )
            raw[key] = []
        label = _version_label(rec["image_version"], rec["image_tag"], rec["image_digest"])
        sk = _sort_key(rec["version_order"], rec["started_at"])
        point = SeriesPoint(rec["run_id"], label, sk[0], rec["started_at"], float(value))
        raw[key].append((sk, point, rec["image_digest"]))

    for rec in aggregate_rows(wh):
        for metric, _ in SERIES_METRICS.get(rec["scenario"], ()):
            add(rec, rec["scenario"], rec["level"], metric, rec[metric])
    for rec in memory_rows(wh):
        add(rec, MEMORY_SCENARIO, 0, "held_bytes", rec["held_bytes"])

    out = []
    for key, series in groups.items():
        entries = sorted(raw[key], key=lambda e: e[0])
        series.points = [e[1] for e in entries]
        _disambiguate(series.points, [e[2] for e in entries])
        out.append(series)
    return out

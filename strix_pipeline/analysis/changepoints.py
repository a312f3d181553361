"""Change points per series: E-divisive means with a Student t-test (stats/changepoints.py) on weekly
means (analysis/series.py), above a floor (analysis/floor.py).

A change counts only when the t-test p-value is below ``max_pvalue`` *and* the step is larger than the
floor (:func:`~strix_pipeline.analysis.floor.magnitude_floor`). A step found on means must also hold
over the runs behind them (the same t-test on the runs), since a mean hides its runs' disagreement. A
change is *provisional* until two runs stand after it (a repeat run of its version, or the next
version). Pure: series in, changes out; analysis/changes.py reads the series from the warehouse and
stores what is found, the canary's reading included.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from strix_pipeline.analysis.floor import MEASURED, magnitude_floor
from strix_pipeline.analysis.series import HIGHER_IS_WORSE, Series, SeriesPoint, detection_points
from strix_pipeline.config import ChangeDetectionConfig
from strix_pipeline.stats.changepoints import (
    ChangePoint,
    dependent_ttest,
    find_change_points,
    lag1_dependence,
    ttest,
)
from strix_pipeline.warehouse.changes import ChangeRecord, change_id
from strix_pipeline.warehouse.noise import NoiseRecord

log = logging.getLogger(__name__)


@dataclass
class Change(ChangeRecord):
    """One change on one series: the stored row (table ``changes``) and what is not stored."""

    direction: str = "regression"  # "regression" | "improvement"
    run_id_after: str | None = None
    newly_confirmed: bool = False  # confirmed now and was not confirmed in the warehouse before
    # the two runs that bracket the step, and when they ran (host drift is a matter of time)
    run_id_before: str | None = None
    started_before: datetime | None = None
    started_after: datetime | None = None
    bisection: str | None = None  # what its bisection found, in words (notify.regression_alerts)

    @property
    def is_regression(self) -> bool:
        return self.direction == "regression"

    @property
    def is_confirmed_regression(self) -> bool:
        """An engine regression a repeat run or the next version agreed with (not provisional any
        more), and not suspected to be the host's (analysis/canary.py)."""
        return self.status == "confirmed" and self.is_regression and not self.host_drift


def holds_in_runs(
    points: Sequence[SeriesPoint], cps: list[ChangePoint], max_pvalue: float
) -> list[ChangePoint]:
    """The change points found on means whose step the runs behind the means show too (the same
    t-test, between the same neighbouring change points, on the runs' values).

    A mean hides its runs' disagreement: a blip and a repeat run back at the old figure average to a
    clean step. On single runs this is the test the detection already made, so it is skipped.
    """
    if all(p.n == 1 for p in points):
        return cps
    bounds = [0, *(c.index for c in cps), len(points)]
    kept = []
    for k, c in enumerate(cps):
        before = [v for p in points[bounds[k] : c.index] for v in p.values]
        after = [v for p in points[c.index : bounds[k + 2]] for v in p.values]
        p, _, _ = ttest(np.asarray(before, dtype=float), np.asarray(after, dtype=float))
        if p < max_pvalue:
            kept.append(c)
        else:
            log.info(
                "step at point %d (%+.1f%%) dropped: its runs do not show it (p=%.2g)",
                c.index,
                c.magnitude_pct,
                p,
            )
    return kept


def holds_under_dependence(
    points: Sequence[SeriesPoint], cps: list[ChangePoint], max_pvalue: float
) -> list[ChangePoint]:
    """The change points whose step is still significant when successive points are not independent.

    The points are weekly means, so the runs of one week count as one block; what is left is the
    dependence between weeks (a host that drifts), estimated as the lag-1 autocorrelation around the
    steps found and allowed for by :func:`dependent_ttest`. Simulated with the project's own
    functions over 1000 13-week quarters of weekly single runs (AR(1) drift of 3 %, 1 % run noise):
    false confirmed steps per series and quarter 3.6 % at phi 0.6 (10-13 % before), 8 % at phi 0.8,
    0.3 % for independent weeks; a true 10 % step at 2 % noise is found in 82 % of quarters (86 %
    before). tests/unit/analysis/test_changepoints_drift.py holds the simulation.
    """
    values = [p.value for p in points]
    phi = lag1_dependence(values, [c.index for c in cps])
    if phi == 0:
        return cps
    bounds = [0, *(c.index for c in cps), len(values)]
    kept = []
    for k, c in enumerate(cps):
        p = dependent_ttest(values[bounds[k] : c.index], values[c.index : bounds[k + 2]], phi)
        if p < max_pvalue:
            kept.append(c)
        else:
            log.info(
                "step at point %d (%+.1f%%) dropped: not significant with the series' dependence "
                "(lag-1 autocorrelation %.2f, p=%.2g)",
                c.index,
                c.magnitude_pct,
                phi,
                p,
            )
    return kept


def changes_in_series(
    series: Series, cfg: ChangeDetectionConfig, *, now: datetime, measured: NoiseRecord | None = None
) -> list[Change]:
    """The changes on one series, found on its weekly means (:func:`detection_points`); ``measured``:
    its noise figure (:func:`measured_noise_for`), which sets the floor when given."""
    points = detection_points(series.points)
    values = [p.value for p in points]
    floor = magnitude_floor(
        points, cfg, measured.cv if measured else None, measured.runs if measured else None
    )
    by = f" (canary {measured.engine} {measured.version})" if floor.source == MEASURED and measured else ""
    log.info(
        "%s %s %s@%d %s: %d points from %d runs, %s%s",
        series.host,
        series.engine,
        series.scenario,
        series.level,
        series.metric,
        len(points),
        len(series.points),
        floor.text(),
        by,
    )
    cps = find_change_points(values, max_pvalue=cfg.max_pvalue, min_magnitude_pct=floor.pct)
    cps = holds_in_runs(points, cps, cfg.max_pvalue)
    cps = holds_under_dependence(points, cps, cfg.max_pvalue)
    bounds = [c.index for c in cps] + [len(values)]
    out = []
    for k, cp in enumerate(cps):
        before, after = points[cp.index - 1], points[cp.index]
        # the step holds once two runs stand after it (a repeat of that version, or the next
        # version): runs, not points, since one mean of two runs is a repeat already
        confirmed = sum(p.n for p in points[cp.index : bounds[k + 1]]) >= 2
        rise = cp.mean_after > cp.mean_before
        out.append(
            Change(
                change_id="",
                fingerprint=series.fingerprint,
                engine=series.engine,
                host=series.host,
                metric=series.metric,
                scenario=series.scenario,
                level=series.level,
                version_before=before.version,
                version_after=after.version,
                sort_key_after=after.sort_key,
                magnitude_pct=round(cp.magnitude_pct, 3),
                pvalue=cp.pvalue,
                status="confirmed" if confirmed else "provisional",
                ack_status="active",
                ack_reason=None,
                detected_at=now,
                direction="regression" if rise == HIGHER_IS_WORSE.get(series.metric, True) else "improvement",
                run_id_after=after.run_id,
                run_id_before=before.run_id,
                started_before=before.started_at,
                started_after=after.started_at,
            )
        )
    for c in out:
        # the warehouse's id: stable across re-detection, so an acknowledgement survives next week
        c.change_id = change_id(c)
    return out


def confirmed_since(changes: list[Change], since: datetime | None, until: datetime) -> list[Change]:
    """The changes whose confirmation happened in (since, until]: marked ``newly_confirmed``.

    What the switch decision alerts on: the regressions confirmed after the previous evaluation (any
    confirmed one when there was none) and not after this one. Computed from the stored
    ``confirmed_at``, so it crosses the asset boundary (regressions -> switch_decision) and a replay of
    an evaluation finds the same ones.
    """
    out = []
    for c in changes:
        at = c.confirmed_at
        c.newly_confirmed = (
            c.status == "confirmed" and at is not None and (since is None or at > since) and at <= until
        )
        if c.newly_confirmed:
            out.append(c)
    return out

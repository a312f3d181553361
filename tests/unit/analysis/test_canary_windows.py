"""Canary windows that cannot swallow the week, simulated with the project's own functions.

A host runs the canary once a week beside the week's new release; the canary has some twenty series
(sweep levels x metrics, the prefill ladder, decode, prefix cache), each with heavy-tailed run noise
(Student t, 3 degrees of freedom) and no step of its own. Every week an engine change lies between the
previous release's run and this week's; it is judged at the detection after next week's runs, when it
is confirmed. When a window matched on host only (any metric) and opened on a provisional canary step,
20-25 % of such weeks labelled the engine change "host drift suspected" (measured: 23 % over 300
half-years here), so it was neither alerted nor bisected. Now no window silences a change between two
releases, and a false canary movement is written beside the engine change in at most a few weeks.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np

from strix_pipeline.analysis.bisect.steps import bisectable
from strix_pipeline.analysis.canary import label_changes, time_ordered, window_of
from strix_pipeline.analysis.changepoints import Change, changes_in_series
from strix_pipeline.analysis.notify import new_regressions
from strix_pipeline.analysis.series import Series, SeriesPoint
from strix_pipeline.config import ChangeDetectionConfig
from strix_pipeline.planning.canary import Canary

CFG = ChangeDetectionConfig()
MONDAY = datetime(2026, 1, 5, 3, tzinfo=UTC)
CANARY = Canary("local", "llamacpp", "b100")
WEEKS = 26  # half a year of weekly canary runs before the week judged
SERIES = 20
TRIALS = 300
CV = 0.02  # scale of the t(3) run noise

# The canary's series: the sweep's TPOT and throughput at level 5 first (declared to move together,
# so both speak for an engine change on the sweep's throughput), then others
SHAPES = [
    ("concurrency_sweep", 5, "tpot_p95_ms"),
    ("concurrency_sweep", 5, "output_tokens_per_s"),
    *(("prefill_ladder", k, f"m{k}") for k in range(SERIES - 2)),
]


def canary_windows(rng: np.random.Generator, step_pct: float = 0.0) -> list:
    """The drift windows of one simulated canary over WEEKS + 2 weeks; ``step_pct``: a host step that
    moves every series from week WEEKS on."""
    windows = []
    for scenario, level, metric in SHAPES:
        points = [
            SeriesPoint(
                f"c{w}",
                CANARY.version,
                "000100",
                MONDAY + timedelta(weeks=w),
                100.0 * (1 + CV * rng.standard_t(3)) * (1 + step_pct / 100 * (w >= WEEKS)),
            )
            for w in range(WEEKS + 2)
        ]
        series = Series("fp/canary", CANARY.engine, CANARY.host, scenario, level, metric, points)
        ordered = dataclasses.replace(series, points=time_ordered(points, CANARY))
        now = MONDAY + timedelta(weeks=WEEKS + 2)
        windows += [
            window_of(c, CANARY, "host facts: none recorded")
            for c in changes_in_series(ordered, CFG, now=now)
        ]
    return windows


def engine_change() -> Change:
    """A confirmed engine regression on the sweep's throughput between last week's release (run two
    hours after the canary) and this week's."""
    return Change(
        "",
        "fp/vllm",
        "vllm",
        CANARY.host,
        "output_tokens_per_s",
        "concurrency_sweep",
        5,
        "v1",
        "v2",
        "v2",
        -8.0,
        1e-4,
        "confirmed",
        "active",
        None,
        MONDAY,
        direction="regression",
        newly_confirmed=True,
        started_before=MONDAY + timedelta(weeks=WEEKS - 1, hours=2),
        started_after=MONDAY + timedelta(weeks=WEEKS, hours=2),
    )


def test_a_noisy_canary_swallows_no_engine_change_and_rarely_stands_beside_one() -> None:
    rng = np.random.default_rng(20261207)
    swallowed = beside = 0
    for _ in range(TRIALS):
        c = engine_change()
        label_changes([c], canary_windows(rng))
        swallowed += bool(c.host_drift) or not c.is_confirmed_regression or not bisectable(c)
        beside += bool(c.canary_moved)
    # measured: 0 of 300 swallowed (68 of 300, 23 %, before); a false canary movement beside the
    # change in 1 % of weeks
    assert swallowed == 0
    assert beside / TRIALS <= 0.03


def test_an_engine_change_inside_a_true_host_step_is_alerted_with_the_canarys_movement() -> None:
    rng = np.random.default_rng(7)
    c = engine_change()
    label_changes([c], canary_windows(rng, step_pct=-15.0))
    assert c.host_drift is None and c.is_confirmed_regression and bisectable(c)
    assert new_regressions([c]) == [c]
    assert "canary llamacpp b100 concurrency_sweep@5" in c.canary_moved and "-1" in c.canary_moved

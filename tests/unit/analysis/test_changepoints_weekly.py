"""Change points on weekly means, the floor from the measured noise.

The runs of one release in one ISO week are one point (their mean, n runs); the floor is
max(min_magnitude_pct, noise_multiple x CV of one run / sqrt(n)) when the canary measured the
series' noise, the series' own noise otherwise; a step is confirmed once two *runs* stand after it.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from support.decision_seed import make_config, run_record, run_result

from strix_pipeline.analysis.changepoints import changes_in_series
from strix_pipeline.analysis.changes import detect_changes
from strix_pipeline.analysis.floor import (
    MEASURED,
    OWN,
    magnitude_floor,
    magnitude_floor_pct,
    measured_noise_for,
    series_noise_pct,
)
from strix_pipeline.analysis.series import Series, SeriesPoint, weekly_means
from strix_pipeline.config import ChangeDetectionConfig
from strix_pipeline.planning.canary import Canary
from strix_pipeline.stats.changepoints import find_change_points
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.noise import NoiseRecord

CFG = ChangeDetectionConfig()  # max_pvalue 0.001, floor max(2 %, 3 x noise)
MONDAY = datetime(2026, 8, 31, 2, tzinfo=UTC)  # ISO week 36 of 2026 starts here
FP = "local/llamacpp/gemma/Q4_K_M/decode"


def run(run_id: str, version: str, at: datetime, value: float) -> SeriesPoint:
    return SeriesPoint(run_id, version, version, at, value)


def series_of(points: list[SeriesPoint], host: str = "local", metric: str = "decode_tokens_per_s") -> Series:
    return Series(FP, "llamacpp", host, "decode", 1, metric, points)


def figure(
    cv: float,
    *,
    host: str = "local",
    engine: str = "llamacpp",
    fingerprint: str = FP,
    metric: str = "decode_tokens_per_s",
    version: str = "b100",
) -> NoiseRecord:
    return NoiseRecord(
        MONDAY, host, engine, version, fingerprint, "decode", 1, metric, 10, 100.0, cv, 0.1, 0.05, 0.03, []
    )


# ---- (a) weekly means -------------------------------------------------------------------------------


def test_runs_of_one_release_in_one_week_are_one_point_and_another_week_stays_apart() -> None:
    points = [
        run("a1", "v1", MONDAY, 100.0),
        run("a2", "v1", MONDAY + timedelta(days=2), 104.0),  # the repeat, same week
        run("b1", "v2", MONDAY + timedelta(days=3), 90.0),  # another release, same week
        run("a3", "v1", MONDAY + timedelta(weeks=1), 110.0),  # v1 again, next week: the host's drift shows
    ]
    means = weekly_means(points)
    assert [(p.version, p.n) for p in means] == [("v1", 2), ("v2", 1), ("v1", 1)]
    first = means[0]
    assert first.value == pytest.approx(102.0) and first.values == (100.0, 104.0)
    # the mean's run is its latest, so a change's bracketing runs are real runs
    assert (first.run_id, first.started_at, first.run_ids) == ("a2", MONDAY + timedelta(days=2), ("a1", "a2"))
    assert means[1] is points[2] and means[2].value == 110.0


def test_the_week_is_the_iso_week_in_utc() -> None:
    sunday_night = datetime(2026, 9, 6, 23, 30, tzinfo=UTC)
    # Monday 01:00 at UTC+2 is Sunday 23:00 UTC: still the week of the Sunday run
    monday_east = datetime(2026, 9, 7, 1, 0, tzinfo=timezone(timedelta(hours=2)))
    monday_utc = datetime(2026, 9, 7, 0, 30, tzinfo=UTC)
    means = weekly_means(
        [run("s", "v1", sunday_night, 1.0), run("e", "v1", monday_east, 3.0), run("m", "v1", monday_utc, 5.0)]
    )
    assert [(p.n, p.value) for p in means] == [(2, 2.0), (1, 5.0)]


# ---- (b) a step under the single-run floor is found on weekly means ---------------------------------

# One run of a release has a CV of 3 %; each release is benchmarked 10 times in its week (a comparison
# by 10 pairs). On single runs the floor is about 3 x 3 % = 9 %, over the 5 % step; a weekly mean of 10
# runs has 3 % / sqrt(10) = 0.95 % noise, and with the canary's CV of 3 % measured the floor is
# max(2 %, 3 x 0.95 %) = 2.85 %, under it. (Four runs at 5 % would give 3 x 2.5 % = 7.5 %: over a 5 %
# step as well, so the example numbers do not separate the two with noise_multiple 3.)
CV, STEP, RUNS_A_WEEK, RELEASES = 0.03, 0.05, 10, 20


def weekly_releases(seed: int) -> Series:
    rng = np.random.default_rng(seed)
    points = [
        run(
            f"r{i}-{j}",
            f"v{i:02d}",
            MONDAY + timedelta(weeks=i, hours=j),
            100.0 * (1 + STEP * (i >= RELEASES // 2)) * (1 + CV * rng.standard_normal()),
        )
        for i in range(RELEASES)
        for j in range(RUNS_A_WEEK)
    ]
    return series_of(points)


def found_on_runs_as_today(s: Series) -> bool:
    """The detection before weekly means: every run a point, the floor from the runs' own noise."""
    values = [p.value for p in s.points]
    cps = find_change_points(
        values, max_pvalue=CFG.max_pvalue, min_magnitude_pct=magnitude_floor_pct(values, CFG)
    )
    return any(c.index == RUNS_A_WEEK * RELEASES // 2 for c in cps)


def test_a_step_below_the_noise_of_one_run_is_found_on_weekly_means() -> None:
    step_at = (f"v{RELEASES // 2 - 1:02d}", f"v{RELEASES // 2:02d}")
    on_runs = on_means = 0
    for seed in range(100):
        s = weekly_releases(seed)
        on_runs += found_on_runs_as_today(s)
        found = changes_in_series(s, CFG, now=MONDAY, measured=figure(CV))
        on_means += [(c.version_before, c.version_after) for c in found] == [step_at]
    floor = magnitude_floor(weekly_means(weekly_releases(0).points), CFG, CV)
    assert floor.source == MEASURED and floor.pct == pytest.approx(3 * CV * 100 / math.sqrt(RUNS_A_WEEK))
    assert on_runs <= 10, on_runs  # the single-run floor hides it
    assert on_means >= 95, on_means


# ---- (c) the measured floor when a figure exists, the series' own otherwise -------------------------


def test_the_floor_is_the_measured_cv_over_sqrt_n_else_the_series_own_noise() -> None:
    # four releases, each the mean of 4 runs; one release with 9 runs does not move the median
    points = [
        run(f"r{i}-{j}", f"v{i}", MONDAY + timedelta(weeks=i, hours=j), 100.0 + (-1) ** i * 2 + j)
        for i, n in enumerate((4, 4, 9, 4))
        for j in range(n)
    ]
    means = weekly_means(points)
    assert [p.n for p in means] == [4, 4, 9, 4]
    measured = magnitude_floor(means, CFG, 0.05)
    assert (measured.source, measured.runs_per_point) == (MEASURED, 4.0)
    assert measured.noise_pct == pytest.approx(2.5) and measured.pct == pytest.approx(7.5)
    assert "measured CV 5.00% of one run / sqrt(4 runs per point)" in measured.text()
    own = magnitude_floor(means, CFG, None)
    assert own.source == OWN and own.noise_pct == pytest.approx(series_noise_pct([p.value for p in means]))
    assert own.pct == pytest.approx(max(2.0, 3 * own.noise_pct))
    # a quiet canary never takes the floor under min_magnitude_pct
    assert magnitude_floor(means, CFG, 0.001).pct == CFG.min_magnitude_pct


def test_the_figure_of_the_series_host_scenario_level_and_metric_is_used() -> None:
    s = series_of([])
    other_engine = figure(0.04, engine="vllm", fingerprint="local/vllm/x/decode")
    same_engine = figure(0.03, fingerprint="local/llamacpp/other-flags/decode")
    own_config = figure(0.02)
    assert measured_noise_for(s, [other_engine, same_engine, own_config]) is own_config
    assert measured_noise_for(s, [other_engine, same_engine]) is same_engine
    assert measured_noise_for(s, [other_engine]) is None  # another engine's noise is not this one's
    assert measured_noise_for(s, [figure(0.02, host="box"), figure(0.02, metric="ttft_p95_ms")]) is None


def test_a_step_the_series_own_noise_hides_is_found_at_the_measured_noise() -> None:
    # single runs that alternate by 3 %: successive differences call that 3 % noise (floor ~9 %);
    # the canary measured 1 % for one run, so the 4.5 % step counts
    values = [100 + 1.5 * (-1) ** i for i in range(8)] + [104.5 + 1.5 * (-1) ** i for i in range(8)]
    s = series_of([run(f"r{i}", f"v{i:02d}", MONDAY + timedelta(weeks=i), v) for i, v in enumerate(values)])
    assert changes_in_series(s, CFG, now=MONDAY) == []
    (c,) = changes_in_series(s, CFG, now=MONDAY, measured=figure(0.01))
    assert (c.version_before, c.version_after) == ("v07", "v08") and c.magnitude_pct == pytest.approx(4.5)


def test_detection_says_which_floor_each_series_had(tmp_path: Path, caplog) -> None:
    t = datetime(2026, 10, 5, 3, tzinfo=UTC)

    def weekly(run_id: str, tag: str, week: int, tok_s: float, host: str = "local"):
        r = run_record(run_id, "llamacpp", host=host, tag=tag, started_at=t + timedelta(weeks=week))
        return run_result(r, sweep={1: (200.0, tok_s)})

    canary = [weekly(f"c{w}", "b100", w, 100.0 + (w % 3)) for w in range(6)]
    releases = [weekly("n1", "b200", 7, 101.0), weekly("n2", "b300", 8, 100.0)]
    elsewhere = [weekly(f"x{w}", f"b{w}00", w, 100.0 + w % 2, host="box") for w in range(1, 5)]
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_runs(canary + releases + elsewhere)
        with caplog.at_level(logging.INFO, logger="strix_pipeline.analysis.changepoints"):
            detect_changes(
                wh,
                make_config("local"),
                now=t + timedelta(weeks=9),
                canaries=[Canary("local", "llamacpp", "b100")],
            )
        (fig,) = [f for f in wh.latest_noise() if f.metric == "output_tokens_per_s"]
    lines = [r.getMessage() for r in caplog.records if "output_tokens_per_s" in r.getMessage()]
    local = [x for x in lines if x.startswith("local llamacpp concurrency_sweep@1")]
    box = [x for x in lines if x.startswith("box llamacpp concurrency_sweep@1")]
    # the releases (b200, b300 and the canary's first two runs) rest on the canary's measured figure
    (releases,) = [x for x in local if ": 4 points from 4 runs" in x]
    assert f"measured CV {fig.cv * 100:.2f}% of one run" in releases and "(canary llamacpp b100)" in releases
    # the canary read over time does not: the figure is its own runs' spread
    (over_time,) = [x for x in local if ": 6 points from 6 runs" in x]
    assert "the series' own noise" in over_time
    # another host has no figure
    assert box and all("the series' own noise" in x for x in box)


def test_the_canarys_figure_starts_after_its_latest_step(tmp_path: Path) -> None:
    """A host step among the runs would be the figure's spread, and a floor of 3x that would hide it."""
    t = datetime(2026, 10, 5, 3, tzinfo=UTC)
    canary = Canary("local", "llamacpp", "b100")
    before, after = [100.0, 100.5, 99.5, 100.0], [150.0, 150.6, 149.4, 150.3]
    results = [
        run_result(
            run_record(f"c{w}", "llamacpp", host="local", tag="b100", started_at=t + timedelta(weeks=w)),
            sweep={1: (200.0, v)},
        )
        for w, v in enumerate(before + after)
    ]
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_runs(results)
        found = detect_changes(wh, make_config("local"), now=t + timedelta(weeks=9), canaries=[canary])
        (fig,) = [f for f in wh.latest_noise() if f.metric == "output_tokens_per_s"]
    steps = [
        c for c in found if c.metric == "output_tokens_per_s" and (c.host_drift or "").startswith("canary:")
    ]
    assert [c.magnitude_pct for c in steps] == [pytest.approx(50.0, abs=0.5)]
    assert fig.run_ids == ["c4", "c5", "c6", "c7"] and fig.cv < 0.01


def test_too_few_weekly_means_leave_the_runs_to_read() -> None:
    # two releases, three runs each, each in one week: two means, where E-divisive places nothing
    s = series_of(
        [
            run(f"{v}-{j}", v, MONDAY + timedelta(days=j), base * (1 + 0.002 * j))
            for v, base in (("v1", 100.0), ("v2", 130.0))
            for j in range(3)
        ],
        metric="ttft_p95_ms",
    )
    assert len(weekly_means(s.points)) == 2
    (c,) = changes_in_series(s, CFG, now=MONDAY)
    assert (c.version_before, c.version_after, c.status) == ("v1", "v2", "confirmed")


# ---- (d) confirmed counts runs, not points ----------------------------------------------------------


def flat_then(after: list[tuple[str, float, datetime]]) -> Series:
    flat = [
        run(f"r{i}", f"v{i:02d}", MONDAY + timedelta(weeks=i), 100.0 + 0.4 * (-1) ** i) for i in range(10)
    ]
    return series_of(flat + [run(r, "v10", at, v) for r, v, at in after], metric="ttft_p95_ms")


def test_a_mean_of_two_runs_after_the_step_confirms_it_and_one_run_does_not() -> None:
    week = MONDAY + timedelta(weeks=10)
    (once,) = changes_in_series(flat_then([("a", 125.0, week)]), CFG, now=MONDAY)
    assert once.status == "provisional" and once.version_after == "v10"
    twice = flat_then([("a", 125.0, week), ("b", 126.0, week + timedelta(days=1))])
    assert len(weekly_means(twice.points)) == 11  # the step's after-side is one point ...
    (again,) = changes_in_series(twice, CFG, now=MONDAY)
    assert again.status == "confirmed"  # ... of two runs
    assert (again.run_id_before, again.run_id_after) == ("r9", "b") and again.magnitude_pct == pytest.approx(
        25.5, abs=0.2
    )


def test_a_blip_averaged_with_its_repeat_is_no_step() -> None:
    # the repeat is back at the old figure: the mean (115) looks like a clean step, the runs do not
    week = MONDAY + timedelta(weeks=10)
    blip = flat_then([("a", 130.0, week), ("b", 100.1, week + timedelta(days=1))])
    assert changes_in_series(blip, CFG, now=MONDAY) == []

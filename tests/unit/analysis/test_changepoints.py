"""Change detection: planted steps are found, flat noise raises nothing, provisional until repeated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from support.decision_seed import make_config, run_record, run_result, seeded

from strix_pipeline.analysis.changepoints import changes_in_series
from strix_pipeline.analysis.changes import detect_changes
from strix_pipeline.analysis.floor import magnitude_floor_pct, series_noise_pct
from strix_pipeline.analysis.series import Series, SeriesPoint
from strix_pipeline.config import ChangeDetectionConfig
from strix_pipeline.stats.changepoints import find_change_points

CFG = ChangeDetectionConfig()  # max_pvalue 0.001, floor max(2 %, 3 x noise)
NOW = datetime(2026, 9, 1, tzinfo=UTC)


def noisy(seed: int, n: int = 20, noise: float = 0.01) -> np.ndarray:
    return 100.0 * (1 + noise * np.random.default_rng(seed).standard_normal(n))


def detect(values) -> list[int]:
    floor = magnitude_floor_pct(values, CFG)
    return [c.index for c in find_change_points(values, max_pvalue=CFG.max_pvalue, min_magnitude_pct=floor)]


def test_noise_estimate_ignores_the_step():
    x = noisy(1)
    x[10:] *= 1.08
    assert 0.5 < series_noise_pct(x) < 2.0
    assert magnitude_floor_pct(x, CFG) >= 2.0


def test_planted_8pct_step_is_found():
    hits = 0
    for seed in range(100):
        x = noisy(seed)
        x[12:] *= 1.08
        found = detect(x)
        hits += 12 in found
        assert all(abs(i - 12) <= 1 for i in found), (seed, found)
    assert hits >= 95


def test_flat_series_raise_almost_nothing():
    alarms = sum(bool(detect(noisy(seed))) for seed in range(1000))
    assert alarms / 1000 < 0.02


def test_small_step_below_the_floor_is_ignored():
    # a 1.5 % step is under the 2 % floor however significant the t-test finds it
    x = 100.0 * (1 + 0.001 * np.random.default_rng(3).standard_normal(20))
    x[10:] *= 1.015
    assert detect(x) == []


def series_of(values, versions=None) -> Series:
    versions = versions or [f"v{i:02d}" for i in range(len(values))]
    pts = [
        SeriesPoint(f"r{i}", v, v, NOW + timedelta(days=i), float(x))
        for i, (v, x) in enumerate(zip(versions, values, strict=True))
    ]
    return Series("fp/concurrency_sweep", "vllm", "strix-halo", "concurrency_sweep", 5, "ttft_p95_ms", pts)


def test_change_on_newest_version_is_provisional_until_repeated():
    x = list(noisy(7, n=15))
    x[-1] *= 1.25
    (only,) = changes_in_series(series_of(x), CFG, now=NOW)
    assert only.status == "provisional" and only.version_after == "v14" and only.version_before == "v13"
    assert only.direction == "regression" and only.magnitude_pct > 20
    # a repeat run of the same version agrees: confirmed
    repeat = [*x, x[-1] * 1.005]
    (again,) = changes_in_series(series_of(repeat, [f"v{i:02d}" for i in range(15)] + ["v14"]), CFG, now=NOW)
    assert again.status == "confirmed" and again.version_after == "v14"


def test_throughput_drop_is_a_regression_and_rise_an_improvement():
    x = noisy(11)
    x[10:] *= 0.9
    s = series_of(list(x))
    s.metric = "output_tokens_per_s"
    (c,) = changes_in_series(s, CFG, now=NOW)
    assert c.direction == "regression" and c.magnitude_pct < -5
    s.points = [SeriesPoint(p.run_id, p.version, p.sort_key, p.started_at, 1 / p.value) for p in s.points]
    (c2,) = changes_in_series(s, CFG, now=NOW)
    assert c2.direction == "improvement"


def test_series_follow_version_order_not_run_date(tmp_path):
    """Versions run out of order (a backfill) still form the series in version order."""
    x = noisy(5, n=12)
    x[8:] *= 1.10
    results = []
    for i, v in enumerate(x):
        # run date descends while the version ascends
        r = run_record(f"run{i:02d}", "vllm", tag=f"v0.{i:02d}.0", started_at=NOW - timedelta(days=i))
        results.append(run_result(r, ttft5=(float(v), v * 0.95, v * 1.05)))
    wh = seeded(tmp_path / "w.duckdb", results)
    cfg = make_config()
    changes = [c for c in detect_changes(wh, cfg, now=NOW) if c.metric == "ttft_p95_ms"]
    assert len(changes) == 1
    c = changes[0]
    assert (c.version_before, c.version_after) == ("v0.07.0", "v0.08.0")
    assert c.status == "confirmed" and c.newly_confirmed and c.pvalue < 0.001
    assert c.host == "strix-halo" and c.level == 5 and c.scenario == "concurrency_sweep"
    stored = wh.list_changes(metric="ttft_p95_ms")
    assert [s.change_id for s in stored] == [c.change_id]
    # an acknowledgement survives the next detection, and the change is no longer new
    assert wh.ack_change(c.change_id, "known: new scheduler default")
    (again,) = [c for c in detect_changes(wh, cfg, now=NOW + timedelta(days=7)) if c.metric == "ttft_p95_ms"]
    assert again.change_id == c.change_id
    assert again.ack_status == "acknowledged" and again.ack_reason == "known: new scheduler default"
    assert not again.newly_confirmed


def test_failed_runs_are_not_points(tmp_path):
    results = []
    for i in range(10):
        r = run_record(f"run{i:02d}", "vllm", tag=f"v0.{i:02d}.0", status="ok" if i != 6 else "failed_serve")
        # a failed run's numbers are whatever survived; as a point it would be a huge "step"
        p95 = 100.0 + (i % 2) * 0.5 if i != 6 else 5.0
        results.append(run_result(r, ttft5=(p95, 95.0, 105.0)))
    wh = seeded(tmp_path / "w.duckdb", results)
    assert detect_changes(wh, make_config(), now=NOW) == []


def test_unrepeated_provisional_change_is_retired(tmp_path):
    base = [100.0, 100.8, 99.6, 100.3, 99.8, 100.5, 99.9, 100.2, 100.6, 99.7]
    results = [
        run_result(
            run_record(f"r{i}", "vllm", tag=f"v0.{i:02d}.0", started_at=NOW + timedelta(days=i)),
            ttft5=(p, p, p),
        )
        for i, p in enumerate([*base, 130.0])
    ]
    wh = seeded(tmp_path / "w.duckdb", results)
    cfg = make_config()
    (blip,) = [c for c in detect_changes(wh, cfg, now=NOW) if c.metric == "ttft_p95_ms"]
    assert blip.status == "provisional" and blip.version_after == "v0.10.0"
    assert [r.change_id for r in wh.list_changes(metric="ttft_p95_ms")] == [blip.change_id]
    # the repeat run of v0.10.0 is back at 100: the step was a blip, and it goes
    wh.load_run(
        run_result(
            run_record("r10b", "vllm", tag="v0.10.0", started_at=NOW + timedelta(days=11)),
            ttft5=(100.1, 100.1, 100.1),
        )
    )
    assert [c for c in detect_changes(wh, cfg, now=NOW) if c.metric == "ttft_p95_ms"] == []
    assert wh.list_changes(metric="ttft_p95_ms") == []

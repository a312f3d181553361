"""The canary's rules on plain records (analysis/canary.py) and the label a stored change gets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from support.decision_seed import make_config

from strix_pipeline.analysis.bisect.steps import bisectable
from strix_pipeline.analysis.canary import DriftWindow, covered_metrics, facts_text, label_changes
from strix_pipeline.analysis.changepoints import Change
from strix_pipeline.analysis.changes import detect_changes
from strix_pipeline.planning.canary import Canary
from strix_pipeline.warehouse import Warehouse

T = datetime(2026, 11, 2, tzinfo=UTC)
CANARY = Canary("local", "llamacpp", "b100")


def change(
    before: str,
    after: str,
    tb: datetime,
    ta: datetime,
    host: str = "local",
    metric: str = "ttft_p95_ms",
    level: int = 5,
    scenario: str = "s",
) -> Change:
    return Change(
        "",
        "f/s",
        "llamacpp",
        host,
        metric,
        scenario,
        level,
        before,
        after,
        after,
        30.0,
        1e-4,
        "confirmed",
        "active",
        None,
        T,
        started_before=tb,
        started_after=ta,
    )


def window(start: datetime, end: datetime, *, confirmed: bool = True) -> DriftWindow:
    return DriftWindow(
        CANARY, "ttft_p95_ms", "s", 5, 50.0, start, end, "host facts: kernel 6.17 → 6.18", confirmed
    )


def test_a_change_whose_runs_straddle_a_confirmed_canary_step_is_shown_with_the_canarys_movement() -> None:
    w = window(T + timedelta(weeks=2), T + timedelta(weeks=3))
    straddles = change("b1", "b2", T + timedelta(weeks=2, hours=1), T + timedelta(weeks=3, hours=1))
    # in version order the before-run may be the later one (an old release re-run): still straddles
    reversed_ = change("b3", "b4", T + timedelta(weeks=4), T + timedelta(weeks=1))
    after = change("b5", "b6", T + timedelta(weeks=4), T + timedelta(weeks=5))
    elsewhere = change(
        "b1", "b2", T + timedelta(weeks=2, hours=1), T + timedelta(weeks=3, hours=1), host="box"
    )
    one_release = change("b7", "b7", T + timedelta(weeks=6), T + timedelta(weeks=7))
    label_changes([straddles, reversed_, after, elsewhere, one_release], [w])
    assert straddles.canary_moved.startswith("canary llamacpp b100 s@5 ttft_p95_ms +50.0%")
    assert "kernel 6.17 → 6.18" in straddles.canary_moved and reversed_.canary_moved
    assert after.canary_moved is None and elsewhere.canary_moved is None
    # the canary's movement is beside the change, not instead of it: still an engine regression
    assert straddles.host_drift is None and straddles.is_confirmed_regression and bisectable(straddles)
    assert "two runs of one release (b7)" in one_release.host_drift
    assert not one_release.is_confirmed_regression  # one release's two runs: the host's by definition


def test_a_window_covers_the_canarys_measurement_only_and_opens_on_a_confirmed_step() -> None:
    at = (T + timedelta(weeks=2, hours=1), T + timedelta(weeks=3, hours=1))
    other_metric = change("b1", "b2", *at, metric="output_tokens_per_s")
    other_level = change("b1", "b2", *at, level=1)
    other_scenario = change("b1", "b2", *at, scenario="prefix_cache")
    provisional = window(T + timedelta(weeks=2), T + timedelta(weeks=3), confirmed=False)
    confirmed = window(T + timedelta(weeks=2), T + timedelta(weeks=3))
    label_changes([other_metric, other_level, other_scenario], [confirmed])
    assert not (other_metric.canary_moved or other_level.canary_moved or other_scenario.canary_moved)
    same = change("b1", "b2", *at)
    label_changes([same], [provisional])
    assert same.canary_moved is None and same.host_drift is None  # one run away from its past: no window
    # the sweep's throughput and TPOT are declared to move together: one's window covers the other
    tpot = DriftWindow(
        CANARY, "tpot_p95_ms", "concurrency_sweep", 5, 12.0, *(t - timedelta(hours=1) for t in at), ""
    )
    throughput = change("b1", "b2", *at, metric="output_tokens_per_s", scenario="concurrency_sweep")
    ttft = change("b1", "b2", *at, metric="ttft_p95_ms", scenario="concurrency_sweep")
    label_changes([throughput, ttft], [tpot])
    assert "tpot_p95_ms +12.0%" in throughput.canary_moved and ttft.canary_moved is None
    assert covered_metrics("concurrency_sweep", "ttft_p95_ms") == {"ttft_p95_ms"}


def test_host_facts_that_moved_come_first() -> None:
    text = facts_text(
        {"kernel": "6.17", "bandwidth_bytes_per_s": 3.4e10},
        {"kernel": "6.17", "bandwidth_bytes_per_s": 2.8e10},
    )
    assert (
        text.startswith("host facts: bandwidth_bytes_per_s 34.0 GB/s → 28.0 GB/s") and "kernel 6.17" in text
    )
    assert facts_text(None, {}) == "host facts not recorded"


def test_a_stored_change_inside_one_release_is_labelled_on_the_next_detection(tmp_path) -> None:
    stored = change("b7", "b7", T, T + timedelta(days=7))
    stored.change_id = "old-one"
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.save_changes([stored])  # stored before schema v8 knew host drift: no label
        detect_changes(wh, make_config("local"))
        (row,) = wh.list_changes()
    assert row.change_id == "old-one" and "two runs of one release (b7)" in row.host_drift

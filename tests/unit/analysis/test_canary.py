"""The canary's rules on plain records (analysis/canary.py) and the label a stored change gets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from support.decision_seed import make_config

from strix_pipeline.analysis.canary import DriftWindow, facts_text, label_changes
from strix_pipeline.analysis.changepoints import Change
from strix_pipeline.analysis.changes import detect_changes
from strix_pipeline.planning.canary import Canary
from strix_pipeline.warehouse import Warehouse

T = datetime(2026, 11, 2, tzinfo=UTC)
CANARY = Canary("local", "llamacpp", "b100")


def change(before: str, after: str, tb: datetime, ta: datetime, host: str = "local") -> Change:
    return Change(
        "",
        "f/s",
        "llamacpp",
        host,
        "ttft_p95_ms",
        "s",
        5,
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


def window(start: datetime, end: datetime) -> DriftWindow:
    return DriftWindow(CANARY, "ttft_p95_ms", "s", 5, 50.0, start, end, "host facts: kernel 6.17 → 6.18")


def test_a_change_is_the_hosts_when_its_two_runs_straddle_the_canarys_step() -> None:
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
    assert straddles.host_drift.startswith("host drift suspected: canary llamacpp b100")
    assert "kernel 6.17 → 6.18" in straddles.host_drift and reversed_.host_drift
    assert after.host_drift is None and elsewhere.host_drift is None
    assert "two runs of one release (b7)" in one_release.host_drift
    assert not straddles.is_confirmed_regression  # a host's change is never alerted as the engine's


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

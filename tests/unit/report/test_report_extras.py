"""A bisection's and the canary's facts on the report, where the warehouse has them (schema v8): a change's
bisected first release beside it, a change the canary labels host drift under "host drift" and out of the
feed's regressions; a warehouse without them gives none, not an error."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from support.decision_seed import SEPT
from support.report_seed import BISECTION, REPORT_AT, regression, report_warehouse

from strix_pipeline.report import write_report
from strix_pipeline.report.extras import change_extras


def test_a_bisected_release_and_host_drift_are_shown_where_the_warehouse_has_them(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        wh.save_changes([regression("server-rocm-b6600")])  # a second confirmed regression
        ids = {c.version_after: c.change_id for c in wh.list_changes()}
        bisected, drifted = ids["server-rocm-b6500"], ids["server-rocm-b6600"]
        wh.con.execute(BISECTION, ["b1", bisected, SEPT, SEPT + timedelta(hours=1)])
        wh.con.execute(
            "UPDATE changes SET host_drift = ? WHERE change_id = ?",
            ["canary b6000 moved +11.0 % in the same window", drifted],
        )
        extras = change_extras(wh)
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    assert extras[bisected].bisected_release == "server-rocm-b6450"
    assert extras[drifted].host_drift == "canary b6000 moved +11.0 % in the same window"
    news = site.index.read_text().split("id='changes-h'")[1].split("id='trends-h'")[0]
    regressions = news.split("Regressions (confirmed)")[1].split("Improvements (confirmed)")[0]
    drift = news.split("Host drift flagged by the canary")[1].split("Runs that failed")[0]
    assert "server-rocm-b6450" in regressions and "server-rocm-b6600" not in regressions
    assert "canary b6000 moved +11.0 % in the same window" in drift and "server-rocm-b6600" in drift
    titles = [e.title for e in site.entries if e.kind == "regression"]
    assert titles == ["Regression: llamacpp ttft_p95_ms +12.5 % at server-rocm-b6500"]  # drift: not alerted
    assert (
        "first release showing it: server-rocm-b6450"
        in next(e for e in site.entries if e.kind == "regression").summary
    )


def test_a_warehouse_without_a_bisection_or_a_drift_label_gives_none(tmp_path: Path) -> None:
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        wh.con.execute("DROP TABLE IF EXISTS bisections")  # (changes.host_drift: there, but empty)
        assert change_extras(wh) == {}
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    news = site.index.read_text().split("id='changes-h'")[1].split("id='trends-h'")[0]
    assert "not bisected" in news
    assert (
        news.split("Host drift flagged by the canary")[1].split("Runs that failed")[0].count("<p>none</p>")
        == 1
    )


def test_a_regression_the_canary_moved_beside_stays_a_regression_with_the_movement(tmp_path: Path) -> None:
    moved = "canary llamacpp b6000 concurrency_sweep@5 ttft_p95_ms +9.0% between 2026-09-01 and 2026-09-08"
    wh, cfg = report_warehouse(tmp_path / "w.duckdb")
    with wh:
        (c,) = wh.list_changes()
        wh.con.execute("UPDATE changes SET canary_moved = ? WHERE change_id = ?", [moved, c.change_id])
        site = write_report(wh, cfg, tmp_path / "site", now=REPORT_AT)
    news = site.index.read_text().split("id='changes-h'")[1].split("id='trends-h'")[0]
    regressions = news.split("Regressions (confirmed)")[1].split("Improvements (confirmed)")[0]
    assert "server-rocm-b6500" in regressions and f"beside it: {moved}" in regressions
    (entry,) = [e for e in site.entries if e.kind == "regression"]
    assert f"beside it: {moved}." in entry.summary

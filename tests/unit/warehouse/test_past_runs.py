"""What the runs table says of past runs: a series' durations, for its estimate."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from support.warehouse import T0, make_run

from strix_pipeline.planning.estimate import estimate
from strix_pipeline.warehouse import Warehouse
from strix_pipeline.warehouse.past_runs import history_durations


def test_history_counts_the_series_runs_that_reached_the_engine(tmp_path):
    path = tmp_path / "w.duckdb"
    runs = [
        make_run("a", started_at=T0),  # 30 min each (support.warehouse)
        make_run("b", started_at=T0 + timedelta(days=1)),
        make_run("c", started_at=T0 + timedelta(days=2), status="failed_guard"),  # refused: no duration
        make_run("d", started_at=T0 + timedelta(days=3), engine="vllm"),  # another series
    ]
    short = make_run("e", started_at=T0 + timedelta(days=4))
    short = dataclasses.replace(
        short, run=dataclasses.replace(short.run, ended_at=short.run.started_at + timedelta(minutes=6))
    )
    with Warehouse.open(path) as wh:
        for r in [*runs, short]:
            wh.load_run(r)
    r = runs[0].run
    with Warehouse.open(path, read_only=True) as wh:
        got = history_durations(wh, r.host, "llamacpp", r.model_profile, r.profile)
    assert sorted(got) == [360.0, 1800.0, 1800.0]
    assert estimate(got).seconds == 1800.0

"""A run's duration from its series' history, the window it must fit, and the order of the week's runs."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from support.warehouse import T0, make_run

from strix_pipeline import window_plan
from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.records import ImageRecord
from strix_pipeline.warehouse import Warehouse


def test_before_any_history_the_default_and_then_the_median():
    assert window_plan.estimate([]).seconds == window_plan.DEFAULT_RUN_S
    assert "default" in window_plan.estimate([]).basis
    e = window_plan.estimate([600.0, 1200.0, 3000.0])
    assert e.seconds == 1200.0 and e.basis == "median of 3 run(s)"


def test_a_run_longer_than_the_time_left_is_deferred_with_the_numbers():
    start = datetime(2026, 9, 7, 3, 0, tzinfo=UTC)
    est = window_plan.Estimate(40 * 60.0, "median of 4 run(s)")
    left = window_plan.check_fits(est, start, 6.0, start + timedelta(hours=5))
    assert left == 3600.0
    with pytest.raises(EngineStartError) as e:
        window_plan.check_fits(est, start, 6.0, start + timedelta(hours=5, minutes=30))
    assert e.value.status == "deferred"
    assert "estimated 40 min (median of 4 run(s)), the window has 30 min left" in e.value.reason
    assert "until 2026-09-07 09:00" in e.value.reason and "production was not stopped" in e.value.reason


def test_the_estimate_error_is_said_in_minutes_and_share():
    said = window_plan.estimate_error(window_plan.Estimate(1800.0, "median of 2 run(s)"), 2700.0)
    assert said == "estimated 30 min (median of 2 run(s)), took 45.0 min: off by +15.0 min (+50%)"


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
        got = window_plan.history_durations(wh, r.host, "llamacpp", r.model_profile, r.profile)
    assert sorted(got) == [360.0, 1800.0, 1800.0]
    assert window_plan.estimate(got).seconds == 1800.0


def image(engine: str, repo: str, sort_key: str) -> ImageRecord:
    now = datetime.now(UTC)
    return ImageRecord(
        engine=engine, registry="docker.io", repository=repo, tag=sort_key, digest=f"sha256:{engine}{sort_key}",
        floating=False, created=None, version=sort_key, revision=None, labels=None, sort_key=sort_key,
        first_seen=now, last_seen=now,
    )  # fmt: skip


def test_the_newest_official_candidate_runs_first_then_the_baseline():
    from support.paths import REPO

    from strix_pipeline.config_load import load_config

    config: StrixConfig = load_config(REPO / "config" / "strix-halo.example.toml")
    old = image("vllm", "vllm/vllm-openai-rocm", "0019")
    new = image("vllm", "vllm/vllm-openai-rocm", "0020")
    community = image("vllm", "kyuz0/vllm-therock-gfx1151", "0099")
    llama = image("llamacpp", "ggml-org/llama.cpp", "6500")
    sglang = image("sglang", "rocm/sgl-dev", "0001")
    week = [sglang, old, community, llama, new]
    prio = {i.digest: window_plan.run_priority(config, i, week) for i in week}
    assert sorted(week, key=lambda i: -prio[i.digest])[:2] == [new, llama]
    assert prio[new.digest] == 2 and prio[llama.digest] == 1
    assert prio[old.digest] == prio[community.digest] == prio[sglang.digest] == 0

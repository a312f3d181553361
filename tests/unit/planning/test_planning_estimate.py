"""A run's expected duration from its series' durations, its error, and the order of the week's runs."""

from __future__ import annotations

from datetime import UTC, datetime

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.estimate import DEFAULT_RUN_S, Estimate, estimate, estimate_error
from strix_pipeline.planning.priority import run_priority
from strix_pipeline.records import ImageRecord


def test_before_any_history_the_default_and_then_the_median():
    assert estimate([]).seconds == DEFAULT_RUN_S
    assert "default" in estimate([]).basis
    e = estimate([600.0, 1200.0, 3000.0])
    assert e.seconds == 1200.0 and e.basis == "median of 3 run(s)"


def test_the_estimate_error_is_said_in_minutes_and_share():
    said = estimate_error(Estimate(1800.0, "median of 2 run(s)"), 2700.0)
    assert said == "estimated 30 min (median of 2 run(s)), took 45.0 min: off by +15.0 min (+50%)"


def image(engine: str, repo: str, sort_key: str) -> ImageRecord:
    now = datetime.now(UTC)
    return ImageRecord(
        engine=engine,
        registry="docker.io",
        repository=repo,
        tag=sort_key,
        digest=f"sha256:{engine}{sort_key}",
        floating=False,
        created=None,
        version=sort_key,
        revision=None,
        labels=None,
        sort_key=sort_key,
        first_seen=now,
        last_seen=now,
    )


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
    prio = {i.digest: run_priority(config, i, week) for i in week}
    assert sorted(week, key=lambda i: -prio[i.digest])[:2] == [new, llama]
    assert prio[new.digest] == 2 and prio[llama.digest] == 1
    assert prio[old.digest] == prio[community.digest] == prio[sglang.digest] == 0

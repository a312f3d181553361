"""A Box's night of pairs without a Box: each run of a pair is a whole Box run (here a stand-in for
runner/run.run_benchmark with a known step), the pairs balanced and interleaved, judged in one look at
the whole 5 %, each run's TTFT figures over every measured request with failures censored, its held
memory for C5, and C6's goodput at the owner's SLOs' load (clients, a rate, the trace); the plan counts
the runs."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import pytest
from support.decision_seed import SEPT, make_config, release_image, run_record, sweep_requests
from support.paths import REPO

from strix_pipeline.config import StrixConfig
from strix_pipeline.config.suite import rate_level
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.production_baseline import (
    ProductionBaseline,
    ProductionRead,
    ProductionReadError,
)
from strix_pipeline.planning.targets import BenchmarkTarget
from strix_pipeline.planning.week import box_pair_runs
from strix_pipeline.records import LevelAggregate, RunResult
from strix_pipeline.runner import box_pairs
from strix_pipeline.runner.box_pairs import box_figures, box_metrics, box_sides, compare_on_box
from strix_pipeline.runner.pair_records import records
from strix_pipeline.stats import paired

HOST = "strix-halo"
PRODUCTION = ProductionBaseline(
    read_digest="sha256:" + "1" * 64,
    image_ref="ghcr.io/ggml-org/llama.cpp@sha256:" + "2" * 64,
    image_tag="server-vulkan",
    executable=("/app/llama-server",),
    flags=("-m", "/models/m.gguf", "-c", "8192"),
    env=(),
    model_in_engine="/models/m.gguf",
    model_on_host="/srv/models/m.gguf",
    backend="vulkan",
    settings=(("context", "8192"),),
)


def with_profile(config: StrixConfig) -> StrixConfig:
    """The decision's config with the weekly profile both sides' runs use (the Box's ``standard``)."""
    data = config.model_dump()
    data["profiles"] = {"standard": {}}
    return StrixConfig.model_validate(data)


def sides():
    base_image = replace(release_image("server-vulkan", "2", SEPT, SEPT), engine="llamacpp", version=None)
    cand_image = release_image("v0.11.0", "a", SEPT, SEPT)
    baseline = BenchmarkTarget(HOST, "llamacpp", "qwen3-30b-a3b-gguf", "standard", base_image, PRODUCTION)
    candidate = BenchmarkTarget(HOST, "vllm", "qwen3-30b-a3b", "standard", cand_image)
    return box_sides(baseline, candidate)


def stand_in(
    step: float,
    seen: list[tuple[str, list[str] | None, str]],
    n: int = 90,
    held_gib: dict[str, float] | None = None,
    no_reading: int | None = None,
):
    """run_benchmark's stand-in: the candidate's TTFTs ``step`` times the baseline's, a slow hour
    (every third run) slowing both alike; the first request of every candidate run times out. Each
    run sends every level of its profile's sweep and holds ``held_gib[engine]`` after load (run number
    ``no_reading`` read no memory)."""

    def run(config, target, *, run_id, log, scenarios, force):
        seen.append((target.engine, scenarios, run_id))
        slow = 1.3 if len(seen) % 3 == 0 else 1.0
        rng = np.random.default_rng(len(seen))
        scale = slow * (step if target.engine == "vllm" else 1.0)
        ttfts = (rng.lognormal(np.log(400.0), 0.1, n) * scale).tolist()
        held = None if held_gib is None or len(seen) == no_reading else held_gib[target.engine]
        record = run_record(run_id, target.engine, started_at=datetime.now(UTC), held_gib=held)
        sweep = config.profiles[target.profile].concurrency_sweep
        requests = [
            q for n in sweep.levels for q in sweep_requests(run_id, record.started_at, ttfts, level=n)
        ]
        for rate in sweep.rates:  # open loop: one request a second, as the rows are sent
            at = sweep_requests(run_id, record.started_at, ttfts, level=rate_level(rate))
            requests += [replace(q, level_kind="rate") for q in at]
        if "trace" in scenarios:  # a trace replayed at its recorded arrivals
            at = sweep_requests(run_id, record.started_at, ttfts, level=90)
            requests += [replace(q, scenario="trace", level_kind="rate") for q in at]
        if target.engine == "vllm":
            q = requests[0]
            q.ok, q.ttft_ms, q.e2e_ms, q.error_class = False, None, None, "timeout"
        return RunResult(run=record, requests=requests)

    return run


def test_the_night_runs_balanced_interleaved_pairs_judged_in_one_look_at_five_percent(monkeypatch) -> None:
    config = with_profile(make_config(box_pairs=4))
    seen: list = []
    monkeypatch.setattr(box_pairs, "run_benchmark", stand_in(0.7, seen))
    result = compare_on_box(config, sides(), run_prefix="pairs-x", seed=3, progress=lambda line: None)
    # 4 pairs: 8 fresh runs, each pair's two back to back, as many AB as BA
    assert len(seen) == 8 and [s for _, s, _ in seen] == [box_pairs.SCENARIOS] * 8
    assert [rid for _, _, rid in seen] == [f"pairs-x-{i:03d}" for i in range(1, 9)]
    pairs = [{seen[i][0], seen[i + 1][0]} for i in range(0, 8, 2)]
    assert pairs == [{"llamacpp", "vllm"}] * 4
    assert sorted(result.orders) == ["AB", "AB", "BA", "BA"]
    p95 = next(m for m in result.metrics if m.metric == "ttft_p95_ms")
    # one look spending the whole 5 %: the interval is the 95 % one, Student t across log-ratios
    assert p95.looks == 1 and p95.look_alpha == pytest.approx(paired.ALPHA) and p95.pairs == 4
    logs = np.log([v.b / v.a for v in p95.values])
    half = paired._t_crit(paired.ALPHA, 3) * logs.std(ddof=1) / 2
    assert math.isclose(p95.low, math.exp(logs.mean() - half)) and math.isclose(
        p95.high, math.exp(logs.mean() + half)
    )
    assert p95.high < 1 and p95.verdict == "different"
    rows, _ = records(result)
    assert {r.requests_per_run for r in rows} == {90}
    assert {r.release_a for r in rows} == {"llamacpp server-vulkan qwen3-30b-a3b-gguf"}
    assert {r.release_b for r in rows} == {"vllm v0.11.0 qwen3-30b-a3b"}


def test_a_runs_figures_count_a_timed_out_request_as_the_timeout() -> None:
    run = run_record("r", "vllm")
    requests = sweep_requests("r", run.started_at, [100.0] * 19 + [200.0])
    requests[0].ok, requests[0].ttft_ms, requests[0].e2e_ms = False, None, None
    figs = box_figures(RunResult(run=run, requests=requests), 5, timeout_s=60.0)
    # 18 x 100, 200, 60 000: the p95 interpolates toward the censored value, never drops it
    assert figs.values["ttft_p95_ms"] == pytest.approx(np.percentile([100.0] * 18 + [200.0, 60_000.0], 95))
    assert figs.failed_requests == 1 and figs.ttft_requests == 20
    assert "goodput_rps" not in figs.values


def test_goodput_is_paired_with_slos_at_a_number_of_clients_or_a_rate_and_measured_there() -> None:
    def cut(config: StrixConfig) -> tuple[list[int], list[float]]:
        sweep = box_pairs.pair_config(config, sides()).profiles["standard"].concurrency_sweep
        return sweep.levels, sweep.rates

    assert "goodput_rps" not in box_metrics(make_config())
    assert "goodput_rps" in box_metrics(make_config(slo={"ttft_ms": 1000}))
    # SLOs at 8 clients: each pair run sends 8 too, beside the decision's 5
    eight = with_profile(make_config(slo={"ttft_ms": 1000, "concurrency": 8}))
    assert "goodput_rps" in box_metrics(eight) and cut(eight) == ([5, 8], [])
    # at an arrival rate: the open-loop level at that rate, after the decision's level
    rate = with_profile(make_config(slo={"ttft_ms": 1000, "load": "2/s"}))
    assert "goodput_rps" in box_metrics(rate) and cut(rate) == ([5], [2.0])
    # at a trace's load: the sweep at the decision's level, then the profile's trace replayed
    trace = with_profile(make_config(slo={"ttft_ms": 1000, "load": "trace"}))
    assert "goodput_rps" in box_metrics(trace) and cut(trace) == ([5], [])
    assert box_pairs.pair_scenarios(trace) == ["smoke", "concurrency_sweep", "trace"]
    assert box_pairs.pair_scenarios(rate) == box_pairs.SCENARIOS

    run = run_record("r", "vllm")
    at5 = sweep_requests("r", run.started_at, [100.0] * 10, level=5)
    at8 = sweep_requests("r", run.started_at, [500.0] * 8 + [1500.0, 1500.0], level=8)
    load8 = eight.decision.slo_load
    figs = box_figures(RunResult(run=run, requests=at5 + at8), 5, 60.0, eight.decision.slo, load8)
    # 8 clients x 8 within the SLOs / the 10 requests' client time at 8 (E2E = TTFT + 5 s)
    assert figs.values["goodput_rps"] == pytest.approx(8 * 8 / (8 * 5.5 + 2 * 6.5))
    assert figs.values["ttft_p95_ms"] == pytest.approx(100.0)  # C3's figure stays at the decision's level
    # open loop at 2/s (stored as level 120 a minute): 8 within / the wall time from the level's start
    # to its last answer (sent at 9 s, answered 6.5 s later)
    at2 = [replace(q, level=120, level_kind="rate") for q in at8]
    # the level's aggregate, as the run stores it: its first send to its last completion
    level = LevelAggregate("r", "concurrency_sweep", 120, "rate", 10, 0, duration_s=9 + 6.5)
    figs = box_figures(
        RunResult(run=run, requests=at5 + at2, aggregates=[level]),
        5,
        60.0,
        rate.decision.slo,
        rate.decision.slo_load,
    )
    assert figs.values["goodput_rps"] == pytest.approx(8 / (9 + 6.5))


@pytest.mark.parametrize(
    "load", [{"concurrency": 8}, {"load": "2/s"}, {"load": "trace"}], ids=["clients", "rate", "trace"]
)
def test_a_pair_run_is_sent_the_slos_load_and_goodput_is_judged_on_the_pairs(monkeypatch, load) -> None:
    config = with_profile(make_config(box_pairs=3, slo={"ttft_ms": 1000, **load}))
    seen: list = []
    monkeypatch.setattr(box_pairs, "run_benchmark", stand_in(0.7, seen, n=30))
    result = compare_on_box(config, sides(), run_prefix="slo-x", seed=3, progress=lambda line: None)
    assert all(s == box_pairs.pair_scenarios(config) for _, s, _ in seen)
    goodput = next(m for m in result.metrics if m.metric == "goodput_rps")
    assert goodput.pairs == 3 and all(v.a > 0 and v.b > 0 for v in goodput.values)


def test_each_pair_run_gives_its_held_memory_and_c5s_ratio_is_judged_on_the_pairs_that_read_it(
    monkeypatch,
) -> None:
    run = run_record("r", "vllm", held_gib=2.0)
    figs = box_figures(
        RunResult(run=run, requests=sweep_requests("r", run.started_at, [100.0] * 10)), 5, 60.0
    )
    assert figs.values["held_bytes"] == 2.0 * 2**30
    for held in (None, 0.0, -0.1):  # no reading, or memory given back: no ratio can be made of it
        run = run_record("r", "vllm", held_gib=held)
        figs = box_figures(
            RunResult(run=run, requests=sweep_requests("r", run.started_at, [100.0] * 10)), 5, 60.0
        )
        assert "held_bytes" not in figs.values and figs.values["ttft_p95_ms"] == 100.0

    config = with_profile(make_config(box_pairs=4))
    seen: list = []
    held = {"llamacpp": 10.0, "vllm": 12.5}
    monkeypatch.setattr(box_pairs, "run_benchmark", stand_in(0.7, seen, held_gib=held, no_reading=3))
    result = compare_on_box(config, sides(), run_prefix="mem-x", seed=3, progress=lambda line: None)
    by = {m.metric: m for m in result.metrics}
    # run 3 read no memory: its pair is left out of C5's ratio only, C3's keeps all four
    assert by["held_bytes"].pairs == 3 and by["ttft_p95_ms"].pairs == 4 and result.dropped_pairs == 0
    assert by["held_bytes"].ratio == pytest.approx(1.25)
    rows, _ = records(result)
    assert {r.metric for r in rows} >= {"ttft_p95_ms", "held_bytes"}


def test_the_plan_counts_a_box_nights_pair_runs_and_a_night_of_fewer_than_three_is_refused() -> None:
    assert box_pair_runs(make_config(box_pairs=3)) == 6
    assert box_pair_runs(make_config(box_pairs=0)) == 0
    with pytest.raises(ValueError, match="at least 3 pairs"):
        make_config(box_pairs=2)
    assert make_config().decision.box_pairs == 3  # the default: a Box night has pairs


def test_the_boxs_baseline_side_is_production_as_deployed() -> None:
    s = sides()
    with pytest.raises(ValueError, match="production as deployed"):
        box_sides(replace(s.baseline, production=None), s.candidate)
    assert s.baseline.production is PRODUCTION


def test_a_production_that_runs_a_binary_pairs_as_its_matching_engine_build(monkeypatch) -> None:
    config = load_config(REPO / "config" / "strix-halo.example.toml")
    d = config.decision
    read = ProductionRead(
        kind="unit",
        name="llama.service",
        argv=("/opt/llama/llama-server", "-m", config.models[d.baseline_model or "qwen3-30b-a3b-gguf"].path),
        env=("GGML_VK_VISIBLE_DEVICES=0",),
        build="b6123",
    )
    monkeypatch.setattr(box_pairs, "make_client", lambda box, timeout_s: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(box_pairs, "client_transport", lambda client: None)
    monkeypatch.setattr(box_pairs, "read_production", lambda production, client, target: read)
    cand = release_image("v0.11.0", "a", SEPT, SEPT)
    vulkan = replace(
        release_image("server-vulkan-b6123", "3", SEPT, SEPT),
        engine="llamacpp",
        repository="ggml-org/llama.cpp",
    )
    rocm = replace(vulkan, tag="server-rocm-b6123", digest="sha256:" + "4" * 64)
    # the build production's binary runs, in its backend family: not the ROCm image of it
    s = box_pairs.night_sides(config, cand, [rocm, vulkan])
    assert s.baseline.image == vulkan and s.baseline.production is not None
    assert s.baseline.production.build == "b6123"
    with pytest.raises(ProductionReadError, match=r"llama.cpp b6123 \(vulkan\): no known llamacpp image"):
        box_pairs.night_sides(config, cand, [rocm])

"""A Box's night of pairs without a Box: each run of a pair is a whole Box run (here a stand-in for
runner/run.run_benchmark with a known step), the pairs balanced and interleaved, judged in one look at
the whole 5 %, each run's TTFT figures over every measured request with failures censored, and C6's
goodput measured when the owner's SLOs are at the decision's level; the plan counts the runs."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from support.decision_seed import SEPT, make_config, release_image, run_record, sweep_requests

from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.production_baseline import ProductionBaseline
from strix_pipeline.planning.targets import BenchmarkTarget
from strix_pipeline.planning.week import box_pair_runs
from strix_pipeline.records import RunResult
from strix_pipeline.runner import box_pairs
from strix_pipeline.runner.box_pairs import box_figures, box_metrics, box_sides, compare_on_box
from strix_pipeline.runner.pairs import records
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


def stand_in(step: float, seen: list[tuple[str, list[str] | None, str]], n: int = 90):
    """run_benchmark's stand-in: the candidate's TTFTs ``step`` times the baseline's, a slow hour
    (every third run) slowing both alike; the first request of every candidate run times out."""

    def run(config, target, *, run_id, log, scenarios, force):
        seen.append((target.engine, scenarios, run_id))
        slow = 1.3 if len(seen) % 3 == 0 else 1.0
        rng = np.random.default_rng(len(seen))
        scale = slow * (step if target.engine == "vllm" else 1.0)
        ttfts = (rng.lognormal(np.log(400.0), 0.1, n) * scale).tolist()
        record = run_record(run_id, target.engine, started_at=datetime.now(UTC))
        requests = sweep_requests(run_id, record.started_at, ttfts, level=config.decision.concurrency)
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


def test_goodput_is_paired_only_with_slos_at_the_decisions_level() -> None:
    assert "goodput_rps" not in box_metrics(make_config())
    assert "goodput_rps" in box_metrics(make_config(slo={"ttft_ms": 1000}))
    assert "goodput_rps" not in box_metrics(make_config(slo={"ttft_ms": 1000, "concurrency": 8}))
    run = run_record("r", "vllm")
    requests = sweep_requests("r", run.started_at, [500.0] * 8 + [1500.0, 1500.0])
    slo = make_config(slo={"ttft_ms": 1000}).decision.slo
    figs = box_figures(RunResult(run=run, requests=requests), 5, timeout_s=60.0, slo=slo)
    # 5 clients x 8 within the SLOs / the 10 requests' client time (E2E = TTFT + 5 s)
    assert figs.values["goodput_rps"] == pytest.approx(5 * 8 / (8 * 5.5 + 2 * 6.5))


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

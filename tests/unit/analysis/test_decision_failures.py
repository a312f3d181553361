"""Failures count in C3: a failed or timed-out request is the run's request timeout in the p95 (never
dropped), and a candidate failing more requests with confidence fails, saying so."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from support.decision_seed import SEPT, evidence_of, make_config, run_record, sweep_requests

from strix_pipeline.analysis.decision.criteria import ttft_p95_beats_llamacpp_at_5
from strix_pipeline.config import SLO
from strix_pipeline.loadgen.metrics import aggregate_level
from strix_pipeline.records import RunResult
from strix_pipeline.stats.proportions import rate_excess, wilson_interval
from strix_pipeline.stats.quantiles import censored, quantile_ci

NOW = SEPT + timedelta(days=1)
N = 200  # measured requests per run at 5 clients (the standard profile's)


def sweep_run(run_id: str, engine: str, ttfts: list[float], failed: set[int]) -> RunResult:
    """A run whose 5-client sweep measured these TTFTs, the requests at ``failed`` timed out (no TTFT,
    no E2E: what the load generator records); its aggregate is the load generator's own."""
    tag = "v0.11.0" if engine == "vllm" else "server-rocm-b6500"
    run = run_record(run_id, engine, tag=tag, started_at=SEPT - timedelta(hours=engine == "llamacpp"))
    requests = sweep_requests(run_id, run.started_at, ttfts)
    for i in failed:
        q = requests[i]
        q.ok, q.ttft_ms, q.e2e_ms, q.event_offsets_ms, q.event_tokens = False, None, None, [], []
        q.error_class, q.error_message = "timeout", "no complete response within 600s (TimeoutError)"
    agg = aggregate_level(
        requests, run_id=run_id, scenario="concurrency_sweep", level=5, level_kind="concurrency", slo=SLO()
    )
    return RunResult(run=run, requests=requests, aggregates=[agg])


def c3(runs: list[RunResult]):
    config = make_config(candidate_model="qwen3-30b-a3b")
    return ttft_p95_beats_llamacpp_at_5(evidence_of(runs, config, NOW), config)


def test_identical_engines_whose_candidate_times_out_on_its_slowest_six_percent_never_pass_c3():
    # the reviewer's case: one latency distribution on both sides; the candidate's slowest 6 % time
    # out. Dropping them made its p95 about 7 % better, and C3 passed in about a quarter of the seeds.
    statuses = []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        cand = rng.lognormal(np.log(1000), 0.5, N)
        base = rng.lognormal(np.log(1000), 0.5, N)
        slowest = set(np.argsort(cand)[-int(0.06 * N) :].tolist())
        r = c3(
            [
                sweep_run("cand", "vllm", cand.tolist(), slowest),
                sweep_run("base", "llamacpp", base.tolist(), set()),
            ]
        )
        statuses.append(r.status)
        assert r.value is not None and r.value > 1, (seed, r.reason)  # the failures make it slower
    assert "pass" not in statuses, statuses


def test_a_candidate_failing_five_percent_more_requests_fails_c3_with_that_reason():
    rng = np.random.default_rng(7)
    base = rng.lognormal(np.log(1000), 0.2, N)
    cand = 0.5 * rng.lognormal(np.log(1000), 0.2, N)  # twice as fast where it answers
    failed = set(rng.choice(N, size=int(0.05 * N), replace=False).tolist())
    r = c3(
        [
            sweep_run("cand", "vllm", cand.tolist(), failed),
            sweep_run("base", "llamacpp", base.tolist(), set()),
        ]
    )
    assert r.status == "fail"
    assert r.reason.startswith(
        "the candidate fails more requests with confidence: failed requests 10/200 (5.0%)"
    )
    assert "llamacpp 0/200 (0.0%)" in r.reason


def test_one_failed_request_more_is_shown_but_decides_nothing():
    rng = np.random.default_rng(3)
    base = rng.lognormal(np.log(1000), 0.2, N)
    cand = 0.5 * rng.lognormal(np.log(1000), 0.2, N)
    r = c3(
        [sweep_run("cand", "vllm", cand.tolist(), {17}), sweep_run("base", "llamacpp", base.tolist(), set())]
    )
    assert r.status == "pass", r.reason
    assert "failed requests 1/200 (0.5%) vs llamacpp 0/200 (0.0%)" in r.reason
    assert "fails more requests with confidence" not in r.reason


def test_a_failure_counts_as_the_timeout_so_the_p95_never_improves():
    values = [float(v) for v in range(1, 201)]
    with_failures = censored([*values[:190], *[None] * 10], 600_000.0)
    assert with_failures[-10:] == [600_000.0] * 10
    assert np.percentile(with_failures, 95) >= np.percentile(values, 95)
    assert quantile_ci(with_failures)[1] == 600_000.0
    # a success slower than a timeout configured shorter since the run: the failure still ranks above it
    assert censored([5.0, None], 3.0) == [5.0, 5.0]


def test_newcombes_interval_of_a_difference_of_proportions():
    # Newcombe (1998), table II, 56/70 against 48/80: method 10 gives 0.0524 to 0.3339 at 95 %
    assert rate_excess(56, 70, 48, 80, level=0.975).lower == pytest.approx(0.0524, abs=5e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0 and hi == pytest.approx(0.2775, abs=5e-4)  # Newcombe (1998), table I
    assert not rate_excess(1, 200, 0, 200).worse and rate_excess(10, 200, 0, 200).worse
    assert not rate_excess(0, 0, 5, 10).worse  # no trials: nothing shown

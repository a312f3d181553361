"""C6, the owner's SLOs: goodput (requests/s meeting every SLO, a failure a miss) and tokens/s per user
of both engines at the SLOs' load, judged -- and required -- only when `[decision.slo]` is set."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from support.decision_seed import (
    SEPT,
    evidence_of,
    judge_runs,
    make_config,
    run_record,
    seeded,
    september_runs,
    sweep_requests,
)

from strix_pipeline.analysis.decision import decision_markdown, evaluate, reproduce, verdict_of
from strix_pipeline.analysis.decision.criteria import goodput_within_slos
from strix_pipeline.analysis.decision.criteria.slo import client_time, user_speed
from strix_pipeline.analysis.decision.evidence import RequestOutcome
from strix_pipeline.config import SLO
from strix_pipeline.loadgen.metrics import aggregate_level
from strix_pipeline.records import RunResult
from strix_pipeline.stats.bootstrap import ratio_of_ratios, ratio_of_sums

NOW = SEPT + timedelta(days=1)
N = 200


def by_id(decision):
    return {c.criterion: c for c in decision.criteria}


def sweep_run(
    run_id: str, engine: str, ttfts: list[float], failed: frozenset[int] = frozenset()
) -> RunResult:
    """A 5-client sweep of these TTFTs (E2E = TTFT + 5 s, 256 tokens), ``failed`` timing out; its
    aggregate the load generator's own."""
    tag = "v0.11.0" if engine == "vllm" else "server-rocm-b6500"
    run = run_record(run_id, engine, tag=tag, started_at=SEPT - timedelta(hours=engine == "llamacpp"))
    requests = sweep_requests(run_id, run.started_at, ttfts)
    for i in failed:
        q = requests[i]
        q.ok, q.ttft_ms, q.e2e_ms, q.event_offsets_ms, q.event_tokens = False, None, None, [], []
        q.error_class = "timeout"
    agg = aggregate_level(
        requests, run_id=run_id, scenario="concurrency_sweep", level=5, level_kind="concurrency", slo=SLO()
    )
    return RunResult(run=run, requests=requests, aggregates=[agg])


def c6(runs: list[RunResult], **slo: float):
    config = make_config(candidate_model="qwen3-30b-a3b", slo=slo)
    return goodput_within_slos(evidence_of(runs, config, NOW), config)


def lognormal(seed: int, median: float, sigma: float = 0.2) -> list[float]:
    return np.random.default_rng(seed).lognormal(np.log(median), sigma, N).tolist()


def test_without_slos_there_is_no_c6_and_the_verdict_is_the_five_criteria():
    d = judge_runs(september_runs(), make_config(), NOW)
    assert [c.criterion for c in d.criteria] == ["C1", "C2", "C3", "C4", "C5"]
    assert d.verdict == "evaluate"


def test_with_slos_c6_is_judged_and_required():
    d = judge_runs(september_runs(), make_config(slo={"ttft_ms": 1000}), NOW)
    c = by_id(d)["C6"]
    # vLLM's TTFTs (p95 820 ms) all meet 1000 ms, llama-server's (p95 1450 ms) almost none
    assert c.required and c.status == "pass", c.reason
    assert c.unit == "ratio" and c.value > 1 and c.ci_low > 1
    assert c.evidence_run_ids == ["vllm-qwen", "llama-qwen"]
    assert "SLOs TTFT <= 1000 ms at 5 clients" in c.reason
    assert "tok/s per user" in c.reason and "bootstrap over requests" in c.reason
    assert "failed requests 0/200 (0.0%) vs llamacpp 0/200 (0.0%)" in c.reason
    assert d.verdict == "evaluate"  # C4 and C5 fail as before; C1-C3 and C6 pass


def test_a_candidate_worse_within_the_slos_fails_c6_and_the_verdict_is_stay():
    # the candidate faster at p95 but slower to finish: E2E over the SLO on most of its requests
    runs = [sweep_run("cand", "vllm", lognormal(1, 800)), sweep_run("base", "llamacpp", lognormal(2, 1000))]
    for q in runs[0].requests:
        q.e2e_ms = q.ttft_ms + 9000.0
    c = c6(runs, e2e_ms=7000)
    assert c.status == "fail" and c.ci_high < 1, c.reason
    assert "fewer within the SLOs" in c.reason
    statuses = {"C1": "pass", "C2": "pass", "C3": "pass", "C4": "fail", "C5": "pass", "C6": "fail"}
    assert verdict_of(statuses, ["C1", "C2", "C3", "C4", "C5", "C6"])[0] == "stay"


def test_identical_engines_are_inconclusive():
    runs = [sweep_run("cand", "vllm", lognormal(3, 1000)), sweep_run("base", "llamacpp", lognormal(4, 1000))]
    c = c6(runs, ttft_ms=1100, tpot_ms=500)
    assert c.status == "unknown" and c.reason.startswith("inconclusive"), c.reason
    assert c.ci_low < 1 < c.ci_high


def test_a_candidate_failing_five_percent_more_requests_fails_c6_with_that_reason():
    rng = np.random.default_rng(5)
    failed = frozenset(rng.choice(N, size=10, replace=False).tolist())
    runs = [
        sweep_run("cand", "vllm", lognormal(6, 500), failed),
        sweep_run("base", "llamacpp", lognormal(7, 1000)),
    ]
    c = c6(runs, ttft_ms=5000)
    assert c.status == "fail"
    assert c.reason.startswith(
        "the candidate fails more requests with confidence: failed requests 10/200 (5.0%)"
    )


def test_failures_are_misses_that_hold_their_client_for_the_timeout():
    ok = RequestOutcome(True, 100.0, 1100.0, 11)
    failed = RequestOutcome(False, None, None, None)
    assert client_time([ok, failed], 120.0) == [1.1, 120.0]
    assert user_speed(ok) == 10.0 and user_speed(failed) == 0.0
    assert user_speed(RequestOutcome(True, 100.0, 100.0, 1)) is None  # one token: no streaming speed


def test_the_bootstrap_is_seeded_and_covers_its_point():
    point, lo, hi = ratio_of_sums([1.0, 0.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0])
    assert (
        point == 0.6
        and lo <= point <= hi
        and ratio_of_sums([1.0, 0.0, 1.0, 1.0], [1.0, 2.0, 1.0, 1.0])[1] == lo
    )
    assert ratio_of_ratios(([1.0], [1.0]), ([0.0], [1.0])) == (None, None, None)


def test_the_decision_on_a_real_warehouse_shows_c6_stores_it_and_replays_it(tmp_path):
    wh = seeded(tmp_path / "w.duckdb", september_runs())
    config = make_config(slo={"ttft_ms": 1000, "tpot_ms": 500, "e2e_ms": 60000})
    d = evaluate(wh, config, now=NOW)
    c = by_id(d)["C6"]
    assert c.status == "pass" and c.required, c.reason
    assert by_id(d)["C6"].reason == by_id(judge_runs(september_runs(), config, NOW))["C6"].reason
    md = decision_markdown(d)
    assert "| C6 | `goodput_within_slos` | yes | ✅ pass |" in md
    assert "**C3, C5 and C6 on both match-ups**" in md
    wh.save_decision(d.criteria)
    _, again, diffs = reproduce(wh, config, d.evaluation_id)
    assert diffs == [] and by_id(again)["C6"].ci_low == c.ci_low

"""What a decision stands on: interleaved pairs of fresh runs, their interval at the level it really has
and each run's percentile named for what its request count estimates -- or single runs, and then a
`switch` is no better than provisional."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

import numpy as np
from scipy import stats
from support.decision_seed import (
    SEPT,
    c3_pairs_record,
    evidence_of,
    make_config,
    run_record,
    run_result,
    switch_runs,
    with_c3_pairs,
)

from strix_pipeline.analysis.decision.evidence import PairedTtft
from strix_pipeline.analysis.decision.verdict import judge
from strix_pipeline.stats import paired
from strix_pipeline.stats.quantiles import estimated_level, min_samples_for_name, quantile_name

NOW = SEPT + timedelta(days=1)


def confirmed_runs():
    """Everything passes and a repeat of the candidate's image agrees: the switch rests on no one run."""
    repeat = run_result(
        run_record(
            "vllm-gptoss-2",
            "vllm",
            started_at=SEPT + timedelta(hours=5),
            profile="gpt-oss-120b",
            quant="MXFP4",
            digest="sha256:" + "a" * 64,
        )
    )
    return [*switch_runs(), repeat]


def c3_of(d):
    return {c.criterion: c for c in d.criteria}["C3"]


# ------------------------------------------------------------------------------ the percentile's name


def test_a_p95_of_few_requests_is_named_for_the_percentile_it_estimates() -> None:
    # the k-th of n values sits at the k / (n + 1) quantile: a linear "p95" of 20 is the p90.7
    assert math.isclose(estimated_level(95, 20), 100 * 19.05 / 21)
    assert quantile_name(95, 20) == "p90.7"
    assert quantile_name(95, 86) == "p94.0"  # C3's 86 requests: enough for its interval, not its name
    assert quantile_name(95, None) == "p95"
    assert min_samples_for_name(95) == 180
    assert quantile_name(95, 179) != "p95" and quantile_name(95, 180) == "p95"
    # the estimate's level, checked on draws: the mean of the sample "p95" of 20 uniforms
    rng = np.random.default_rng(7)
    level = np.mean([np.percentile(rng.uniform(size=20), 95) for _ in range(20_000)]) * 100
    assert abs(level - estimated_level(95, 20)) < 0.2  # 4 standard errors; the name says 95, 4.3 away


# --------------------------------------------------------------------------- C3 on the pairs' ratios


def test_c3_decides_on_the_pairs_t_interval_of_log_ratios_at_its_stated_level() -> None:
    runs, config = confirmed_runs(), make_config()
    # the candidate at about half the baseline's p95 in every pair, the pairs' ratios spread
    ratios = (0.50, 0.60, 0.45, 0.55, 0.52)
    record = c3_pairs_record(runs, config, NOW, ratios=ratios, requests_per_run=20)
    got = c3_of(judge(with_c3_pairs(evidence_of(runs, config, NOW), record), config))
    d = np.log(ratios)
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    assert got.status == "pass", got.reason
    assert math.isclose(got.value, math.exp(d.mean()))
    assert math.isclose(got.ci_low, math.exp(d.mean() - half)) and math.isclose(
        got.ci_high, math.exp(d.mean() + half)
    )
    assert got.reason.startswith("by 5 interleaved pairs of fresh runs")
    assert (
        "at 95.00 % (Student t across the pairs' log-ratios of the runs' p90.7 of 20 TTFT requests a run)"
        in (got.reason)
    )


def test_a_ladders_interval_is_labelled_with_the_level_its_look_spent() -> None:
    runs, config = confirmed_runs(), make_config()
    record = c3_pairs_record(runs, config, NOW, requests_per_run=180)
    look = paired.look_alphas(paired.looks_of(cap=10))[0]  # the first look at 3 of 10 pairs: 0.45 %
    got = c3_of(
        judge(with_c3_pairs(evidence_of(runs, config, NOW), replace(record, look_alpha=look)), config)
    )
    assert "at 99.55 % (Student t across the pairs' log-ratios of the runs' p95 of 180" in got.reason
    assert "95 % CI" not in got.reason.split(";", 1)[0]


# ------------------------------------------------------------------- without pairs: at most provisional


def test_without_pairs_a_switch_rests_on_single_runs_and_is_provisional() -> None:
    runs, config = confirmed_runs(), make_config()
    d = judge(evidence_of(runs, config, NOW), config)
    # a repeat run agrees, so only the single runs keep it provisional
    assert d.verdict == "switch" and d.provisional and d.label == "switch (provisional)", d.reason
    assert "rests on single runs" in d.reason
    assert all(c.provisional for c in d.criteria)
    with_pairs = judge(
        with_c3_pairs(evidence_of(runs, config, NOW), c3_pairs_record(runs, config, NOW)), config
    )
    assert with_pairs.verdict == "switch" and not with_pairs.provisional, with_pairs.reason
    assert "single runs" not in with_pairs.reason


def test_pairs_that_leave_c3_inconclusive_give_no_switch_at_all() -> None:
    runs, config = confirmed_runs(), make_config()
    record = c3_pairs_record(runs, config, NOW, ratios=(0.8, 1.2, 0.9, 1.1, 1.0))
    d = judge(with_c3_pairs(evidence_of(runs, config, NOW), record), config)
    assert c3_of(d).status == "unknown" and d.verdict == "unknown"


# ------------------------------------------------------------------------------- C6 on the pairs' goodput


def test_c6_decides_on_the_pairs_goodput_ratio_when_the_pairs_measured_it() -> None:
    runs, config = switch_runs(), make_config(slo={"ttft_ms": 1000})
    single = {c.criterion: c for c in judge(evidence_of(runs, config, NOW), config).criteria}["C6"]
    assert single.status == "pass", single.reason  # the single runs: more within the SLOs
    # the Box's pairs of the very same releases: the candidate's goodput about half the baseline's
    record = replace(c3_pairs_record(runs, config, NOW), metric="goodput_rps", higher_is_better=True)
    pairs = PairedTtft(**{k: v for k, v in vars(record).items() if k in PairedTtft.__dataclass_fields__})
    ev = replace(evidence_of(runs, config, NOW), paired_goodput={"production": pairs})
    got = {c.criterion: c for c in judge(ev, config).criteria}["C6"]
    assert got.status == "fail", got.reason
    assert got.reason.startswith(
        f"by 5 interleaved pairs of fresh runs ({record.comparison_id}): goodput ratio"
    )
    assert (
        "at 95.00 % (Student t across the pairs' log-ratios of each run's goodput within the SLOs)"
        in got.reason
    )
    assert "beside them, the single runs: SLOs TTFT <= 1000 ms at 5 clients" in got.reason
    assert (got.value, got.ci_low, got.ci_high) == (record.ratio, record.low, record.high)

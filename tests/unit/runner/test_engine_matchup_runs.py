"""The decision's match-ups by interleaved runs, without a server: which configured
runs make each match-up's sides, what each run sends, and the comparison by pairs over the stand-in
engine."""

from __future__ import annotations

import pytest
from support.pair_standin import PairStandIn

from strix_pipeline.config import DEFAULT_CONFIG
from strix_pipeline.config_load import load_config
from strix_pipeline.runner.engine_comparison import (
    METRICS,
    compare_engines,
    engine_records,
    engine_sides,
    pair_spec,
)


@pytest.fixture
def config():
    return load_config(DEFAULT_CONFIG)


def test_each_pair_is_two_configured_runs_of_the_decision_host(config) -> None:
    prod = engine_sides(config, "production")
    eq = engine_sides(config, "equal_weights")
    assert not isinstance(prod, str) and not isinstance(eq, str)
    assert (prod.baseline.engine, prod.baseline.model) == ("llamacpp", "gemma3-270m")
    assert (prod.candidate.engine, prod.candidate.model) == ("vllm", "gemma3-270m-bf16")
    # the same candidate; the baseline serving the candidate's own weights (BF16)
    assert (eq.baseline.model, eq.candidate) == ("gemma3-270m-bf16-gguf", prod.candidate)
    assert prod.engines == "llamacpp vs vllm" and prod.baseline.image is None  # the installed builds
    assert prod.release(prod.candidate, config).tag == "vllm v0.32.0 gemma3-270m-bf16"


def test_without_such_runs_the_pair_says_why(config) -> None:
    runs = {"local": [r for r in config.runs["local"] if r.model != "gemma3-270m-bf16-gguf"]}
    no_gguf = config.model_copy(update={"runs": runs})
    assert engine_sides(no_gguf, "equal_weights") == (
        "host local runs no llamacpp with the candidate's weights (gemma3-270m, BF16)"
    )
    assert not isinstance(engine_sides(no_gguf, "production"), str)
    box = config.model_copy(update={"decision": config.decision.model_copy(update={"host": "strix-halo"})})
    assert engine_sides(box, "production") == (
        "host strix-halo is not a local host: engines are compared by pairs on a local host only"
    )


def test_a_run_sends_the_decisions_level_of_the_baselines_profile_and_nothing_else(config) -> None:
    sides = engine_sides(config, "production")
    spec = pair_spec(config, sides)
    sweep = config.profiles["quick"].concurrency_sweep
    assert (spec.ttft_clients, spec.ttft_requests) == (config.decision.concurrency, 20)
    assert (spec.ttft_input_tokens, spec.ttft_output_tokens) == (sweep.input_tokens, sweep.output_tokens)
    profile = spec.profile()
    assert profile.scenarios == ["smoke", "concurrency_sweep"]  # no prefill, no decode
    assert profile.concurrency_sweep.levels == [5] and profile.concurrency_sweep.warmup == 0


def test_a_candidate_three_times_as_fast_is_different_by_pairs_and_stored_with_its_pair(config) -> None:
    sides = engine_sides(config, "production")
    a, b = sides.release(sides.baseline, config), sides.release(sides.candidate, config)
    engines = PairStandIn(a_tag=a.tag, b_tag=b.tag, factor=3.5, cv=0.03, seed=5)
    result = compare_engines(config, sides, engines, seed=11, progress=lambda _: None)
    p95 = {m.metric: m for m in result.metrics}["ttft_p95_ms"]
    assert (p95.release_a, p95.release_b, p95.verdict, p95.pairs) == (a.tag, b.tag, "different", 3)
    assert p95.ratio == pytest.approx(1 / 3.5, rel=0.05) and p95.high < 1.0
    assert {m.metric for m in result.metrics} == set(METRICS)
    # AB / BA, a fresh "server" per run: three pairs, six starts, both sides three times
    assert sorted(c.split()[0] for c in engines.calls) == ["llamacpp"] * 3 + ["vllm"] * 3
    rows, runs = engine_records(result, "production")
    assert {r.matchup for r in rows} == {"production"} and len(runs) == 6
    assert rows[0].engine == "llamacpp vs vllm"

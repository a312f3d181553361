"""C5 at the same context: the held figures of two engines whose KV caches hold the
same tokens decide, and the reason gives each engine's weights / KV / other and the production pool."""

from __future__ import annotations

from datetime import timedelta

import pytest
from support.decision_seed import GIB, SEPT, held_facts, make_config

from strix_pipeline.analysis.decision import Evidence, RunFacts, memory_not_above_llamacpp

MIB = 1024**2


def candidate(held_gib: float, kv_tokens: int = 16_384) -> RunFacts:
    return held_facts(
        "cand",
        "vllm",
        held_gib,
        image_version="v0.11.0",
        launch_command="vllm serve /models/q",
        weights_bytes=int(1.0 * GIB),
        kv_cache_bytes=600 * MIB,
        kv_capacity_tokens=kv_tokens,
        production_pool_bytes=2 * GIB,
    )


def baseline() -> RunFacts:
    return held_facts(
        "base",
        "llamacpp",
        4.0,
        image_version="b6000",
        launch_command="llama-server -m /models/q.gguf",
        kv_capacity_tokens=16_384,  # -c; llama-server's log at the default verbosity gives no buffers
    )


def c5(cand: RunFacts):
    ev = Evidence(now=SEPT, window_start=SEPT - timedelta(days=1), runs=(cand, baseline()))
    return memory_not_above_llamacpp(ev, make_config())


@pytest.mark.parametrize(("held", "status"), [(3.5, "pass"), (5.5, "fail")])
def test_c5_decides_on_what_each_engine_holds_at_the_same_context(held: float, status: str) -> None:
    result = c5(candidate(held))
    assert result.status == status, result.reason
    other = held - 1.0 - 600 / 1024
    assert (
        f"held after load {held:.1f} GiB (v0.11.0) (weights 1.00 GiB / KV 0.59 GiB / other {other:.2f} GiB, "
        "KV for 16,384 tokens)" in result.reason
    ), result.reason
    assert "llamacpp 4.0 GiB (b6000) (KV for 16,384 tokens); at the same context" in result.reason
    assert "production's pool as configured: 2.00 GiB" in result.reason


def test_two_kv_caches_of_different_capacity_are_named_a_configurations_difference() -> None:
    result = c5(candidate(3.5, kv_tokens=110_733))  # a pool sized by a fraction, not by the context
    assert "not at the same context (110,733 vs 16,384 KV tokens)" in result.reason, result.reason


def test_a_run_whose_log_gave_nothing_has_no_breakdown() -> None:
    bare = held_facts("cand", "vllm", 3.5, image_version="v0.11.0", launch_command="vllm serve /models/q")
    result = c5(bare)
    assert result.status == "pass" and "(weights" not in result.reason and "same context" not in result.reason

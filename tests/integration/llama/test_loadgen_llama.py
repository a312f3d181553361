"""The load generator against the real embedded llama-server (Gemma 3 270M): the issue's done-when.

- output tokens the client counted == delta of the server's ``llamacpp:tokens_predicted_total``;
- every TTFT >= the server-reported ``timings.prompt_ms``;
- each level has the requested number of successful requests.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from conftest import need
from support.prometheus import parse_prometheus, sample_value

from strix_pipeline.config import SLO, ScenarioProfile
from strix_pipeline.loadgen import SuiteResult, run_suite_sync

pytestmark = [pytest.mark.llama, pytest.mark.slow]

# Small: the embedded llama-server on a shared 2-core machine manages a few tokens per second.
PROFILE = ScenarioProfile.model_validate(
    {
        # the timed scenarios; the evaluation set has its own test (test_quality_llama.py)
        "scenarios": ["smoke", "concurrency_sweep", "prefill_ladder", "decode", "prefix_cache"],
        "request_timeout_s": 120,
        "seed": 7,
        "smoke": {"output_tokens": 8},
        "concurrency_sweep": {
            "levels": [1, 2],
            "requests_per_level": 2,
            "warmup": 1,
            "input_tokens": 64,
            "output_tokens": 4,
        },
        "prefill_ladder": {"input_tokens": [64, 256], "requests_per_level": 1, "output_tokens": 2},
        "decode": {"requests": 1, "output_tokens": 8, "input_tokens": 32},
        "prefix_cache": {"prefix_tokens": 512, "suffix_tokens": 8, "output_tokens": 2, "repeats": 1},
    }
)


def predicted_total(metrics_url: str) -> float:
    r = httpx.get(metrics_url, timeout=10)
    r.raise_for_status()
    v = sample_value(parse_prometheus(r.text), "llamacpp:tokens_predicted_total")
    assert v is not None, "llama-server must run with --metrics"
    return v


@pytest.fixture(scope="module")
def llama(request: pytest.FixtureRequest) -> Any:
    """The session's real llama-server (tests/conftest.py ``llama_server``: .base_url, .model,
    .metrics_url)."""
    try:
        return request.getfixturevalue("llama_server")
    except pytest.FixtureLookupError:
        need(
            False,
            "the llama_server fixture",
            "tests/conftest.py provides it with strix_pipeline.hosts.local.llama_server",
        )


@pytest.fixture(scope="module")
def suite(llama: Any) -> tuple[SuiteResult, float]:
    llama_server = llama
    before = predicted_total(llama_server.metrics_url)
    res = run_suite_sync(
        llama_server.base_url,
        llama_server.model,
        PROFILE,
        SLO(),
        "llama-test",
        metrics_url=llama_server.metrics_url,
    )
    after = predicted_total(llama_server.metrics_url)
    return res, after - before


def test_client_tokens_equal_server_counter(suite: tuple[SuiteResult, float]) -> None:
    res, delta = suite
    assert res.requests and all(r.ok for r in res.requests), [
        r.error_message for r in res.requests if not r.ok
    ]
    assert not any(r.output_tokens_estimated for r in res.requests)
    assert sum(r.output_tokens or 0 for r in res.requests) == delta
    # ignore_eos: every non-smoke request produced exactly what it asked for.
    sweep = [r for r in res.requests if r.scenario == "concurrency_sweep"]
    assert {r.output_tokens for r in sweep} == {4}


def test_ttft_at_least_server_prompt_time(suite: tuple[SuiteResult, float]) -> None:
    res, _ = suite
    checked = 0
    for r in res.requests:
        timings = json.loads(r.server_timings or "null")
        assert timings is not None, f"{r.scenario}/{r.prompt_id}: llama-server sent no timings"
        assert r.ttft_ms is not None and r.ttft_ms >= timings["prompt_ms"], (r.scenario, r.ttft_ms, timings)
        checked += 1
    assert checked == len(res.requests) >= 12


def test_each_level_has_the_requested_successes(suite: tuple[SuiteResult, float]) -> None:
    res, _ = suite
    want = {
        ("smoke", 1): 2,
        ("concurrency_sweep", 1): 2,
        ("concurrency_sweep", 2): 2,
        ("prefill_ladder", 64): 1,
        ("prefill_ladder", 256): 1,
        ("decode", 1): 1,
        ("prefix_cache", 0): 1,
        ("prefix_cache", 1): 1,
    }
    got = {(a.scenario, a.level): a.requests_ok for a in res.aggregates}
    assert got == want
    assert all(a.requests_failed == 0 for a in res.aggregates)
    assert res.smoke_ok is True, res.errors


def test_exact_lengths_and_server_view(suite: tuple[SuiteResult, float]) -> None:
    res, _ = suite
    # Raw prompts through the server's own tokenizer: usage.prompt_tokens is the target (+ BOS at most).
    for r in (r for r in res.requests if r.scenario == "prefill_ladder"):
        assert r.input_tokens is not None and 0 <= r.input_tokens - r.level <= 2, (r.level, r.input_tokens)
    names = {m.name for m in res.server_metrics}
    assert "llamacpp:tokens_predicted_total" in names and "llamacpp:prompt_tokens_total" in names
    # The warm half of the prefix pairs reused the cached prefix.
    warm = next(a for a in res.aggregates if a.scenario == "prefix_cache" and a.level == 1)
    # (Gemma 3 is a sliding-window model: llama-server reused nothing from a 256-token prefix, all of 512.)
    assert warm.cached_tokens_mean is not None and warm.cached_tokens_mean >= 256

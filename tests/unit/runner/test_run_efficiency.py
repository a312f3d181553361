"""A run's decode efficiency: the figure from its stored inputs, in (0, 1], or the reason there is none."""

from __future__ import annotations

import pytest
from support.warehouse import make_run

from strix_pipeline.memory.bandwidth import BandwidthProbe
from strix_pipeline.memory.bytes_per_token import ModelBytes
from strix_pipeline.records import LevelAggregate
from strix_pipeline.runner.efficiency import record_efficiency, single_client_decode

PROBE = BandwidthProbe(bytes_per_s=30e9, threads=1, buffer_bytes=256 << 20, repeats=5, method="copy")
MODEL = ModelBytes(weight_bytes=250_000_000, kv_bytes_per_token=18_432, source="test.gguf")


def result_with(*aggs: LevelAggregate):
    result = make_run("eff")
    result.aggregates = list(aggs)
    return result


def agg(scenario: str, level: int, **kw) -> LevelAggregate:
    return LevelAggregate(
        run_id="eff",
        scenario=scenario,
        level=level,
        level_kind="concurrency",
        requests_ok=4,
        requests_failed=0,
        duration_s=1.0,
        **kw,
    )


def test_the_figure_is_decode_speed_times_bytes_per_token_over_bandwidth() -> None:
    result = result_with(
        agg("concurrency_sweep", 1, tpot_mean_ms=50.0, input_tokens_mean=100.0, output_tokens_total=4 * 64),
        agg("decode", 1, decode_tokens_per_s=40.0, input_tokens_mean=200.0, output_tokens_total=4 * 128),
    )
    record_efficiency(result, PROBE, MODEL, None)
    run = result.run
    # the decode scenario wins over the sweep; context = its prompt + half its mean output
    assert run.decode_tok_s == 40.0 and run.decode_context_tokens == 200.0 + 64.0
    expected = 40.0 * (250_000_000 + 18_432 * 264.0) / 30e9
    assert run.decode_efficiency == pytest.approx(expected) and 0 < run.decode_efficiency <= 1
    assert run.efficiency_problem is None
    assert (
        run.bandwidth_bytes_per_s,
        run.bandwidth_threads,
        run.model_weight_bytes,
        run.kv_bytes_per_token,
    ) == (30e9, 1, 250_000_000, 18_432)


def test_without_the_decode_scenario_the_sweeps_first_level_gives_the_speed() -> None:
    result = result_with(
        agg("concurrency_sweep", 1, tpot_mean_ms=50.0, input_tokens_mean=100.0, output_tokens_total=8)
    )
    assert single_client_decode(result)[1] == 20.0
    record_efficiency(result, PROBE, MODEL, None)
    assert result.run.decode_efficiency == pytest.approx(20.0 * (250e6 + 18_432 * 101.0) / 30e9)


def test_above_one_is_not_stored_as_a_value_and_says_why() -> None:
    result = result_with(
        agg("decode", 1, decode_tokens_per_s=500.0, input_tokens_mean=10.0, output_tokens_total=40)
    )
    record_efficiency(result, PROBE, MODEL, None)
    assert result.run.decode_efficiency is None
    assert result.run.efficiency_problem.startswith("above 1 (4.17")
    assert result.run.decode_tok_s == 500.0  # the inputs stay, so the reader can see which one is off


def test_missing_inputs_are_named() -> None:
    result = result_with(agg("concurrency_sweep", 2, tpot_mean_ms=50.0))
    record_efficiency(result, PROBE, MODEL, None)
    assert (
        result.run.efficiency_problem
        == "no single-client decode speed measured (decode or concurrency_sweep level 1)"
    )
    result = result_with(agg("decode", 1, decode_tokens_per_s=40.0, output_tokens_total=8))
    record_efficiency(result, None, None, "model bytes unknown: x.gguf: not a GGUF file")
    assert result.run.decode_efficiency is None
    assert result.run.efficiency_problem == "model bytes unknown: x.gguf: not a GGUF file; no bandwidth probe"


def test_a_docker_hosts_run_keeps_its_decode_speed_and_says_why_there_is_no_figure() -> None:
    from strix_pipeline.runner.efficiency import DOCKER_HOST_EFFICIENCY

    result = result_with(agg("decode", 1, decode_tokens_per_s=40.0, output_tokens_total=8))
    record_efficiency(result, None, None, DOCKER_HOST_EFFICIENCY)
    assert result.run.decode_tok_s == 40.0 and result.run.decode_efficiency is None
    problem = result.run.efficiency_problem
    assert problem.startswith("not measured on a Docker host without efficiency_probe_image: "), problem
    assert problem.endswith("; no bandwidth probe")

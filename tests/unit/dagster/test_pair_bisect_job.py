"""An end-to-end bisection by pairs through Dagster over a stand-in engine with
a known 5 % step at a known release and noise drawn from the CV measured on this project's machines
(benchmarks/data/precision_aa_avx512.json) names that release.

Everything is the pipeline's own but the engine: ``pair_bisect_job`` as the UI launches it, the
releases between the brackets read from the warehouse's images, the comparisons by pairs, the
search, and what it stores (bisections, bisection_steps, comparisons)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from support.pair_standin import PairStandIn
from support.pipeline_helpers import write_config
from support.warehouse import local_release

from assets.resources import PairRunnerResource, StrixConfigResource, WarehouseResource
from strix_dagster.definitions import build_definitions
from strix_dagster.pair_bisect_job import pair_bisect_job
from strix_pipeline.config_load import load_config
from strix_pipeline.runner.pair_bisect import STEP_KEY_PREFIX
from strix_pipeline.warehouse import Warehouse

T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
FIRST, LAST = 100, 116  # the brackets; 101..115 lie between, never benchmarked
MEASURED = Path(__file__).parents[3] / "benchmarks" / "data" / "precision_aa_avx512.json"


def measured_cv(metric: str) -> float:
    return next(f["cv"] for f in json.loads(MEASURED.read_text())["figures"] if f["metric"] == metric)


class StandInRunner(PairRunnerResource):
    """Releases from ``first_slow`` on run 5 % slower; each run's figure drawn at ``cv``."""

    first_slow: int
    cv: float
    seed: int = 0

    def run_one(self, config, log_dir, progress):
        slow = frozenset(f"b{n}" for n in range(self.first_slow, LAST + 1))
        return PairStandIn(factor=0.95, cv=self.cv, seed=self.seed, changed=slow)


@pytest.fixture
def setup(tmp_path):
    path = write_config(tmp_path)
    config = load_config(path)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([local_release(n, T0) for n in range(FIRST, LAST + 1)])
    return config, path


def launch(path: Path, runner: PairRunnerResource, **op_config) -> dg.ExecuteInProcessResult:
    return pair_bisect_job.execute_in_process(
        run_config={
            "ops": {"pair_bisection": {"config": {"before": f"b{FIRST}", "after": f"b{LAST}", **op_config}}}
        },
        resources={
            "strix": StrixConfigResource(config_path=str(path)),
            "warehouse": WarehouseResource(config_path=str(path)),
            "pair_runner": runner,
        },
    )


@pytest.mark.parametrize("first_slow", [104, 111])
def test_the_job_names_the_release_of_a_5_percent_step_at_the_measured_noise(setup, first_slow):
    config, path = setup
    cv = measured_cv("prefill_tokens_per_s")
    result = launch(
        path, StandInRunner(first_slow=first_slow, cv=cv, seed=first_slow), metric="prefill_tokens_per_s"
    )
    assert result.success
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (b,) = wh.list_bisections()
        steps = wh.bisection_steps(b.bisection_id)
        stored = {c.comparison_id for c in wh.list_comparisons()}
        pairs_of = {(c.release_a, c.release_b) for c in wh.list_comparisons()}
    assert (b.status, b.first_release, b.last_without) == ("found", f"b{first_slow}", f"b{first_slow - 1}"), (
        b.reason
    )
    assert len(json.loads(b.candidates)) == LAST - FIRST - 1  # the releases between, from the images
    # each step's two comparisons are in the warehouse, beside the brackets', the named release's
    # against its predecessor and the rest of the range's (no second step there)
    named = {cid for s in steps for cid in s.partition_key.removeprefix(STEP_KEY_PREFIX).split(",")}
    assert named < stored and len(named) == 2 * len(steps) and len(stored) == len(named) + 3
    assert {(f"b{FIRST}", f"b{LAST}"), (f"b{first_slow - 1}", f"b{first_slow}")} <= pairs_of
    meta = result.output_for_node("pair_bisection")
    assert meta == b.bisection_id


def test_the_job_is_in_the_definitions_with_llama_server_as_its_runner(setup):
    config, path = setup
    defs = build_definitions(config, str(path))
    job = defs.resolve_job_def("pair_bisect_job")
    assert job.name == "pair_bisect_job"
    assert type(defs.resources["pair_runner"]) is PairRunnerResource  # the real engines, not a stand-in


def test_a_bracket_the_warehouse_does_not_know_fails_naming_it(setup):
    _, path = setup
    result = pair_bisect_job.execute_in_process(
        run_config={"ops": {"pair_bisection": {"config": {"before": "b100", "after": "b999"}}}},
        resources={
            "strix": StrixConfigResource(config_path=str(path)),
            "warehouse": WarehouseResource(config_path=str(path)),
            "pair_runner": StandInRunner(first_slow=104, cv=0.01),
        },
        raise_on_error=False,
    )
    assert not result.success
    failure = result.failure_data_for_node("pair_bisection")
    assert "b999" in str(failure.user_failure_data.description if failure.user_failure_data else failure)

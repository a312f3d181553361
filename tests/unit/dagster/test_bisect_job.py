"""A confirmed change is bisected through Dagster to the first release that shows it, by runs (the
method a Box's images are bisected by; ``[analysis] bisect_by = "runs"`` makes host local's go that way
too: the way by pairs is tests/unit/dagster/test_bisect_sensor_pairs.py).

Everything is the pipeline's own but the engine (support/versioned_standin.py): the benchmark asset
run as ``benchmark_job`` and ``bisect_job`` partitions, the spool and warehouse, the ``regressions``
asset that detects the change, starts its bisection and decides each step, and ``bisect_sensor``
that requests the next step. 15 releases lie between the brackets, so the search may take at most
ceil(log2 15) + 1 = 5 runs.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime

import dagster as dg
import pytest
from support.notify import Receiver
from support.pipeline_helpers import write_config
from support.versioned_standin import VersionedStandIn
from support.warehouse import local_release

from assets.analysis import switch_decision
from assets.partitions import image_versions
from assets.resources import StrixConfigResource, WarehouseResource
from strix_dagster.bisect_run import run_bisection
from strix_dagster.definitions import build_definitions
from strix_pipeline.analysis.bisect.steps import BISECT_TAG
from strix_pipeline.cli import main as strix_main
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.records import ImageRecord
from strix_pipeline.warehouse import Warehouse

FIRST, LAST = 100, 116  # the brackets; 101..115 lie between, never benchmarked
T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)


def release(n: int) -> ImageRecord:
    return local_release(n, T0)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    path = write_config(tmp_path)
    (tmp_path / "analysis.toml").write_text("")
    text = path.read_text() + '\n[analysis]\nbisect_max_runs = 6\nbisect_by = "runs"\ncanary = "none"\n'
    path.write_text(text)
    config = load_config(path)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([release(n) for n in range(FIRST, LAST + 1)])
    defs = build_definitions(config, str(path))
    with dg.instance_for_test() as instance:
        yield config, path, defs, instance


def bench(defs, instance, config, standin, n: int, job: str = "benchmark_job", tags=None) -> None:
    key = partition_key("llamacpp", release(n))
    if not instance.has_dynamic_partition(image_versions.name, key):
        instance.add_dynamic_partitions(image_versions.name, [key])
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, partition_key=key, raise_on_error=True, tags=tags
    )
    assert result.success


def regressions_asset(defs, instance) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def("analysis_job").execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey("run_aggregates"), dg.AssetKey("regressions")]
    )


def seed_brackets(defs, instance, config, standin) -> None:
    for n in (FIRST, FIRST, FIRST, LAST, LAST, LAST):
        bench(defs, instance, config, standin, n)
    assert regressions_asset(defs, instance).success


def only_bisection(config):
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        (b,) = wh.list_bisections()
        return b, wh.bisection_steps(b.bisection_id)


def test_bisection_through_the_sensor_finds_the_first_slow_release(setup, monkeypatch, capsys) -> None:
    config, path, defs, instance = setup
    standin = VersionedStandIn(first_slow=109)
    monkeypatch.setattr("assets.benchmark.run_benchmark", standin)
    seed_brackets(defs, instance, config, standin)
    b, steps = only_bisection(config)
    assert (b.version_before, b.version_after, b.status, steps) == ("b100", "b116", "running", [])
    sensor = defs.get_sensor_def("bisect_sensor")
    strix = StrixConfigResource(config_path=str(path))
    warehouse = WarehouseResource(config_path=str(path))
    runs = 0
    while b.status == "running":
        ctx = dg.build_sensor_context(instance=instance, resources={"strix": strix, "warehouse": warehouse})
        result = sensor(ctx)
        (request,) = result.run_requests
        assert request.partition_key == b.next_key and request.tags[BISECT_TAG] == b.bisection_id
        n = int(b.next_key.split(":")[1].split("@")[0].removeprefix("b"))
        bench(defs, instance, config, standin, n, job="bisect_job", tags=request.tags)
        runs += 1
        assert regressions_asset(defs, instance).success  # the regressions asset decides the step
        b, steps = only_bisection(config)
        assert len(steps) == runs
    assert b.status == "found", b.reason
    assert (b.first_release, b.last_without) == ("b109", "b108")
    # the result gives the two releases' figures with their intervals
    assert re.search(r"b108 \d[\d.]* \[[\d.]+, [\d.]+\]; b109 \d[\d.]* \[[\d.]+, [\d.]+\]", b.reason), (
        b.reason
    )
    assert runs == b.runs_used <= math.ceil(math.log2(LAST - FIRST - 1)) + 1
    assert standin.calls.count("b109") + standin.calls.count("b108") >= 1
    for s in steps:  # each step's side is what its figure says
        n = int(s.version.removeprefix("b"))
        assert s.side == ("after" if n >= 109 else "before"), s
        assert s.low < s.value < s.high
    # the bisection's runs are probes: the change stays where it was found, between the brackets
    with Warehouse.open(config.warehouse_path(), read_only=True) as wh:
        changes = [c for c in wh.list_changes() if c.metric == "ttft_p95_ms" and c.level == 5]
    assert [(c.version_before, c.version_after) for c in changes] == [("b100", "b116")]
    # what a person sees: strix changes names the first release and every step
    monkeypatch.setenv("COLUMNS", "400")
    assert strix_main(["--config", str(path), "changes"]) == 0
    out = capsys.readouterr().out
    assert "first release: b109 (not b108)" in out and "b109: " in out and "-> after" in out
    assert strix_main(["--config", str(path), "changes", "--json"]) == 0
    (listed,) = [c for c in json.loads(capsys.readouterr().out) if c["change_id"] == b.change_id]
    assert listed["bisection"]["first_release"] == "b109" and len(listed["bisection"]["steps"]) == runs
    # and the asset's own metadata
    mat = instance.get_latest_materialization_event(dg.AssetKey("regressions")).asset_materialization
    assert "first release: b109" in str(mat.metadata["changes"].value)
    assert "1. b" in mat.metadata["bisections"].value and "**found**" in mat.metadata["bisections"].value
    # and the alert carries it: the evaluation after the bisection names the first slow release
    receiver = Receiver()
    try:
        monkeypatch.setenv(config.decision.webhook_url_env, receiver.url)
        switch_decision(strix=strix, warehouse=warehouse)
    finally:
        receiver.close()
    (alert,) = [b["text"] for b in receiver.bodies if "confirmed regression" in b["text"]]
    assert "from b100 to b116" in alert and "first release that shows it: b109 (not b108" in alert, alert


def test_overlapping_sides_stop_the_bisection_inconclusive(setup, monkeypatch) -> None:
    config, path, defs, instance = setup
    standin = VersionedStandIn(first_slow=109, murky=set(range(101, 116)))
    monkeypatch.setattr("assets.benchmark.run_benchmark", standin)
    seed_brackets(defs, instance, config, standin)
    b, _ = only_bisection(config)
    b, runs = run_bisection(defs, instance, config, b.bisection_id, log=lambda _: None)
    assert b.status == "inconclusive" and "overlaps both" in b.reason, b.reason
    assert len(runs) == b.runs_used == 1  # it stops at the first murky step, saying so
    _, steps = only_bisection(config)
    assert [s.side for s in steps] == ["inconclusive"]

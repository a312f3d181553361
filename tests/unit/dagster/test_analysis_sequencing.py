"""Done when: the weekly tick's analysis runs after its benchmarks, not beside them.

The schedule's tick is evaluated as the daemon does; its run requests are turned into started runs (each
records its planned materialisations, as a launched run does; a second run on one host waits inside its run
for the host's pool slot), then finished one by one. The analysis automation condition is evaluated between
the steps, carrying its cursor like the `analysis_automation` sensor: nothing is requested while any of the
tick's benchmarks is still running (or waiting for its host's pool), and the whole analysis is requested once,
when the last one has landed.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from support.pipeline_helpers import resources_for, vllm_image, write_config

from assets.analysis import EAGER
from schedules import ANALYSIS_KEYS
from strix_dagster.definitions import build_definitions
from strix_pipeline import image_scan
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.registry.discovery import DiscoveryReport
from strix_pipeline.warehouse import Warehouse

ANALYSIS = [dg.AssetKey(k) for k in ANALYSIS_KEYS]
AUTOMATED = dg.AssetSelection.assets(*ANALYSIS)
TICK = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)  # Monday 03:00 in Berlin


@pytest.fixture
def box_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hosts `local` (llama-server) and `box` (docker, vllm) with two current vLLM images; no registry."""
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"a llama-server build")  # the local baseline's "image" is this file's digest
    monkeypatch.setenv("STRIX_LLAMA_SERVER", str(binary))
    monkeypatch.setattr(image_scan, "refresh_images", lambda *a, **k: DiscoveryReport())
    path = write_config(tmp_path, box=True, schedule="0 3 * * 1", timezone="Europe/Berlin")
    config = load_config(path)
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([vllm_image("v0.26.0", "b"), vllm_image("latest", "c", floating=True)])
    return path


def _launch(instance: dg.DagsterInstance, defs: dg.Definitions, request: dg.RunRequest) -> dg.DagsterRun:
    """What the daemon makes of a run request: a started run with its planned materialisations."""
    job = defs.resolve_implicit_global_asset_job_def()
    tags = dict(request.tags)
    if request.partition_key:
        tags["dagster/partition"] = request.partition_key
    return instance.create_run_for_job(
        job_def=job,
        asset_selection=frozenset(request.asset_selection or []),
        tags=tags,
        status=dg.DagsterRunStatus.STARTED,
    )


def _finish(instance: dg.DagsterInstance, defs: dg.Definitions, run: dg.DagsterRun) -> None:
    """The run materialises what it planned, upstream first (the benchmarks: its partition), and succeeds."""
    graph = defs.resolve_asset_graph()
    for key in graph.toposorted_asset_keys:
        if key not in (run.asset_selection or ()):
            continue
        partition = run.tags.get("dagster/partition") if graph.get(key).is_partitioned else None
        materialization = dg.AssetMaterialization(asset_key=key, partition=partition)
        instance.report_dagster_event(
            DagsterEvent(
                DagsterEventType.ASSET_MATERIALIZATION.value,
                job_name=run.job_name,
                event_specific_data=StepMaterializationData(materialization),
            ),
            run_id=run.run_id,
        )
    instance.report_dagster_event(
        DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name), run_id=run.run_id
    )
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.SUCCESS


class Automation:
    """Evaluates the analysis assets' automation conditions tick by tick, cursor carried forward."""

    def __init__(self, instance: dg.DagsterInstance, defs: dg.Definitions) -> None:
        self.instance, self.defs, self.cursor = instance, defs, None

    def requested(self) -> set[dg.AssetKey]:
        result = dg.evaluate_automation_conditions(
            defs=self.defs, instance=self.instance, asset_selection=AUTOMATED, cursor=self.cursor
        )
        self.cursor = result.cursor
        return {k for k in ANALYSIS if result.get_num_requested(k)}


def test_the_analysis_carries_the_automation_condition_and_its_sensor_runs(box_config: Path) -> None:
    defs = build_definitions(load_config(box_config), str(box_config))
    graph = defs.resolve_asset_graph()
    # the week's comparisons by pairs follow new results too, outside analysis_job (they start engines)
    automated = [
        *ANALYSIS,
        *(dg.AssetKey(k) for k in ("release_comparisons", "canary_comparison", "engine_comparison")),
    ]
    for key in automated:
        assert graph.get(key).automation_condition == EAGER, key.to_user_string()
    sensor = defs.resolve_sensor_def("analysis_automation")
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    # it materialises the comparisons by pairs, which start engines: off until the user turns it on
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert sensor.asset_selection.resolve(graph) == set(automated)
    # the schedule's target holds the refresh and the benchmarks only: it cannot ask for the analysis
    schedule = defs.resolve_schedule_def("weekly_benchmark")
    assert defs.resolve_job_def(schedule.job_name).asset_layer.selected_asset_keys == {
        dg.AssetKey("engine_images"),
        dg.AssetKey("benchmark_run_local"),
        dg.AssetKey("benchmark_run_box"),
    }


def test_weekly_tick_analysis_runs_after_its_benchmarks_not_beside_them(box_config: Path) -> None:
    defs = build_definitions(load_config(box_config), str(box_config))
    schedule = defs.resolve_schedule_def("weekly_benchmark")
    with dg.instance_for_test() as instance:
        automation = Automation(instance, defs)
        # last week's analysis exists and the automation sensor has looked once: nothing to do
        for key in ANALYSIS:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key))
        assert automation.requested() == set()

        ctx = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=TICK,
            resources=resources_for(box_config),
            repository_def=defs.get_repository_def(),
        )
        requests = list(schedule.evaluate_tick(ctx).run_requests or [])
        # the tick asks for the refresh and the benchmarks, and for no analysis asset
        assert not [r for r in requests if set(ANALYSIS) & set(r.asset_selection or [])]
        bench = [r for r in requests if r.partition_key]
        assert {k for r in bench for k in r.asset_selection} == {
            dg.AssetKey("benchmark_run_local"),
            dg.AssetKey("benchmark_run_box"),
        }
        assert len(bench) == 3  # the local baseline and two vLLM images on the Box (a pool of 1)

        runs = {r.run_key: _launch(instance, defs, r) for r in requests}
        refresh = runs.pop(f"weekly-{TICK:%Y-%m-%d}-refresh")
        local = next(runs[r.run_key] for r in bench if r.tags["strix/host"] == "local")
        box = [runs[r.run_key] for r in bench if r.tags["strix/host"] == "box"]

        assert automation.requested() == set()  # every benchmark still running
        _finish(instance, defs, refresh)
        _finish(instance, defs, local)
        assert automation.requested() == set()  # the local baseline landed, both Box runs still running
        _finish(instance, defs, box[0])
        assert automation.requested() == set()  # one Box run still waits for the host's pool
        _finish(instance, defs, box[1])
        # the last benchmark of the tick landed: the whole analysis, once
        assert automation.requested() == set(ANALYSIS)
        assert automation.requested() == set()


@contextmanager
def _analysed_once_with_a_new_partition(box_config: Path):
    """An instance where the analysis is up to date and a new image version has just been added:
    (instance, defs, automation, its partition key); the automation requests nothing yet."""
    defs = build_definitions(load_config(box_config), str(box_config))
    with dg.instance_for_test() as instance:
        automation = Automation(instance, defs)
        for key in ANALYSIS:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key))
        assert automation.requested() == set()
        image = vllm_image("v0.26.0", "b")
        key = partition_key(image.engine, image)
        instance.add_dynamic_partitions("image_versions", [key])
        yield instance, defs, automation, key


def test_a_single_benchmark_is_followed_by_the_analysis(box_config: Path) -> None:
    """The new-image sensor's run for one digest: the analysis follows it too (and not before it ends)."""
    with _analysed_once_with_a_new_partition(box_config) as (instance, defs, automation, key):
        run = _launch(
            instance,
            defs,
            dg.RunRequest(partition_key=key, asset_selection=[dg.AssetKey("benchmark_run_box")]),
        )
        assert automation.requested() == set()
        _finish(instance, defs, run)
        assert automation.requested() == set(ANALYSIS)


def test_a_run_of_the_whole_graph_is_not_followed_by_a_second_analysis(box_config: Path) -> None:
    """`strix run` (main_job) materialises the benchmark and the analysis in one run: nothing follows."""
    with _analysed_once_with_a_new_partition(box_config) as (instance, defs, automation, key):
        selection = [dg.AssetKey("engine_images"), dg.AssetKey("benchmark_run_box"), *ANALYSIS]
        run = _launch(instance, defs, dg.RunRequest(partition_key=key, asset_selection=selection))
        _finish(instance, defs, run)
        assert automation.requested() == set()

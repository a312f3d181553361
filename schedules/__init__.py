"""Jobs, the new-image sensor and the weekly schedule."""

import json
from datetime import UTC, datetime

import dagster as dg

from assets.benchmark import benchmark_asset_key
from assets.partitions import image_versions
from strix_pipeline import plan
from strix_pipeline.config import StrixConfig
from strix_pipeline.discovery import refresh_images
from strix_pipeline.records import ImageRecord
from strix_pipeline.resources import RegistryResource, StrixConfigResource, WarehouseResource

ANALYSIS_KEYS = ("run_aggregates", "regressions", "trend_charts", "switch_decision")
ANALYSIS = dg.AssetSelection.assets(*ANALYSIS_KEYS)

refresh_job = dg.define_asset_job(
    "refresh_images_job",
    selection=dg.AssetSelection.assets("engine_images"),
    description="Discover engine image versions in the configured registries.",
)
analysis_job = dg.define_asset_job(
    "analysis_job",
    selection=ANALYSIS,
    description="Recompute aggregates, change points, charts and the switch decision from the warehouse.",
)


def benchmark_job_for(benchmark_keys: list[str]):
    return dg.define_asset_job(
        "benchmark_job",
        selection=dg.AssetSelection.assets(*benchmark_keys),
        partitions_def=image_versions,
        description="Benchmark one image version on its host (one engine at a time per host).",
    )


def main_job_for(benchmark_keys: list[str]):
    """What `make run` executes: the whole graph for one image version (the local baseline)."""
    return dg.define_asset_job(
        "main_job",
        selection=dg.AssetSelection.assets("engine_images", *benchmark_keys) | ANALYSIS,
        partitions_def=image_versions,
        description="Refresh images, benchmark one image version, recompute trends and the decision.",
    )


def _wanted(config: StrixConfig, images: list[ImageRecord], local: list[ImageRecord]) -> list[ImageRecord]:
    """Current images of every engine benchmarked somewhere, plus each local host's own build."""
    return [i for i in plan.current_images(config, images) if plan.runnable(config, i)] + local


def _request(
    config: StrixConfig,
    image: ImageRecord,
    run_key: str | None,
    asset_selection: list[dg.AssetKey] | None = None,
) -> dg.RunRequest:
    key = plan.partition_key(image.engine, image)
    hosts = sorted({t.host for t in plan.targets_for(config, image)})
    # Only the benchmark assets of hosts that run this image: another host's asset would fail the run.
    mine = {dg.AssetKey(benchmark_asset_key(config, h)) for h in hosts}
    return dg.RunRequest(
        run_key=run_key,
        partition_key=key,
        job_name=None if asset_selection else "benchmark_job",
        asset_selection=[k for k in asset_selection or sorted(mine) if k in mine],
        tags={"strix/host": ",".join(hosts), "strix/digest": image.digest},
    )


def build_sensor(benchmark_job, interval_s: int = 3600) -> dg.SensorDefinition:
    @dg.sensor(
        name="new_image_sensor",
        jobs=[benchmark_job],
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Looks for new image versions (a new release tag, or a floating tag at a new digest), adds "
            "them as partitions of benchmark_run and requests each digest's benchmark once (run key = digest)."
        ),
    )
    def new_image_sensor(
        context: dg.SensorEvaluationContext,
        strix: StrixConfigResource,
        warehouse: WarehouseResource,
        registry: RegistryResource,
    ) -> dg.SensorResult:
        cfg = strix.get()
        now = datetime.now(UTC)
        with warehouse.writer() as wh:
            report = refresh_images(cfg, wh, client_factory=registry.client_factory(), now=now)
            local = plan.register_local_images(cfg, wh, now)
            wanted = _wanted(cfg, wh.known_images(), local)
        seen: set[str] = set(json.loads(context.cursor)) if context.cursor else set()
        unseen = [i for i in wanted if i.digest not in seen]
        # outside a host's maintenance window an image waits (its digest stays unseen) for a later tick
        fresh = [i for i in unseen if plan.hosts_in_window(cfg, i, now)]
        for i in unseen:
            if i not in fresh:
                context.log.info(f"{plan.partition_key(i.engine, i)}: waiting for the maintenance window")
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        keys = sorted({plan.partition_key(i.engine, i) for i in fresh} - existing)
        for err in report.errors:
            context.log.warning(f"registry error {err.registry}/{err.repository}: {err.message}")
        context.update_cursor(json.dumps(sorted(seen | {i.digest for i in fresh})))
        return dg.SensorResult(
            run_requests=[_request(cfg, i, run_key=i.digest) for i in fresh],
            dynamic_partitions_requests=[image_versions.build_add_request(keys)] if keys else [],
        )

    return new_image_sensor


def build_schedule(config: StrixConfig, bench_keys: list[dg.AssetKey]) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="weekly_benchmark",
        cron_schedule=config.project.schedule,
        execution_timezone=config.project.timezone,
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=(
            "Weekly: refresh images, benchmark each engine's current images and each host's llama-server "
            "baseline, then recompute trends and the decision."
        ),
    )
    def weekly_benchmark(
        context: dg.ScheduleEvaluationContext,
        strix: StrixConfigResource,
        warehouse: WarehouseResource,
    ) -> list[dg.RunRequest]:
        cfg = strix.get()
        now = context.scheduled_execution_time or datetime.now(UTC)
        stamp = f"{now:%Y-%m-%d}"
        with warehouse.reader() as wh:
            images = wh.known_images()
        wanted = _wanted(cfg, images, [plan.local_image(e, now) for e in plan.local_engines(cfg)])
        keys = sorted({plan.partition_key(i.engine, i) for i in wanted})
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        missing = [k for k in keys if k not in existing]
        if missing:
            context.instance.add_dynamic_partitions(image_versions.name, missing)
        requests = [
            dg.RunRequest(run_key=f"weekly-{stamp}-refresh", asset_selection=[dg.AssetKey("engine_images")])
        ]
        requests += [
            _request(cfg, i, run_key=f"weekly-{stamp}-{i.digest}", asset_selection=bench_keys) for i in wanted
        ]
        requests.append(
            dg.RunRequest(
                run_key=f"weekly-{stamp}-analysis",
                asset_selection=[dg.AssetKey(k) for k in ANALYSIS_KEYS],
            )
        )
        return requests

    return weekly_benchmark

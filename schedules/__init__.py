"""Jobs, the new-image sensor and the weekly schedule.

Neither the sensor nor the schedule asks for the analysis: the analysis assets carry an automation
condition (``assets.analysis.EAGER``) that the ``analysis_automation`` sensor evaluates, so they
materialise once the benchmarks they read have landed -- never beside them.

The host is a dimension of every benchmark run: each run benchmarks one host (a version that runs on
several hosts gets one run per host) and carries the run tag ``strix/host=<host>``, which the UI's
Runs page filters by. A host's own job ``benchmark_<host>_job`` tags every run it launches the same
way, so a backfill of one host's partitions from that job (or from the host's benchmark asset) runs
only that host.
"""

import json
import re
from datetime import UTC, datetime

import dagster as dg

from assets.benchmark import benchmark_asset_key
from assets.partitions import image_versions
from assets.resources import RegistryResource, StrixConfigResource, WarehouseResource
from strix_pipeline import plan
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import ImageRecord

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


HOST_TAG = "strix/host"


def host_job_name(host: str) -> str:
    """``benchmark_<host>_job``: Dagster names allow letters, digits and underscores only."""
    return f"benchmark_{re.sub(r'[^A-Za-z0-9_]', '_', host)}_job"


def host_job_for(host: str, benchmark_key: str):
    """One host's benchmark: the launchpad and partition backfills of this job run on that host only,
    and every run carries ``strix/host=<host>`` (job tags become run tags)."""
    return dg.define_asset_job(
        host_job_name(host),
        selection=dg.AssetSelection.assets(benchmark_key),
        partitions_def=image_versions,
        tags={HOST_TAG: host},
        description=f"Benchmark image versions on host `{host}` (its pool admits one engine at a time).",
    )


def main_job_for(benchmark_keys: list[str]):
    """What `make run` executes: the whole graph for one image version (the local baseline)."""
    return dg.define_asset_job(
        "main_job",
        selection=dg.AssetSelection.assets("engine_images", *benchmark_keys) | ANALYSIS,
        partitions_def=image_versions,
        description="Refresh images, benchmark one image version, recompute trends and the decision.",
    )


def _requests(
    config: StrixConfig,
    image: ImageRecord,
    run_key: str | None,
    asset_selection: list[dg.AssetKey] | None = None,
) -> list[dg.RunRequest]:
    """One run per host that runs ``image``, each tagged with its host and holding only that host's
    benchmark asset (another host's asset would fail the run). The run key names the host only when
    the image runs on several, so a single-host image keeps the key it always had (its digest)."""
    key = plan.partition_key(image.engine, image)
    hosts = plan.hosts_of(config, image)
    requests = []
    for host in hosts:
        asset = dg.AssetKey(benchmark_asset_key(config, host))
        if asset_selection is not None and asset not in asset_selection:
            continue
        requests.append(
            dg.RunRequest(
                run_key=run_key if run_key is None or len(hosts) == 1 else f"{run_key}@{host}",
                partition_key=key,
                job_name=None if asset_selection else "benchmark_job",
                asset_selection=[asset],
                tags={HOST_TAG: host, "strix/digest": image.digest},
            )
        )
    return requests


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
            scan = plan.scan_images(cfg, wh, client_factory=registry.client_factory(), now=now)
        requested: set[str] = set(json.loads(context.cursor)) if context.cursor else set()
        # outside a host's maintenance window an image waits (its digest stays unrequested) for a later tick
        due = plan.due_images(cfg, scan.current(cfg), requested, now)
        for i in due.waiting:
            context.log.info(f"{plan.partition_key(i.engine, i)}: waiting for the maintenance window")
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        keys = [k for k in plan.partition_keys(due.now) if k not in existing]
        for err in scan.report.errors:
            context.log.warning(f"registry error {err.registry}/{err.repository}: {err.message}")
        context.update_cursor(json.dumps(sorted(due.requested)))
        return dg.SensorResult(
            run_requests=[r for i in due.now for r in _requests(cfg, i, run_key=i.digest)],
            dynamic_partitions_requests=[image_versions.build_add_request(keys)] if keys else [],
        )

    return new_image_sensor


def build_schedule(config: StrixConfig, bench_keys: list[dg.AssetKey]) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="weekly_benchmark",
        cron_schedule=config.project.schedule,
        execution_timezone=config.project.timezone,
        target=dg.AssetSelection.assets(dg.AssetKey("engine_images"), *bench_keys),
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=(
            "Weekly: refresh images, benchmark each engine's current images and each host's llama-server "
            "baseline. The trends and the decision follow once those benchmarks have landed "
            "(analysis_automation), not on this tick."
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
        wanted = plan.wanted_images(
            cfg, images, [plan.local_image(e, now, cfg) for e in plan.local_engines(cfg)]
        )
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        missing = [k for k in plan.partition_keys(wanted) if k not in existing]
        if missing:
            context.instance.add_dynamic_partitions(image_versions.name, missing)
        requests = [
            dg.RunRequest(run_key=f"weekly-{stamp}-refresh", asset_selection=[dg.AssetKey("engine_images")])
        ]
        requests += [
            r
            for i in wanted
            for r in _requests(cfg, i, run_key=f"weekly-{stamp}-{i.digest}", asset_selection=bench_keys)
        ]
        return requests

    return weekly_benchmark

"""The weekly schedule: refresh images, benchmark each engine's current images and each host's baseline."""

from datetime import UTC, datetime

import dagster as dg

from assets.partitions import image_versions
from assets.resources import StrixConfigResource, WarehouseResource
from schedules.requests import run_requests
from strix_pipeline import image_scan
from strix_pipeline.config import StrixConfig
from strix_pipeline.planning import measured as account
from strix_pipeline.planning.priority import run_priority
from strix_pipeline.planning.targets import local_engines, partition_keys
from strix_pipeline.planning.week import this_week
from strix_pipeline.warehouse.past_runs import measured_runs


def build_schedule(config: StrixConfig, bench_keys: list[dg.AssetKey]) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="weekly_benchmark",
        cron_schedule=config.project.schedule,
        execution_timezone=config.project.timezone,
        target=dg.AssetSelection.assets(dg.AssetKey("engine_images"), *bench_keys),
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=(
            "Weekly: refresh images, benchmark each engine's current images, each host's llama-server "
            "baseline and the canary (`[analysis] canary`). The trends and the decision follow once those "
            "benchmarks have landed "
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
            rows = measured_runs(wh)
        # the current images, the local builds and the canary (the same pinned build every week, so a
        # step in its series is the host's) -- the week `strix plan --week` lays out (planning.week):
        # an image every target of which already measured this week (since the schedule's latest tick,
        # the one account of what is measured, the sensor's too) is not asked again
        local = [image_scan.local_image(e, now, cfg) for e in local_engines(cfg)]
        start = account.week_start(cfg.project.schedule, now, cfg.project.timezone)
        wanted = this_week(cfg, images, local, rows, start).due(cfg)
        # the decision's runs first (the newest official candidate, then the baseline): a window too
        # short for the week defers the rest (planning.night_fit.admit_run), not these
        priority = {i.digest: run_priority(cfg, i, wanted) for i in wanted}
        wanted.sort(key=lambda i: -priority[i.digest])
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        missing = [k for k in partition_keys(wanted) if k not in existing]
        if missing:
            context.instance.add_dynamic_partitions(image_versions.name, missing)
        requests = [
            dg.RunRequest(run_key=f"weekly-{stamp}-refresh", asset_selection=[dg.AssetKey("engine_images")])
        ]
        requests += [
            r
            for i in wanted
            for r in run_requests(
                cfg,
                i,
                run_key=f"weekly-{stamp}-{i.digest}",
                asset_selection=bench_keys,
                priority=priority[i.digest],
                now=now,
            )
        ]
        return requests

    return weekly_benchmark

"""The weekly schedule: refresh images, benchmark each engine's current images and each host's baseline."""

from datetime import UTC, datetime

import dagster as dg

from assets.partitions import image_versions
from assets.resources import StrixConfigResource, WarehouseResource
from schedules.requests import run_requests
from strix_pipeline import plan, window_plan
from strix_pipeline.config import StrixConfig
from strix_pipeline.planning import measured as account
from strix_pipeline.planning.due import benchmarked
from strix_pipeline.planning.week import week_images


def build_schedule(config: StrixConfig, bench_keys: list[dg.AssetKey]) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="weekly_benchmark",
        cron_schedule=config.project.schedule,
        execution_timezone=config.project.timezone,
        target=dg.AssetSelection.assets(dg.AssetKey("engine_images"), *bench_keys),
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=(
            "Weekly: refresh images, benchmark each engine's current images, each host's llama-server "
            "baseline and the canary (`[analysis] canary`). The trends and the decision follow once those benchmarks have landed "
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
            rows = window_plan.measured_runs(wh)
        # the current images, the local builds and the canary (the same pinned build every week, so a
        # step in its series is the host's) -- the images `strix plan --week` lays out
        wanted = week_images(cfg, images, [plan.local_image(e, now, cfg) for e in plan.local_engines(cfg)])
        # the one account of what is measured (planning.measured), the sensor's too: an image every
        # target of which already measured this week (since the schedule's latest tick) is not asked again
        done = account.measured(
            rows, since=account.week_start(cfg.project.schedule, now, cfg.project.timezone)
        )
        wanted = [i for i in wanted if not benchmarked(cfg, i, done)]
        # the decision's runs first (the newest official candidate, then the baseline): a window too
        # short for the week defers the rest (window_plan.check_fits), not these
        priority = {i.digest: window_plan.run_priority(cfg, i, wanted) for i in wanted}
        wanted.sort(key=lambda i: -priority[i.digest])
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

"""The new-image sensor: new versions become partitions, each digest benchmarked once."""

import json
from datetime import UTC, datetime

import dagster as dg

from assets.partitions import image_versions
from assets.resources import RegistryResource, StrixConfigResource, WarehouseResource
from schedules.requests import run_requests
from strix_pipeline import plan, window_plan
from strix_pipeline.planning import measured as account


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
            # the one account of what is measured (planning.measured): ever, for a digest benchmarked once
            measured = account.measured(window_plan.measured_runs(wh))
        requested: set[str] = set(json.loads(context.cursor)) if context.cursor else set()
        # outside a host's maintenance window an image waits (its digest stays unrequested) for a later
        # tick; one already measured (by `strix run`, a backfill, a history) is not asked for again
        due = plan.due_images(cfg, scan.current(cfg), requested, now, measured)
        for i in due.measured:
            context.log.info(f"{plan.partition_key(i.engine, i)}: already benchmarked, not requested again")
        for i in due.waiting:
            context.log.info(f"{plan.partition_key(i.engine, i)}: waiting for the maintenance window")
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        keys = [k for k in plan.partition_keys(due.now) if k not in existing]
        for err in scan.report.errors:
            context.log.warning(f"registry error {err.registry}/{err.repository}: {err.message}")
        context.update_cursor(json.dumps(sorted(due.requested)))
        return dg.SensorResult(
            run_requests=[r for i in due.now for r in run_requests(cfg, i, run_key=i.digest)],
            dynamic_partitions_requests=[image_versions.build_add_request(keys)] if keys else [],
        )

    return new_image_sensor

"""The bisection sensor: each running bisection's next release becomes one run of ``bisect_job``."""

from datetime import UTC, datetime

import dagster as dg

from assets.benchmark import benchmark_asset_key
from assets.partitions import image_versions
from assets.resources import StrixConfigResource, WarehouseResource
from schedules.jobs import HOST_TAG
from strix_pipeline.analysis.bisect.steps import BISECT_TAG, pending_steps
from strix_pipeline.planning.due import hosts_in_window
from strix_pipeline.planning.targets import find_image


def build_bisect_sensor(bisect_job, interval_s: int = 60) -> dg.SensorDefinition:
    @dg.sensor(
        name="bisect_sensor",
        jobs=[bisect_job],
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Runs the next step of each bisection the regressions asset started: the benchmark of the "
            "release between a confirmed change's brackets that it names (run key = bisection id + step), "
            "inside the host's maintenance window, at most [analysis] bisect_max_runs per bisection."
        ),
    )
    def bisect_sensor(
        context: dg.SensorEvaluationContext, strix: StrixConfigResource, warehouse: WarehouseResource
    ) -> dg.SensorResult:
        cfg = strix.get()
        now = datetime.now(UTC)
        with warehouse.reader() as wh:
            pending = pending_steps(wh)
            images = wh.known_images()
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        requests, keys = [], []
        for b in pending:
            image = find_image([i for i in images if i.engine == b.engine], b.next_key or "")
            if image is None:
                context.log.warning(f"bisection {b.bisection_id}: no known image for {b.next_key}")
                continue
            if not hosts_in_window(cfg, image, now):
                context.log.info(f"bisection {b.bisection_id}: {b.next_key} waits for the maintenance window")
                continue
            if b.next_key not in existing:
                keys.append(b.next_key)
            requests.append(
                dg.RunRequest(
                    run_key=f"{b.bisection_id}-step-{b.runs_used + 1}",
                    partition_key=b.next_key,
                    asset_selection=[dg.AssetKey(benchmark_asset_key(cfg, b.host))],
                    tags={HOST_TAG: b.host, BISECT_TAG: b.bisection_id},
                )
            )
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[image_versions.build_add_request(sorted(set(keys)))] if keys else [],
        )

    return bisect_sensor

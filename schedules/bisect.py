"""The bisection sensor: a running bisection by pairs becomes one run of ``pair_bisect_job``; one by runs,
its next release one run of ``bisect_job``."""

import json
from datetime import UTC, datetime

import dagster as dg

from assets.benchmark import benchmark_asset_key
from assets.partitions import image_versions
from assets.resources import StrixConfigResource, WarehouseResource
from schedules.jobs import HOST_TAG
from strix_pipeline.analysis.bisect.steps import BISECT_TAG, BY_PAIRS, pending_steps
from strix_pipeline.planning.due import hosts_in_window
from strix_pipeline.planning.targets import find_image
from strix_pipeline.warehouse import BisectionRecord


def pair_run_config(b: BisectionRecord) -> dict:
    """``pair_bisect_job``'s run config for a bisection by pairs: its brackets, the releases between
    (the ones the regressions asset found), its metric and series, stored under its id."""
    between = [c["version"] for c in json.loads(b.candidates)]
    config = {
        "before": b.version_before,
        "after": b.version_after,
        "between": between,
        "metric": b.metric,
        "engine": b.engine,
        "bisection_id": b.bisection_id,
        "change_id": b.change_id or "",
        "fingerprint": b.fingerprint,
        "scenario": b.scenario,
        "level": b.level,
    }
    return {"ops": {"pair_bisection": {"config": config}}}


def _request(cfg, b: BisectionRecord) -> dg.RunRequest:
    tags = {HOST_TAG: b.host, BISECT_TAG: b.bisection_id}
    if (b.next_key or "").startswith(BY_PAIRS):
        # the whole search is one run: its steps are decided inside it, by fresh pairs
        return dg.RunRequest(
            run_key=f"{b.bisection_id}-pairs",
            job_name="pair_bisect_job",
            run_config=pair_run_config(b),
            tags=tags,
        )
    return dg.RunRequest(
        run_key=f"{b.bisection_id}-step-{b.runs_used + 1}",
        job_name="bisect_job",
        partition_key=b.next_key,
        asset_selection=[dg.AssetKey(benchmark_asset_key(cfg, b.host))],
        tags=tags,
    )


def build_bisect_sensor(bisect_job, pair_bisect_job, interval_s: int = 60) -> dg.SensorDefinition:
    @dg.sensor(
        name="bisect_sensor",
        jobs=[bisect_job, pair_bisect_job],
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Runs each bisection the regressions asset started, inside the host's maintenance window: one "
            "by pairs as one run of pair_bisect_job (at most [analysis] bisect_max_pairs pairs), one by "
            "runs step by step, the benchmark of the release it names (run key = bisection id + step, at "
            "most [analysis] bisect_max_runs runs)."
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
            key = (b.next_key or "").removeprefix(BY_PAIRS)
            image = find_image([i for i in images if i.engine == b.engine], key)
            if image is None:
                context.log.warning(f"bisection {b.bisection_id}: no known image for {b.next_key}")
                continue
            if not hosts_in_window(cfg, image, now):
                context.log.info(f"bisection {b.bisection_id}: {b.next_key} waits for the maintenance window")
                continue
            if key == b.next_key and key not in existing:
                keys.append(key)
            requests.append(_request(cfg, b))
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[image_versions.build_add_request(sorted(set(keys)))] if keys else [],
        )

    return bisect_sensor

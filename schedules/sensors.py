"""The new-image sensor: new versions become partitions, each digest benchmarked once (again after a
deferral: the one account of what is measured and deferred, planning.measured, the schedule's too).
The images it follows are the week's current ones, as the weekly schedule and `strix plan --week`
see them (planning.week.this_week)."""

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from assets.partitions import image_versions
from assets.resources import RegistryResource, StrixConfigResource, WarehouseResource
from schedules.requests import run_requests
from strix_pipeline import image_scan
from strix_pipeline.planning import measured as account
from strix_pipeline.planning.due import Due, due_images
from strix_pipeline.planning.targets import partition_key, partition_keys
from strix_pipeline.planning.week import this_week
from strix_pipeline.registry.discovery import RegistryFailure
from strix_pipeline.warehouse.past_runs import deferred_runs, measured_runs


@dataclass(frozen=True)
class SensorCursor:
    """The digests requested so far and, per digest, how many of its runs the account had deferred
    when it was last requested. The earlier cursor (a JSON list of digests) reads as no deferral seen."""

    requested: set[str]
    deferred: dict[str, int]

    @classmethod
    def read(cls, text: str | None) -> "SensorCursor":
        data = json.loads(text) if text else []
        if isinstance(data, list):
            return cls(set(data), {})
        return cls(set(data.get("requested", [])), {k: int(v) for k, v in data.get("deferred", {}).items()})

    def dump(self) -> str:
        return json.dumps(
            {"requested": sorted(self.requested), "deferred": dict(sorted(self.deferred.items()))}
        )


def _say(context: dg.SensorEvaluationContext, due: Due, errors: list[RegistryFailure]) -> None:
    """What the tick left out and why, and the registries it could not read, in the sensor's log."""
    for i in due.measured:
        context.log.info(f"{partition_key(i.engine, i)}: already benchmarked, not requested again")
    for i in due.waiting:
        context.log.info(f"{partition_key(i.engine, i)}: waiting for the maintenance window")
    for err in errors:
        context.log.warning(f"registry error {err.registry}/{err.repository}: {err.message}")
    for i in due.again:
        context.log.info(f"{partition_key(i.engine, i)}: deferred since its request, requested again")


def build_sensor(benchmark_job, interval_s: int = 3600) -> dg.SensorDefinition:
    @dg.sensor(
        name="new_image_sensor",
        jobs=[benchmark_job],
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Looks for new image versions (a new release tag, or a floating tag at a new digest), adds "
            "them as partitions of benchmark_run and requests each digest's benchmark once (run key = "
            "digest)."
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
            scan = image_scan.scan_images(cfg, wh, client_factory=registry.client_factory(), now=now)
            rows, deferred = measured_runs(wh), account.deferrals(deferred_runs(wh))
        # the schedule's week (its current images and local builds; the canary is the schedule's alone)
        start = account.week_start(cfg.project.schedule, now, cfg.project.timezone)
        week = this_week(cfg, scan.known, scan.local, rows, start)
        cursor = SensorCursor.read(context.cursor)
        # the one account of what is measured (planning.measured), the schedule's too: ever, for a digest
        # benchmarked once (by `strix run`, a backfill, a history: not asked for again); a run of it
        # deferred since its request makes it due again. Outside a host's maintenance window an image
        # waits (its digest stays unrequested) for a later tick
        measured = account.measured(rows)
        due = due_images(cfg, week.current, cursor.requested, now, measured, deferred, cursor.deferred)
        _say(context, due, scan.report.errors)
        existing = set(context.instance.get_dynamic_partitions(image_versions.name))
        keys = [k for k in partition_keys(due.now) if k not in existing]
        again = {i.digest for i in due.again}
        # what the cursor remembers of the account: the deferrals each requested digest had
        seen = {**cursor.deferred, **{i.digest: deferred.get(i.digest, 0) for i in due.now}}
        context.update_cursor(SensorCursor(due.requested, seen).dump())
        return dg.SensorResult(
            run_requests=[
                r
                for i in due.now
                # a new run key for each ask after a deferral (Dagster skips a run key it has seen)
                for r in run_requests(
                    cfg,
                    i,
                    run_key=f"{i.digest}-deferred-{deferred[i.digest]}" if i.digest in again else i.digest,
                    now=now,  # one night with the other runs of the host's open window
                )
            ],
            dynamic_partitions_requests=[image_versions.build_add_request(keys)] if keys else [],
        )

    return new_image_sensor

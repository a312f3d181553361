"""Run requests for one image: one per host that runs it, each holding only that host's benchmark asset."""

from datetime import datetime

import dagster as dg

from assets.benchmark import benchmark_asset_key
from assets.partitions import HOST_TAG, NIGHT_TAG
from strix_pipeline.config import StrixConfig
from strix_pipeline.planning.targets import hosts_of, partition_key
from strix_pipeline.planning.window import night_of
from strix_pipeline.records import ImageRecord


def run_requests(
    config: StrixConfig,
    image: ImageRecord,
    run_key: str | None,
    asset_selection: list[dg.AssetKey] | None = None,
    priority: int = 0,
    now: datetime | None = None,
) -> list[dg.RunRequest]:
    """One run per host that runs ``image``, each tagged with its host and holding only that host's
    benchmark asset (another host's asset would fail the run). The run key names the host only when
    the image runs on several, so a single-host image keeps the key it always had (its digest).
    ``priority`` (planning.priority.run_priority) orders the host's queue: what the decision needs first.
    ``now``: when they are asked for; each run is tagged with its host's night then (the window open
    at ``now``, planning.window.night_of), so one night's runs stop production once between them."""
    key = partition_key(image.engine, image)
    hosts = hosts_of(config, image)
    requests = []
    for host in hosts:
        night = (
            night_of(config.hosts[host], config.project.schedule, now, config.project.timezone)
            if now
            else None
        )
        asset = dg.AssetKey(benchmark_asset_key(config, host))
        if asset_selection is not None and asset not in asset_selection:
            continue
        requests.append(
            dg.RunRequest(
                run_key=run_key if run_key is None or len(hosts) == 1 else f"{run_key}@{host}",
                partition_key=key,
                job_name=None if asset_selection else "benchmark_job",
                asset_selection=[asset],
                tags={
                    HOST_TAG: host,
                    "strix/digest": image.digest,
                    "dagster/priority": str(priority),
                    **({NIGHT_TAG: night} if night else {}),
                },
            )
        )
    return requests

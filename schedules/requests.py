"""Run requests for one image: one per host that runs it, each holding only that host's benchmark asset."""

import dagster as dg

from assets.benchmark import benchmark_asset_key
from schedules.jobs import HOST_TAG
from strix_pipeline import plan
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import ImageRecord


def run_requests(
    config: StrixConfig,
    image: ImageRecord,
    run_key: str | None,
    asset_selection: list[dg.AssetKey] | None = None,
    priority: int = 0,
) -> list[dg.RunRequest]:
    """One run per host that runs ``image``, each tagged with its host and holding only that host's
    benchmark asset (another host's asset would fail the run). The run key names the host only when
    the image runs on several, so a single-host image keeps the key it always had (its digest).
    ``priority`` (window_plan.run_priority) orders the host's queue: what the decision needs first."""
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
                tags={HOST_TAG: host, "strix/digest": image.digest, "dagster/priority": str(priority)},
            )
        )
    return requests

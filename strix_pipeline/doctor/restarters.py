"""Who besides a run can start or replace production's container (hosts/box/restarters.py): its restart
policy and a compose project, said; a watchtower container that would touch it, with how to exclude it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.doctor.check import Check
from strix_pipeline.hosts.box import restarters
from strix_pipeline.hosts.box.restarters import EXCLUDE

POLICY = "production restart policy"
COMPOSE = "production compose project"
WATCHTOWER = "watchtower"
EXCLUDE_FIX = (
    f"create production's container with --label {EXCLUDE} (labels are fixed at creation: recreate it; "
    "compose: under the service's labels), or run watchtower with --label-enable"
)


def restarter_checks(host: str, cfg: DockerHostConfig, client: Any) -> Iterator[Check]:
    """One line for production's policy, one for its compose project (if any), one per watchtower."""
    if cfg.production is None or not cfg.production.container:
        return
    try:
        found = restarters.survey(client, cfg.production.container)
    # docker-py's NotFound and API errors alike (the `production engine` line says which)
    except Exception as e:  # noqa: BLE001
        yield Check(host, POLICY, False, False, f"not read: {type(e).__name__}: {e}"[:300])
        return
    yield Check(
        host,
        POLICY,
        True,
        False,
        f"{found.policy}: suspended for each run (docker update --restart=no) and put back after it"
        if found.policy != "no"
        else "none: a stopped production stays down until the run starts it",
    )
    if found.compose is not None:
        yield Check(
            host,
            COMPOSE,
            True,
            False,
            f"production is {found.compose.describe()}: its restart: policy is the one above; a "
            "`docker compose up` during the maintenance window (a deploy, a cron job) would start it "
            "beside the engine",
            f"keep `docker compose -p {found.compose.project} up` out of the maintenance window",
        )
    if not found.watchtowers:
        yield Check(host, WATCHTOWER, True, False, "no watchtower container running")
    for w in found.watchtowers:
        said = w.describe() + (" -- it can restart production mid-run" if w.watches else "")
        # one that starts a stopped production puts it beside the engine: a run's measurement (and, on
        # unified memory, the engine's allocation) is not worth a night's outage
        yield Check(
            host, f"{WATCHTOWER} {w.name}", not w.watches, w.revives, said, EXCLUDE_FIX if w.watches else None
        )

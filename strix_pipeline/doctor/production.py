"""Production as deployed, read read-only where it runs: unchanged since the last recorded read
(`strix production show`), or what changed -- the next baseline runs as production is now."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.doctor.check import Check
from strix_pipeline.hosts.box.production_read import read_production
from strix_pipeline.hosts.docker.ssh import SshTarget
from strix_pipeline.planning.production_baseline import (
    ProductionRead,
    ProductionReadError,
    derive_baseline,
    differences,
)
from strix_pipeline.warehouse import Warehouse, WarehouseError

NAME = "production as deployed"
SHOW = "strix production show (records this read)"


def _production(
    config: StrixConfig, host: str, cfg: DockerHostConfig, client: Any, target: SshTarget | None
) -> Iterator[Check]:
    if cfg.production is None or not (cfg.production.container or cfg.production.unit):
        return
    try:
        read = read_production(cfg.production, client, target)
        base = derive_baseline(read)
    except (ProductionReadError, OSError) as e:
        yield Check(host, NAME, False, False, f"not read: {e}"[:400], "set production.container or unit")
        return
    except Exception as e:  # noqa: BLE001 - docker-py's NotFound and API errors alike
        yield Check(host, NAME, False, False, f"not read: {type(e).__name__}: {e}"[:400])
        return
    gives = f"{base.backend}, {base.image_ref or read.argv[0]}, {base.model_on_host} ({read.digest[:19]})"
    try:
        with Warehouse.open_reader(config.warehouse_target(), lock_retry_s=2.0) as wh:
            last = wh.last_production_read(host)
    except (OSError, WarehouseError) as e:
        yield Check(host, NAME, False, False, f"{gives}; the last read not found: {e}"[:400], SHOW)
        return
    if last is None:
        yield Check(host, NAME, False, False, f"{gives}; no read recorded yet to compare with", SHOW)
        return
    when = f"{last.read_at:%Y-%m-%d %H:%M}"
    if last.digest == read.digest:
        yield Check(host, NAME, True, False, f"unchanged since the read of {when}: {gives}")
        return
    changed = "; ".join(differences(ProductionRead.from_json(last.content), read))
    yield Check(
        host,
        NAME,
        False,
        False,
        f"production CHANGED since the read of {when}: {changed}; the next baseline runs as now: {gives}",
        SHOW,
    )

"""What every host shares: a writable warehouse, and the image registries the engines are found in."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from strix_pipeline.config import ConfigError, StrixConfig
from strix_pipeline.doctor.check import Check
from strix_pipeline.records import LOCAL_REGISTRY
from strix_pipeline.registry.names import api_host
from strix_pipeline.warehouse import Warehouse, WarehouseError


def _warehouse(config: StrixConfig) -> Check:

    try:
        # the config's warehouse: the DuckDB file, or the DuckLake (a missing DSN variable is a failure)
        path = config.warehouse_target()
    except ConfigError as e:
        fix = f"export {config.warehouse.catalog_env}: the libpq DSN of the DuckLake catalog"
        return Check("all", "warehouse writable", False, True, str(e), fix)
    try:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
        with Warehouse.open(path, lock_retry_s=2.0):
            pass
    except (OSError, WarehouseError) as e:
        said = str(e)
        return Check(
            "all",
            "warehouse writable",
            False,
            True,
            said if said.startswith(str(path)) else f"{path}: {said}",
            getattr(e, "fix", "check the path and its permissions, or stop the process holding it"),
        )
    except Exception as e:  # noqa: BLE001 - DuckDB raises its own types (corrupt file, ...)
        return Check(
            "all",
            "warehouse writable",
            False,
            True,
            f"{path}: {type(e).__name__}: {e}",
            "move the file aside if it is damaged",
        )
    return Check("all", "warehouse writable", True, True, str(path))


def _registry_url(registry: str, insecure: bool) -> str:

    return f"{'http' if insecure else 'https'}://{api_host(registry)}/v2/"


def _registries(config: StrixConfig, *, required: bool) -> list[Check]:

    sources = {
        (s.registry, s.insecure)
        for e in config.engines.values()
        for s in e.images
        if s.registry != LOCAL_REGISTRY
    }

    def probe(source: tuple[str, bool]) -> Check:
        registry, insecure = source
        url = _registry_url(registry, insecure)
        try:
            code = httpx.get(url, timeout=httpx.Timeout(4.0, connect=3.0)).status_code
        except httpx.HTTPError as e:
            return Check(
                "all",
                f"registry {registry}",
                False,
                required,
                f"{url}: {type(e).__name__}: {e}",
                "check the network or proxy to the registry"
                + ("" if required else " (needed only to discover images)"),
            )
        # 401 is the OCI challenge of a registry that answers: reachable
        ok = code in (200, 401)
        return Check(
            "all",
            f"registry {registry}",
            ok,
            required,
            f"{url}: HTTP {code}",
            None if ok else "the registry answered with an error",
        )

    with ThreadPoolExecutor(max_workers=max(1, len(sources))) as pool:
        return list(pool.map(probe, sorted(sources)))

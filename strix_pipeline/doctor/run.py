"""Every check for every host with configured runs."""

from __future__ import annotations

from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.doctor.check import Check
from strix_pipeline.doctor.docker_access import _docker
from strix_pipeline.doctor.local import _local
from strix_pipeline.doctor.shared import _registries, _warehouse


def run_checks(
    config: StrixConfig, *, start_engines: bool = True, engines: list[str] | None = None
) -> list[Check]:
    """Every check for every host with configured runs (of ``engines`` only, when given), in a stable
    order."""
    checks: list[Check] = [_warehouse(config)]
    hosts = [h for h, runs in config.runs.items() if runs]
    for host in hosts:
        cfg = config.hosts[host]
        if isinstance(cfg, DockerHostConfig):
            checks += list(_docker(config, host, cfg))
        else:
            checks += list(_local(config, host, start_engines, engines))
    needs_registry = any(isinstance(config.hosts[h], DockerHostConfig) for h in hosts)
    checks += _registries(config, required=needs_registry)
    return checks

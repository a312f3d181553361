"""Every image a night needs, pulled while production still serves: before the night's one stop.

A night's later runs would otherwise pull their images (7-30 GB for a ROCm engine) with production
already down, stretching the outage by minutes. :func:`pull_before_stop` walks the night's targets in
order: for each one whose images (its engine's, and the probes' the run would pull) are missing on the
host, their sizes are read from their manifests and checked against Docker's free disk (the images
no series needs pruned first when it is short, as the run's own check does), then pulled. A target
whose pull or disk check fails is named with why: the night defers it (runner/night_runs.py), so a
failed pull never extends the outage. Each run's own checks still run before its start, and find its
images present.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.box import stop_checks
from strix_pipeline.hosts.cleanup import disk_budget, image_prune
from strix_pipeline.hosts.docker import host as docker_host
from strix_pipeline.planning.targets import BenchmarkTarget
from strix_pipeline.planning.week import run_name
from strix_pipeline.registry.names import pull_reference
from strix_pipeline.runner.run_image import missing_images, registry_clients

Log = Callable[[str], None]


def pull_image(client: Any, ref: str) -> None:
    """``docker pull ref`` through the daemon's API; an error event or an API error raises."""
    repository, reference = docker_host.split_image_ref(ref)
    for event in client.api.pull(repository, tag=reference, stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(str(event["error"]))
    if not stop_checks.image_present(client, ref):
        raise RuntimeError(f"{ref} is not on the host after its pull")


def pull_before_stop(
    config: StrixConfig,
    host: str,
    targets: Iterable[BenchmarkTarget],
    log: Log,
    *,
    keep_images: frozenset[str] | None = None,
    client: Any = None,
) -> dict[str, str]:
    """Pulls every image ``targets`` need on ``host`` (a Docker host; any other: nothing to do) and
    returns the targets that could not have theirs, by run name (planning.week.run_name), with why.
    ``keep_images``: the digests the series still need (the disk short: the other tracked images are
    pruned, as a run does; None: none is)."""
    host_cfg = config.hosts[host]
    wanted = [t for t in targets if t.image is not None]
    if host_cfg.kind != "docker" or not wanted:
        return {}
    own = client is None
    try:
        client = client or docker_host.make_client(host_cfg)
    except Exception as e:  # noqa: BLE001 - the host unreachable: every run is deferred, nothing stopped
        return {run_name(t): f"its image was not pulled before production stopped: {e}" for t in wanted}
    failed: dict[str, str] = {}
    keep = set(keep_images or ()) | {t.image.digest for t in wanted if t.image is not None}
    try:
        for target in wanted:
            assert target.image is not None
            ref = pull_reference(target.image.registry, target.image.repository, target.image.digest)
            name = run_name(target)
            try:
                why = _pull_one(config, host, client, ref, keep if keep_images is not None else None, log)
            except Exception as e:  # noqa: BLE001 - a registry, a daemon or a disk refusal alike
                why = f"{type(e).__name__}: {str(getattr(e, 'explanation', None) or e)[:300]}"
            if why:
                failed[name] = f"its image was not pulled before production stopped ({why})"
                log(f"{name}: {failed[name]}: deferred, production is not stopped for it")
    finally:
        if own:
            client.close()
    return failed


def _pull_one(
    config: StrixConfig, host: str, client: Any, ref: str, keep: set[str] | None, log: Log
) -> str | None:
    """One target's missing images sized against the disk, then pulled; why not, or None."""
    host_cfg = config.hosts[host]
    missing = missing_images(client, host_cfg, ref)
    if not missing:
        return None
    sized, unsized = stop_checks.sized_pulls(
        lambda: disk_budget.pull_sizes(missing, registry_clients(config))
    )
    disk = stop_checks.disk_free(client, host_cfg, pulls=sized, unsized=unsized)
    if not disk.ok and disk.checked and keep is not None:
        log(image_prune.prune_images(client, image_prune.tracked_names(config), keep).describe())
        disk = stop_checks.disk_free(client, host_cfg, pulls=sized, unsized=unsized)
    if not disk.ok and disk.checked:
        return f"the disk: {disk.detail}"
    for image in missing:
        log(f"pulling {image} before production stops ({disk.detail})")
        pull_image(client, image)
    return None

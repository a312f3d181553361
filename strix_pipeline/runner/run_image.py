"""A Docker run's image before production stops: which pulls it needs and from which registries, whether
the disk holds them (the compile caches held to their budget, unneeded images pruned when short), and
the pull with the image's checks (its executable, the GPU targets it was compiled for). The night's
pre-pull (runner/night_pull.py) asks the same questions of every image of the night."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.engines import arch_list_command
from strix_pipeline.hosts.box import stop_checks
from strix_pipeline.hosts.cleanup import cache_prune, disk_budget, image_prune, probe_images
from strix_pipeline.hosts.docker import image_checks
from strix_pipeline.hosts.docker import launcher as dk
from strix_pipeline.registry.client import RegistryClient
from strix_pipeline.registry.discovery import default_client
from strix_pipeline.registry.transport import RetryPolicy
from strix_pipeline.runner.inputs import RunInputs
from strix_pipeline.runner.record import (
    record_image_env,
)
from strix_pipeline.units import GB


def missing_images(client: Any, host: DockerHostConfig, image_ref: str) -> list[str]:
    """The images the run will pull: its engine's, the efficiency probe's and (where the GPU is checked)
    the ROCm probe's, each when the host does not have it yet."""
    refs = [image_ref, host.efficiency_probe_image, host.rocm_probe_image if host.gpu_target else None]
    return [ref for ref in dict.fromkeys(r for r in refs if r) if not stop_checks.image_present(client, ref)]


def registry_clients(config: StrixConfig) -> Callable[[str], RegistryClient]:
    """A registry's client by its name: a configured source's (its credentials, plain http where it
    says so), else an anonymous one (the probe images' public registries; plain http on loopback, as
    Docker itself takes a 127.0.0.0/8 registry), asking twice at most: an unknown size is not worth a
    long wait, the disk check falls back and says so."""
    sources = {s.registry: s for e in config.engines.values() for s in e.images}
    policy = RetryPolicy(attempts=2, backoff_s=0.5, backoff_max_s=1.0, connect_timeout_s=3.0)

    def client_for(registry: str) -> RegistryClient:
        source = sources.get(registry)
        if source is not None:
            return default_client(source, policy)
        loopback = registry.split(":", 1)[0] in ("localhost", "127.0.0.1")
        return RegistryClient(registry, insecure=loopback, policy=policy)

    return client_for


def check_disk(
    r: RunInputs, client: Any, launcher: dk.DockerLauncher, checks_host: DockerHostConfig, image_ref: str
) -> None:
    """The compile caches held to their budget (never one a planned run needs), then the disk must hold
    every pull the run makes, sized from its manifest, with what the caches may take."""
    config, target, run, log = r.config, r.target, r.result.run, r.log
    assert target.image is not None
    host_cfg, state = config.docker_config(target.host), config.state_dir()

    def prune() -> None:  # the disk is short: the images no series needs go, never production's
        if r.keep_images is None:
            said = "no image pruned: the run was not told which images its series still need"
        else:
            keep = set(r.keep_images) | {target.image.digest}
            said = image_prune.prune_images(client, image_prune.tracked_names(config), keep).describe()
        log(f"[{run.run_id}] {said}")
        # and the probe images an earlier configuration used, never one configured now
        if gone := probe_images.prune_unused(client, state, target.host, host_cfg):
            log(f"[{run.run_id}] pruned probe image(s) the configuration no longer names: {', '.join(gone)}")

    needed = {*(r.keep_images or ()), target.image.digest}  # what the series still benchmark
    caches = cache_prune.hold_to_budget(
        client, int(host_cfg.compile_cache_budget_gb * GB), cache_prune.of_digests(needed)
    )
    log(f"[{run.run_id}] {caches.describe()}")
    for note in stop_checks.before_stop(
        client,
        checks_host,
        port=launcher.spec.port,
        model_path=launcher.host_model_path,
        image_ref=image_ref,
        prune=prune,
        pulls=lambda: disk_budget.pull_sizes(
            missing_images(client, host_cfg, image_ref), registry_clients(config)
        ),
        cache_bytes=caches.allowance_bytes,
    ):
        log(f"[{run.run_id}] {note}")


def pull_and_check_image(
    r: RunInputs, client: Any, launcher: dk.DockerLauncher, image_ref: str, source: Any
) -> None:
    """The pull, then the image's executable and the GPU targets it was compiled for."""
    config, target, run, log = r.config, r.target, r.result.run, r.log
    host_cfg = config.docker_config(target.host)
    launcher.pull()
    if launcher.context_note:  # C5 at the same context, or why not
        log(f"[{run.run_id}] {launcher.context_note}")
    record_image_env(run, launcher.image_attrs)
    image_checks.check_executable(
        client, image_ref, launcher.spec.executable, launcher.image_attrs, run_id=run.run_id
    )
    if host_cfg.gpu_target:
        found = image_checks.check_arch(
            client,
            image_ref,
            arch_list_command(config.engines[target.engine], source),
            host_cfg.gpu_target,
            run_id=run.run_id,
        )
        if found is not None:
            log(f"[{run.run_id}] compiled GPU targets: {found.describe()}")

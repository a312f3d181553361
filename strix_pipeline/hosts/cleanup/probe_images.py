"""The probe images a Box was configured with, remembered so the ones no longer used can go.

A probe image (``probe_image``, ``rocm_probe_image``, ``efficiency_probe_image``: tens of GB for a
ROCm one) is pulled by the runs that need it; when the configuration moves to another (a newer ROCm,
another PyTorch), the old one stays on the Box's disk and nothing names it as ours. Every run records
its host's configured probe images on the controller (``<state>/probe-images-<host>.json``); when the
disk is short, the recorded ones the configuration no longer names are removed (Docker's own removal,
no force: one a container uses stays), never a configured one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.paths import inside

log = logging.getLogger(__name__)


def configured(host: DockerHostConfig) -> set[str]:
    """The probe images the host's configuration names now."""
    return {ref for ref in (host.probe_image, host.rocm_probe_image, host.efficiency_probe_image) if ref}


def _record_path(state_dir: Path, host_name: str) -> Path:
    return inside(Path(state_dir), f"probe-images-{host_name}.json")


def recorded(state_dir: Path, host_name: str) -> set[str]:
    try:
        data = json.loads(_record_path(state_dir, host_name).read_text())
    except (OSError, ValueError):
        return set()
    return {r for r in data if isinstance(r, str)} if isinstance(data, list) else set()


def _write(state_dir: Path, host_name: str, refs: set[str]) -> None:
    path = _record_path(state_dir, host_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sorted(refs)))


def remember(state_dir: Path, host_name: str, host: DockerHostConfig) -> None:
    """Add the host's configured probe images to what the pipeline has used there."""
    now, known = configured(host), recorded(state_dir, host_name)
    if not now <= known:
        _write(state_dir, host_name, known | now)


def prune_unused(client: Any, state_dir: Path, host_name: str, host: DockerHostConfig) -> list[str]:
    """Remove the recorded probe images the configuration no longer names; returns those removed. One
    Docker refuses (a container uses it) or that is gone already is kept in the record or dropped."""
    import docker.errors

    known = recorded(state_dir, host_name)
    stale = known - configured(host)
    removed, kept = [], set()
    for ref in sorted(stale):
        try:
            client.images.remove(ref, force=False)
            removed.append(ref)
        except docker.errors.ImageNotFound:
            pass  # gone already: nothing to remember
        except Exception as e:  # noqa: BLE001 - in use by a container: kept for a later prune
            log.warning("probe image %s not removed: %s", ref, e)
            kept.add(ref)
    if stale:
        _write(state_dir, host_name, (known - stale) | kept)
    return removed

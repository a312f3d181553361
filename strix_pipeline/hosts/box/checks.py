"""Refusals a Box run makes from what the Box itself says, before production stops.

- the device total HIP reports (the KFD topology, read by the probe: ``memory.HostMemoryFacts``) is what
  vLLM's ``--gpu-memory-utilization`` and SGLang's ``--mem-fraction-static`` take their share of, so
  the pool is sized from it (:func:`device_memory`) and a model whose weights do not fit that pool is
  refused with the numbers (:func:`check_pool_fits`; the weights' size read on the Box);
- on a unified-memory host an engine setting that locks host RAM beside the pool (SGLang's HiCache)
  is refused whatever the budget (:func:`check_unified_memory`; config_load refuses it too).
"""

from __future__ import annotations

import logging
from pathlib import PurePosixPath
from typing import Any

from strix_pipeline.config import DockerHostConfig, EngineConfig
from strix_pipeline.engines import unified_memory_problems
from strix_pipeline.engines.base import DeviceMemory, EngineSpec, pool_fit_problem
from strix_pipeline.hosts.box.device_openers import check_device_openers
from strix_pipeline.hosts.box.gpu_holders import check_no_foreign_holders
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.memory import HostMemoryFacts
from strix_pipeline.memory.smi import SmiRunner
from strix_pipeline.units import GB

log = logging.getLogger(__name__)

# What counts as a model's weights in its directory: the checkpoint formats the engines load
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
MODEL_MOUNT = "/strix-model"


def device_memory(
    host: DockerHostConfig, engine: EngineConfig, facts: HostMemoryFacts | None
) -> DeviceMemory:
    """The device a pool engine's fraction is of on this host: HIP's total when the probe read one; a
    host with no GPU device and no KFD GPU node is a CPU host (vLLM's CPU backend)."""
    total = facts.hip_device_total_bytes if facts is not None else None
    return DeviceMemory(
        total_gb=total / GB if total else None,
        cpu=not host.devices and not total,
        env=dict(engine.env),
    )


def check_unified_memory(host: DockerHostConfig, spec: EngineSpec, *, what: str) -> None:
    problems = unified_memory_problems(host.unified_memory, spec.kind, spec.flags)
    if problems:
        raise EngineStartError("failed_guard", f"{what}: " + "; ".join(problems))


def parse_sizes(text: str) -> int | None:
    """``<bytes> <path>`` lines (busybox ``stat -c '%s %n'``): the weight files' bytes summed."""
    total, found = 0, False
    for line in text.splitlines():
        size, _, path = line.strip().partition(" ")
        if size.isdigit() and path.lower().endswith(WEIGHT_SUFFIXES):
            total, found = total + int(size), True
    return total if found else None


def weights_on_host(client: Any, probe_image: str, host_path: str) -> int | None:
    """The bytes of a model's weight files on the Docker host, read by a throwaway probe container with
    the model mounted read-only; None when it cannot tell (the guard then does not refuse)."""
    argv = ["sh", "-c", 'find "$1" -type f -exec stat -c "%s %n" {} +', "sh", MODEL_MOUNT]
    try:
        raw = client.containers.run(
            probe_image,
            argv,
            remove=True,
            network_mode="host",
            volumes={host_path: {"bind": MODEL_MOUNT, "mode": "ro"}},
            labels={"strix.probe": "true"},
        )
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and container errors alike
        log.warning("could not read the size of %s on the host: %s", host_path, e)
        return None
    return parse_sizes(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw))


def check_pool_fits(
    spec: EngineSpec, device_total_bytes: int | None, weights_bytes: int | None, *, what: str
) -> None:
    """Refuse (``failed_guard``) a pool engine whose model's weights alone exceed its pool."""
    if spec.pool_fraction is None or spec.pool_flag is None:
        return
    problem = pool_fit_problem(
        spec.pool_fraction, device_total_bytes, weights_bytes, fraction_flag=spec.pool_flag, what=what
    )
    if problem:
        raise EngineStartError("failed_guard", problem)


def model_host_path(path: str, models_dir: str | None) -> str:
    """A profile's model path on the host (a relative one is under the host's models directory)."""
    p = PurePosixPath(path)
    if p.is_absolute() or not models_dir:
        return str(p)
    return str(PurePosixPath(models_dir) / p)


def before_production_stops(
    client: Any,
    host: DockerHostConfig,
    spec: EngineSpec,
    run_smi: SmiRunner | None,
    facts: HostMemoryFacts | None,
    host_model_path: str,
    *,
    what: str,
) -> list[str]:
    """Every Box refusal that needs no stopped production, in order: HiCache on unified memory, foreign
    holders of GPU memory, processes with a GPU device open, a model that does not fit its pool.
    ``run_smi`` runs the SMI tools on the host (the probe's, else the engine image's:
    ``docker_engine.SmiReader.run``). Returns notes of what could not be checked (the run logs them)."""
    check_unified_memory(host, spec, what=what)
    notes = []
    production = host.production
    if production is not None and not production.container:
        # a production run by commands (a systemd unit) has no container to tell its processes by:
        # the idle ceiling after its stop is what catches another holder then
        notes.append("production runs by commands: GPU processes are checked against the idle ceiling")
        run_smi = None
    note = check_no_foreign_holders(
        client,
        run_smi,
        production=production.container if production else None,
        allowed=frozenset(production.allowed_device_holders) if production else frozenset(),
    )
    if note:
        notes.append(note)
    # every opener of /dev/kfd or /dev/dri, whoever started it (a toolbox, a systemd service, a shell)
    note = check_device_openers(client, host.probe_image, production)
    if note:
        notes.append(note)
    total = facts.hip_device_total_bytes if facts is not None else None
    if spec.pool_fraction is not None and total and host.probe_image:
        weights = weights_on_host(client, host.probe_image, model_host_path(host_model_path, host.models_dir))
        check_pool_fits(spec, total, weights, what=what)
    return notes

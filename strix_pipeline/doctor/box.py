"""The Box before a run: its memory against the idle ceiling and the budget, who holds the GPU
devices, and what the checks before production stops find (production, ports, GPU, disk, the model
files in place, and how to copy what is missing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

import docker

from strix_pipeline import memory
from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.doctor.check import Check
from strix_pipeline.engines import default_port
from strix_pipeline.engines.base import container_model_path
from strix_pipeline.hosts.box import device_openers, gpu_holders, selinux, stop_checks
from strix_pipeline.hosts.docker import host as docker_host
from strix_pipeline.hosts.docker import model_files
from strix_pipeline.hosts.docker.ssh import SshTarget
from strix_pipeline.units import GB, gib_text


def _box_memory(host: str, cfg: DockerHostConfig, client: docker.DockerClient) -> Iterator[Check]:
    """The Box's memory as a run will meet it, read through its probe: what is held now
    against the idle ceiling, foreign holders of GPU memory, the device total as HIP sees it and the
    GTT/TTM limits (ttm and amdttm) against the budget."""
    if not cfg.probe_image:
        return
    try:
        probe = docker_host.probe_for_host(cfg, client)
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and image errors alike
        yield Check(
            host, "memory probe", False, True, f"{cfg.probe_image}: {e}"[:300], "check the probe image"
        )
        return
    if probe is None:
        return
    try:
        facts = probe.host_facts()
        in_use = memory.in_use(probe.read(), "gpu")
        run_smi = probe.exec if isinstance(probe, memory.DockerProbe) else None
        name = cfg.production.container if cfg.production else None
        allowed = frozenset(cfg.production.allowed_device_holders) if cfg.production else frozenset()
        holders, note = gpu_holders.foreign_holders(client, run_smi, production=name, allowed=allowed)
        listed = gpu_holders.gpu_processes(run_smi) if run_smi else None
        ours = gpu_holders.production_pids(client, name)
    finally:
        probe.close()
    prod_held = sum(p.bytes or 0 for p in (listed.processes or []) if p.pid in ours) if listed else 0
    if cfg.idle_ceiling_gb is not None:
        idle = None if in_use is None else in_use - prod_held
        ok = idle is not None and idle <= cfg.idle_ceiling_gb * GB
        shown = "no sysfs reading" if in_use is None else f"VRAM + GTT held now {in_use / GB:.2f} GB"
        prod = f", production's own {prod_held / GB:.2f} GB (amd-smi/rocm-smi)" if prod_held else ""
        yield Check(
            host,
            "idle ceiling",
            ok,
            True,
            f"{shown}{prod}; idle_ceiling_gb {cfg.idle_ceiling_gb:g} GB",
            None if ok else "find what holds the GPU's memory (amd-smi process) and stop it",
        )
    named = "; ".join(h.describe() for h in holders)
    yield Check(
        host,
        "foreign GPU holders",
        not holders,
        True,
        (named or "none (containers with /dev/kfd or /dev/dri, processes the SMI tools list)")
        + (f"; {note}" if note else ""),
        "stop them before the window: a run refuses while they hold GPU memory" if holders else None,
    )
    yield _device_openers(host, cfg, client)
    yield _selinux(host, cfg, client)

    budget = cfg.memory_budget_gb
    total = facts.hip_device_total_bytes
    vs = f" vs memory_budget_gb {budget:g} GB" if budget is not None else ""
    yield Check(
        host,
        "device total (HIP)",
        total is not None,
        False,
        f"{gib_text(total)} as HIP sees it (KFD topology){vs}: vLLM's and SGLang's fractions are of it"
        if total
        else "no KFD GPU node in /sys/class/kfd: pool fractions are counted against the budget",
        None if total else "load amdgpu with KFD (ROCm), or expect pools sized against the budget",
    )
    limits = {"ttm": facts.ttm_module_pages_limit, "amdttm": facts.amdttm_pages_limit}
    shown = [
        f"{k}.pages_limit {v} ({gib_text(v * memory.PAGE_SIZE)})" for k, v in limits.items() if v is not None
    ]
    force = facts.ttm_pages_limit
    ok = force is not None and (budget is None or force * memory.PAGE_SIZE >= budget * GB)
    in_force = "amdttm (DKMS driver)" if limits["amdttm"] is not None else "ttm"
    yield Check(
        host,
        "GTT/TTM limit",
        ok,
        False,
        ("; ".join(shown) + f"; in force: {in_force}{vs}")
        if shown
        else "no ttm or amdttm pages_limit readable",
        None if ok else "raise ttm.pages_limit (amdttm.pages_limit with amdgpu-dkms) to cover the budget",
    )


def _selinux(host: str, cfg: DockerHostConfig, client: docker.DockerClient) -> Check:
    """Whether the Box enforces SELinux: the engine containers then run with label=disable (said)."""
    found, note = selinux.enforcing(client, cfg.probe_image)
    detail = (
        f"enforcing: engine containers run with --security-opt {selinux.LABEL_OPT} (the devices and "
        "models usable without relabelling)"
        if found
        else note or "not enforcing"
    )
    return Check(host, "SELinux", found is not None, False, detail)


def _device_openers(host: str, cfg: DockerHostConfig, client: docker.DockerClient) -> Check:
    """Processes with /dev/kfd or /dev/dri open that are not production's, whoever started them (a
    toolbox, a systemd service): a run refuses before production stops while one is there."""
    holders, note = device_openers.device_opener_holders(client, cfg.probe_image, cfg.production)
    named = "; ".join(h.describe() for h in holders)
    return Check(
        host,
        "GPU device openers",
        not holders,
        True,
        named or note or "none besides production (every /proc/<pid>/fd read)",
        "stop them before the window: a run refuses while they hold the GPU" if holders else None,
    )


def _before_stop(
    config: StrixConfig,
    host: str,
    cfg: DockerHostConfig,
    client: docker.DockerClient,
    target: SshTarget | None,
) -> Iterator[Check]:
    """What a run checks before it stops production (hosts/box/stop_checks.py), one line each; after the
    models' line, one per model saying where it goes."""
    runs = config.runs.get(host, [])
    paths = {r.model: p for r in runs if (p := config.models[r.model].path)}
    seen, could_not = stop_checks.find_models(client, cfg, paths)
    findings = [
        stop_checks.production_ready(client, cfg.production),
        stop_checks.models_finding(seen, could_not),
    ]
    prod_port = stop_checks.production_port(cfg.production)
    for port in sorted(
        {config.engines[r.engine].port or default_port(config.engines[r.engine].kind) for r in runs}
    ):
        findings.append(stop_checks.port_reachable(client, cfg, port, production_port=prod_port))
    findings.append(stop_checks.gpu_seen(client, cfg, docker_host.resolve_group_ids(cfg, client)))
    findings.append(stop_checks.disk_free(client, cfg))
    for f in findings:
        yield Check(host, f.name, f.ok, f.checked, f.detail, f.fix)
        if f.name == stop_checks.MODELS:
            yield from (_model_place(host, cfg, s, checked=could_not is None, target=target) for s in seen)


def _model_place(
    host: str, cfg: DockerHostConfig, seen: stop_checks.ModelSeen, *, checked: bool, target: SshTarget | None
) -> Check:
    """Where the engine looks for one profile's model on the host (every part of a split GGUF), and
    the command that puts what is absent there."""
    files = seen.files
    where = (
        f"{len(files.files)} parts in {files.directory}: {', '.join(files.names)}"
        if files.split
        else files.path
    )
    detail = f"{where} (the engine opens {container_model_path(files.path, cfg.models_dir)})"
    name = f"model {seen.profile}"
    if files.problem:
        return Check(
            host, name, False, True, f"{files.problem}; {detail}", _path_fix(seen.profile, files, cfg)
        )
    if files.in_image:
        return Check(host, name, True, True, f"in the engine's image (the host has no models_dir): {detail}")
    if not checked:
        return Check(host, name, False, False, f"not looked for (see {stop_checks.MODELS}): {detail}")
    if seen.ok:
        return Check(host, name, True, True, detail)
    gone = ", ".join(PurePosixPath(x).name for x in seen.absent)
    fix = model_files.copy_hint(
        files,
        list(seen.absent),
        _scp_destination(target),
        port=target.port if target else None,
        make_dir=seen.no_directory,
    )
    return Check(host, name, False, True, f"absent: {gone}; {detail}", fix)


def _path_fix(profile: str, files: model_files.ModelFiles, cfg: DockerHostConfig) -> str:
    if files.split and files.path != files.files[0]:  # a later part: the engine must be given the first
        return f"set models.{profile}.path to {files.files[0]}"
    if files.split:
        return (
            f"put all {len(files.files)} parts under models_dir ({cfg.models_dir or 'unset'}) "
            f"and point models.{profile}.path there"
        )
    return f"set models.{profile}.path to the model's absolute path on the host (or set models_dir)"


def _scp_destination(target: SshTarget | None) -> str | None:
    """``user@box`` for scp, the user as the shell variable the config names (its value is a secret)."""
    if target is None:
        return None
    user = f'"${target.user_env}"' if target.user_env else target.user
    return f"{user}@{target.hostname}" if user else target.hostname

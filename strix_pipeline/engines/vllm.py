"""vLLM: pre-allocates a KV pool sized as a fraction of the device total (GTT on Strix Halo), or --
for C5 at the same context as llama-server -- a KV cache of exactly the bytes the profile's token
capacity takes (``--kv-cache-memory-bytes``: :func:`for_context`, :func:`same_context_kv`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from strix_pipeline.config import ModelProfile
from strix_pipeline.engines import vllm_dtype
from strix_pipeline.engines.base import (
    TORCH_ARCH_SNIPPET,
    DeviceMemory,
    EngineSpec,
    PoolFlags,
    ReleaseChange,
    Reservation,
    common_reservations,
    flag_value,
    flags_for_release,
    pool_fraction,
    pool_reservations,
    ram_flag_reservations,
)
from strix_pipeline.memory.kv_capacity import (
    CPU_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    GPU_BLOCK_SIZE,
    KvLayout,
    KvSizing,
    vllm_kv_bytes_for,
)
from strix_pipeline.units import GB, GIB

KIND = "vllm"
# Production serves vLLM on 8000 by convention; the engine under benchmark listens elsewhere, so
# users' clients never reach it (and pollute its figures) during the window (docs/box.md: fencing it).
PRODUCTION_PORT = 8000
DEFAULT_PORT = PRODUCTION_PORT + 10000
# vLLM keeps the kernels it compiles (torch.compile, Triton) here: a volume of its own per image
# (hosts/docker/launcher.py), so the next start of that image is warm, and each run records cold or warm
COMPILE_CACHE_DIR: str | None = "/root/.cache/vllm"
DEFAULT_EXECUTABLE = ["vllm", "serve"]
# Flags that say where the model is and where the engine listens, not how it computes: left out of
# the comparable flags (the fingerprint), so a moved file or another port never breaks a series.
NOT_COMPARABLE_FLAGS = frozenset(
    {"--model", "--served-model-name", "--host", "--port", "--chat-template", "--tokenizer"}
)
READY_PATHS = ("/health", "/v1/models")  # /health: process up; /v1/models: it serves
METRICS_PREFIX = "vllm:"
VERSION_PATH = "/version"
VERSION_KEY = "version"
# The image's compiled GPU targets, printed without a GPU (the architecture gate,
# hosts/docker/image_checks.py)
ARCH_LIST_COMMAND = ["python3", "-c", TORCH_ARCH_SNIPPET]


# `--model`, not the positional: `vllm serve` takes both, but the server module that the CPU build
# runs (python -m vllm.entrypoints.openai.api_server, 0.32) ignores a positional model.
PROFILE_FLAGS = PoolFlags(
    model="--model",
    context_length="--max-model-len",
    memory_fraction="--gpu-memory-utilization",
    parallel="--max-num-seqs",
)


def flags(profile: ModelProfile, model_path: str, extras: list[str]) -> list[str]:
    return PROFILE_FLAGS.argv(profile, model_path)


# vLLM's size flags that take host RAM beside the pool, in their unit: both are GiB (arg_utils.py)
HOST_RAM_FLAGS = (("--swap-space", GIB), ("--cpu-offload-gb", GIB))


def reservations(
    flags: list[str], profile: ModelProfile, budget_gb: float | None, device: DeviceMemory | None = None
) -> list[Reservation]:
    """The pool: --gpu-memory-utilization x the device total HIP reports (else x the budget). On the
    CPU backend (a host without a GPU device) only the KV cache is reserved up front: its bytes
    (--kv-cache-memory-bytes, else VLLM_CPU_KVCACHE_SPACE GiB); neither given, the fraction is of all
    host memory there (cpu_worker.py), so the budget rule stands. A GPU spec whose fraction was
    replaced by KV bytes (:func:`for_context`) reserves those bytes beside its weights: vLLM's
    CacheConfig says the bytes, when given, ignore the fraction. Both flags given, the fraction counts
    (vLLM still asks that much of the device free at start: v1/worker/utils.py request_memory)."""
    if device is not None and device.cpu:
        kv = _kv_reserved(flags, device.env)
        if kv is not None:
            return common_reservations(profile) + [kv]
    elif flag_value(flags, PROFILE_FLAGS.memory_fraction) is None:
        kv = _kv_reserved(flags, {})
        if kv is not None:
            return common_reservations(profile) + [kv] + ram_flag_reservations(flags, HOST_RAM_FLAGS)
    return pool_reservations(flags, profile, budget_gb, PROFILE_FLAGS.memory_fraction, HOST_RAM_FLAGS, device)


def _kv_reserved(flags: list[str], env: dict[str, str]) -> Reservation | None:
    """The KV cache's bytes when a flag or the CPU's environment gives them; None when neither does
    or the value is not a number (vLLM refuses it at start; the budget rule stands meanwhile)."""
    kv, space = flag_value(flags, KV_BYTES_FLAG), env.get(CPU_KV_ENV)
    try:
        if kv is not None:
            return Reservation(f"{KV_BYTES_FLAG} {kv}", int(kv) / GB)
        if space:
            return Reservation(f"{CPU_KV_ENV} {space} GiB", float(space) * GIB / GB)
    except ValueError:
        pass
    return None


def production_pool_bytes(flags: list[str], profile: ModelProfile, device: DeviceMemory) -> int | None:
    """The pool production's configuration holds (C5 shows it beside the same-context figures): its
    fraction x the device total HIP reports on a GPU; on the CPU backend its KV bytes (the flag, else
    VLLM_CPU_KVCACHE_SPACE). None when the device was not read (or the CPU's pool is a share of all
    host memory). Read from the configured flags, before :func:`for_context` replaces the fraction."""
    if device.cpu:
        kv = _kv_reserved(flags, device.env)
        return round(kv.gb * GB) if kv is not None else None
    if not device.total_gb:
        return None
    return round(pool_fraction(flags, profile, PROFILE_FLAGS.memory_fraction) * device.total_gb * GB)


# --- the CPU device (vllm-cpu on the embedded host) -------------------------------------------------
# On the CPU backend `--gpu-memory-utilization` is the fraction of *all* host memory the worker
# reserves (vllm/v1/worker/cpu_worker.py): 0.85 of a shared machine fails at start whenever other
# processes hold more than 15 %. Its CPU counterpart is an explicit KV cache size,
# `--kv-cache-memory-bytes` (VLLM_CPU_KVCACHE_SPACE in GiB is the legacy spelling of the same, and
# vLLM 0.32's CPU platform lets it override the flag: platforms/cpu.py). On a GPU the same flag sizes
# the KV cache and the fraction then sizes nothing of it (config/cache.py, v1/worker/gpu_worker.py).
KV_BYTES_FLAG = "--kv-cache-memory-bytes"
CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"


def _without_flag(flag: str) -> Callable[[list[str]], list[str]]:
    def drop(flags: list[str]) -> list[str]:
        out: list[str] = []
        skip = False
        for f in flags:
            if skip:
                skip = False
            elif f == flag:
                skip = True  # and its value
            elif not f.startswith(flag + "="):
                out.append(f)
        return out

    return drop


# How older releases' command lines differ from today's (engines.base.flags_for_release). Checked in
# the releases' own vllm/engine/arg_utils.py: 0.10.1.1 has no kv_cache_memory, 0.10.2 has it.
RELEASE_CHANGES = (
    ReleaseChange(
        since="0.10.2",
        what=(
            f"no {KV_BYTES_FLAG}: the KV cache is sized by {CPU_KV_ENV} on the CPU (set), "
            f"by {PROFILE_FLAGS.memory_fraction} on a GPU (kept)"
        ),
        rewrite=_without_flag(KV_BYTES_FLAG),
    ),
)


def release_flags(version: str | None, flags: list[str]) -> tuple[list[str], list[str]]:
    """The flags vllm-cpu ``version`` takes (RELEASE_CHANGES), and the notes of what was changed."""
    return flags_for_release(RELEASE_CHANGES, version, flags)


def context_refusal(flags: list[str], release: str | None) -> str | None:
    """Why a launch keeps its configured pool instead of a KV cache sized for the context, or None:
    the configuration sizes the KV cache in bytes itself, or the release takes no KV_BYTES_FLAG
    (RELEASE_CHANGES, the one place that says which). An unknown release is taken as today's."""
    if flag_value(flags, KV_BYTES_FLAG) is not None:
        return f"the configuration gives {KV_BYTES_FLAG} itself"
    probe = [KV_BYTES_FLAG, "0"]
    kept, notes = release_flags(release, probe)
    return None if kept == probe else f"vLLM {release}: " + "; ".join(notes)


def cpu_env(kv_cache_gib: int | None) -> dict[str, str]:
    """Device settings of vllm-cpu: what worked on this project's 2-core machines.
    ``kv_cache_gib`` None: no VLLM_CPU_KVCACHE_SPACE at all -- vLLM 0.32's CPU platform lets it
    *override* ``--kv-cache-memory-bytes`` (platforms/cpu.py, whole GiB), so a KV cache sized in bytes
    for the same context as llama-server's must go without it."""
    space = {} if kv_cache_gib is None else {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
    return space | {
        "VLLM_TARGET_DEVICE": "cpu",
        # the engine's internal ZMQ sockets advertise this address; without it a non-loopback one
        "VLLM_HOST_IP": "127.0.0.1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # vllm-cpu 0.32's AOT compile cache (the default from torch 2.10) fails to load on the CPU
        # ("'function' object has no attribute 'finalize_loading'") and compiles again at every
        # start, 33 s of a 78 s start on 2 cores; its inductor cache loads (the engine's init 11 s
        # against 39-50 s on the second start), compiled by the same inductor either way.
        "VLLM_USE_AOT_COMPILE": "0",
    }


def _fraction_replaced(flags: list[str], replacement: list[str]) -> list[str]:
    """``flags`` without any ``--gpu-memory-utilization F``, ``replacement`` where the first one was
    (at the end when there was none)."""
    fraction = PROFILE_FLAGS.memory_fraction
    out: list[str] = []
    placed = False
    it = iter(flags)
    for f in it:
        if f != fraction and not f.startswith(fraction + "="):
            out.append(f)
            continue
        if f == fraction:
            next(it, None)  # its value
        if not placed:
            out += replacement
            placed = True
    return out if placed else out + replacement


def for_cpu(
    spec: EngineSpec,
    executable: list[str],
    kv_cache_gib: int,
    profile: ModelProfile,
    kv_bytes: int | None = None,
) -> EngineSpec:
    """The same spec on the CPU: another executable, and `--gpu-memory-utilization F` replaced by
    `--kv-cache-memory-bytes N` (its CPU counterpart); every other flag is the Box's. ``kv_bytes``:
    the KV cache sized for the profile's token capacity (memory/kv_capacity.py), else ``kv_cache_gib``."""
    size = kv_bytes if kv_bytes is not None else kv_cache_gib * GIB
    shown = f"{size} B for the same context" if kv_bytes is not None else f"{kv_cache_gib} GiB"
    flags = _fraction_replaced(spec.flags, [KV_BYTES_FLAG, str(size)])
    reservations = common_reservations(profile) + [Reservation(f"{KV_BYTES_FLAG} ({shown})", size / GB)]
    return replace(spec, command=list(executable) + flags, flags=flags, reservations=reservations)


def for_context(
    spec: EngineSpec, kv_bytes: int, profile: ModelProfile, device: DeviceMemory | None
) -> EngineSpec:
    """The spec of a Docker host with its KV cache sized for the profile's token capacity
    (:func:`same_context_kv`): ``--kv-cache-memory-bytes N``. On a GPU the pool fraction stays beside
    it: vLLM sizes the KV cache by the bytes alone (v1/worker/gpu_worker.py determine_available_memory)
    but still asks ``F x total`` free at start (v1/worker/utils.py request_memory), so the start gate
    stays production's own, not vLLM's default 0.92. On the CPU backend the fraction is of all host
    memory and goes (as :func:`for_cpu`), and so does VLLM_CPU_KVCACHE_SPACE, which would override the
    bytes there. Its reservations are what :func:`reservations` counts for these flags."""
    cpu = device is not None and device.cpu
    flags = (
        _fraction_replaced(spec.flags, [KV_BYTES_FLAG, str(kv_bytes)])
        if cpu
        else [*_without_flag(KV_BYTES_FLAG)(spec.flags), KV_BYTES_FLAG, str(kv_bytes)]
    )
    env = {k: v for k, v in spec.env.items() if k != CPU_KV_ENV}
    return replace(
        spec,
        command=[*spec.executable, *flags],
        flags=flags,
        env=env,
        reservations=reservations(flags, profile, None, device),
    )


def cache_dtype_bytes(flags: list[str]) -> int:
    """Bytes per KV cache element: ``--kv-cache-dtype`` when it names one (fp8 kinds: 1), else the dtype
    vLLM computes in (``--dtype``; "auto" is the checkpoint's, 2 bytes for the bf16/fp16 and quantized
    checkpoints vLLM serves). Raises ValueError for a cache dtype this sizing does not know."""
    kv = flag_value(flags, "--kv-cache-dtype")
    if kv not in (None, "auto"):
        if kv not in KV_CACHE_DTYPE_BYTES:
            raise ValueError(f"--kv-cache-dtype {kv}: not one of {sorted(KV_CACHE_DTYPE_BYTES)}")
        return KV_CACHE_DTYPE_BYTES[kv]
    return vllm_dtype.cache_bytes(flag_value(flags, "--dtype") or "auto")


# vLLM's --kv-cache-dtype choices whose element size is plain (config/cache.py CacheDType); the
# packed and MLA-only kinds (nvfp4, fp8_ds_mla, turboquant_*) lay pages out otherwise: not sized here
KV_CACHE_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float16": 2, "bfloat16": 2}


def same_context_kv(flags: list[str], profile: ModelProfile, layout: KvLayout, *, cpu: bool) -> KvSizing:
    """The KV cache that holds exactly the profile's token capacity (``parallel`` requests of
    ``context_length`` tokens: what llama-server's ``-c context x parallel -np parallel`` gives), in
    vLLM's block rounding for the flags it runs with (``--block-size``, ``--max-num-batched-tokens``;
    else the platform's defaults), for the checkpoint's ``layout`` (memory/kv_capacity.py: its config
    and the cache's bytes per element)."""

    def number(name: str, default: int) -> int:
        raw = flag_value(flags, name)
        return int(raw) if raw and raw.isdigit() else default

    return vllm_kv_bytes_for(
        layout,
        profile.context_length,
        profile.parallel,
        block_size=number("--block-size", CPU_BLOCK_SIZE if cpu else GPU_BLOCK_SIZE),
        max_num_batched_tokens=number("--max-num-batched-tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS),
    )

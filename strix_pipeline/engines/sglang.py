"""SGLang: reserves its pool up front (--mem-fraction-static); HiCache also locks host RAM."""

from __future__ import annotations

from strix_pipeline.config import ModelProfile
from strix_pipeline.engines import offload_bundles
from strix_pipeline.engines.base import (
    TORCH_ARCH_SNIPPET,
    DeviceMemory,
    PoolFlags,
    Reservation,
    flag_gb,
    flag_value,
    pool_fraction,
    pool_reservations,
)
from strix_pipeline.units import GB

KIND = "sglang"
# Production serves SGLang on 8081 by convention; the engine under benchmark listens elsewhere, so
# users' clients never reach it (and pollute its figures) during the window (docs/box.md: fencing it).
PRODUCTION_PORT = 8081
DEFAULT_PORT = PRODUCTION_PORT + 10000
# not mounted: SGLang's caches are not yet known to decide its start time
COMPILE_CACHE_DIR: str | None = None
DEFAULT_EXECUTABLE = ["python3", "-m", "sglang.launch_server"]
# Flags that say where the model is and where the engine listens, not how it computes: left out of
# the comparable flags (the fingerprint), so a moved file or another port never breaks a series.
NOT_COMPARABLE_FLAGS = frozenset({"--model-path", "--served-model-name", "--host", "--port"})
READY_PATHS = ("/health", "/v1/models")
METRICS_PREFIX = "sglang:"
VERSION_PATH = "/get_server_info"
VERSION_KEY = "version"
# The image's compiled GPU targets, printed without a GPU (the architecture gate,
# hosts/docker/image_checks.py):
# PyTorch's, and sgl-kernel's code objects -- the CDNA tags' sgl-kernel exits on other targets (sglang
# issue 27519), compressed offload bundles (CCOB) included (engines/offload_bundles.py).
_SGL_KERNEL_SNIPPET = (
    "import importlib.util, pathlib\n"
    "s = importlib.util.find_spec('sgl_kernel')\n"
    "for d in (s.submodule_search_locations or []) if s else []:\n"
    "    for so in sorted(pathlib.Path(d).rglob('*.so')):\n"
    "        report(str(so), f'sgl_kernel/{so.name}')\n"
)
# the reader's own __main__ reads sys.argv, empty under -c: only its functions are used here
ARCH_LIST_COMMAND = ["python3", "-c", TORCH_ARCH_SNIPPET + offload_bundles.READER + _SGL_KERNEL_SNIPPET]


PROFILE_FLAGS = PoolFlags(
    model="--model-path",
    context_length="--context-length",
    memory_fraction="--mem-fraction-static",
    parallel="--max-running-requests",
)


def flags(profile: ModelProfile, model_path: str, extras: list[str]) -> list[str]:
    return [*PROFILE_FLAGS.argv(profile, model_path), "--enable-metrics"]


HICACHE_DEFAULT_RATIO = 2.0  # SGLang's default host/device KV ratio when HiCache is on
HICACHE_FLAGS = ("--enable-hierarchical-cache", "--hicache-ratio", "--hicache-size")
# --hicache-size is GB (server_args.py: "The size of host KV cache memory pool in gigabytes")
HOST_RAM_FLAGS = (("--hicache-size", GB),)


def hicache_on(flags: list[str]) -> bool:
    return any(f.split("=", 1)[0] in HICACHE_FLAGS for f in flags)


def unified_memory_problems(flags: list[str]) -> list[str]:
    """What this argv must never do on a unified-memory host: HiCache locks host RAM beside the device
    pool, and there they are one pool -- the field report's box OOM-looped under systemd with
    ``--mem-fraction-static 0.55 --hicache-size 20``. Whatever the budget: never enable it there."""
    used = [f.split("=", 1)[0] for f in flags if f.split("=", 1)[0] in HICACHE_FLAGS]
    if not used:
        return []
    return [
        f"SGLang HiCache ({', '.join(dict.fromkeys(used))}) on a unified-memory host: its host KV cache "
        "is the same memory as the device pool, and in the field report it OOM-looped the whole box "
        "(--mem-fraction-static 0.55 --hicache-size 20); never enable it there"
    ]


def reservations(
    flags: list[str], profile: ModelProfile, budget_gb: float | None, device: DeviceMemory | None = None
) -> list[Reservation]:
    """The static pool, plus HiCache's host KV cache: `--hicache-size` GB when given, else
    `--hicache-ratio` (default 2) times the device pool. On unified memory that host RAM is the same
    pool, so it counts against the budget; the device pool is taken as the whole static fraction,
    which over-counts (weights live there too) and so errs on the side of refusing."""
    out = pool_reservations(flags, profile, budget_gb, PROFILE_FLAGS.memory_fraction, HOST_RAM_FLAGS, device)
    total = device.total_gb if device is not None and device.total_gb else budget_gb
    if hicache_on(flags) and not flag_gb(flags, "--hicache-size") and total is not None:
        ratio = float(flag_value(flags, "--hicache-ratio") or HICACHE_DEFAULT_RATIO)
        pool = pool_fraction(flags, profile, PROFILE_FLAGS.memory_fraction) * total
        out.append(Reservation(f"--hicache-ratio {ratio:g} x pool {pool:g} GB", ratio * pool))
    return out

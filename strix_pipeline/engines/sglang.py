"""SGLang: reserves its pool up front (--mem-fraction-static); HiCache also locks host RAM."""

from __future__ import annotations

from strix_pipeline.config import ModelProfile
from strix_pipeline.engines.base import PoolFlags, Reservation, flag_gb, flag_value, pool_reservations

KIND = "sglang"
DEFAULT_PORT = 8081
DEFAULT_EXECUTABLE = ["python3", "-m", "sglang.launch_server"]
# Flags that say where the model is and where the engine listens, not how it computes: left out of
# the comparable flags (the fingerprint), so a moved file or another port never breaks a series.
NOT_COMPARABLE_FLAGS = frozenset({"--model-path", "--served-model-name", "--host", "--port"})
READY_PATHS = ("/health", "/v1/models")
METRICS_PREFIX = "sglang:"
VERSION_PATH = "/get_server_info"
VERSION_KEY = "version"


PROFILE_FLAGS = PoolFlags(
    model="--model-path",
    context_length="--context-length",
    memory_fraction="--mem-fraction-static",
    parallel="--max-running-requests",
)


def flags(profile: ModelProfile, model_path: str, extras: list[str]) -> list[str]:
    return [*PROFILE_FLAGS.argv(profile, model_path), "--enable-metrics"]


HICACHE_DEFAULT_RATIO = 2.0  # SGLang's default host/device KV ratio when HiCache is on


def reservations(flags: list[str], profile: ModelProfile, budget_gb: float | None) -> list[Reservation]:
    """The static pool, plus HiCache's host KV cache: `--hicache-size` GB when given, else
    `--hicache-ratio` (default 2) times the device pool. On unified memory that host RAM is the same
    pool, so it counts against the budget; the device pool is taken as the whole static fraction,
    which over-counts (weights live there too) and so errs on the side of refusing."""
    out = pool_reservations(flags, profile, budget_gb, PROFILE_FLAGS.memory_fraction, ("--hicache-size",))
    hicache_on = "--enable-hierarchical-cache" in flags or flag_value(flags, "--hicache-ratio") is not None
    if hicache_on and not flag_gb(flags, "--hicache-size") and budget_gb is not None:
        ratio = flag_gb(flags, "--hicache-ratio") or HICACHE_DEFAULT_RATIO
        pool = float(flag_value(flags, PROFILE_FLAGS.memory_fraction) or profile.memory_fraction) * budget_gb
        out.append(Reservation(f"--hicache-ratio {ratio:g} x pool {pool:g} GB", ratio * pool))
    return out

"""SGLang: reserves its pool up front (--mem-fraction-static); HiCache also locks host RAM."""

from __future__ import annotations

from strix_pipeline.config import ModelProfile
from strix_pipeline.engines.base import Reservation, pool_reservations, served_name

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


def flags(profile: ModelProfile, model_path: str, extras: list[str]) -> list[str]:
    return [
        "--model-path", model_path,
        "--served-model-name", served_name(profile),
        "--context-length", str(profile.context_length),
        "--mem-fraction-static", str(profile.memory_fraction),
        "--max-running-requests", str(profile.parallel),
        "--enable-metrics",
    ]  # fmt: skip


def reservations(flags: list[str], profile: ModelProfile, budget_gb: float | None) -> list[Reservation]:
    return pool_reservations(flags, profile, budget_gb, "--mem-fraction-static", ("--hicache-size",))

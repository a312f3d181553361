"""vLLM: pre-allocates a KV pool sized as a fraction of the device total (GTT on Strix Halo)."""

from __future__ import annotations

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines.base import (
    EngineSpec,
    Reservation,
    extra_flags,
    pool_reservations,
    served_name,
)

KIND = "vllm"
DEFAULT_PORT = 8000
DEFAULT_EXECUTABLE = ["vllm", "serve"]
# Flags that say where the model is and where the engine listens, not how it computes: left out of
# the comparable flags (the fingerprint), so a moved file or another port never breaks a series.
NOT_COMPARABLE_FLAGS = frozenset(
    {"--model", "--served-model-name", "--host", "--port", "--chat-template", "--tokenizer"}
)


def build(
    engine: EngineConfig,
    profile: ModelProfile,
    model_path: str,
    *,
    port: int | None = None,
    bind_host: str = "0.0.0.0",
    budget_gb: float | None = None,
) -> EngineSpec:
    port = port or engine.port or DEFAULT_PORT
    flags = [
        model_path,
        "--served-model-name", served_name(profile),
        "--max-model-len", str(profile.context_length),
        "--gpu-memory-utilization", str(profile.memory_fraction),
        "--max-num-seqs", str(profile.parallel),
        "--host", bind_host,
        "--port", str(port),
    ]  # fmt: skip
    flags += extra_flags(KIND, engine, profile)
    executable = list(engine.executable or DEFAULT_EXECUTABLE)
    return EngineSpec(
        kind=KIND,
        command=executable + flags,
        port=port,
        served_model_name=served_name(profile),
        model_path=model_path,
        ready_paths=("/health", "/v1/models"),  # /health: process up; /v1/models: it serves
        metrics_path="/metrics",
        metrics_prefix="vllm:",
        version_path="/version",
        version_key="version",
        flags=flags,
        reservations=reservations(flags, profile, budget_gb),
    )


def reservations(flags: list[str], profile: ModelProfile, budget_gb: float | None) -> list[Reservation]:
    return pool_reservations(
        flags, profile, budget_gb, "--gpu-memory-utilization", ("--swap-space", "--cpu-offload-gb")
    )

"""vLLM: pre-allocates a KV pool sized as a fraction of the device total (GTT on Strix Halo)."""

from __future__ import annotations

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines.base import (
    EngineSpec,
    Reservation,
    common_reservations,
    extra_flags,
    flag_gb,
    flag_value,
    served_name,
)

KIND = "vllm"
DEFAULT_PORT = 8000
DEFAULT_EXECUTABLE = ["vllm", "serve"]


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
    out = common_reservations(profile)
    fraction = float(flag_value(flags, "--gpu-memory-utilization") or profile.memory_fraction)
    if budget_gb is not None:
        # The fraction is of the device total, which on unified memory is the host's shared pool.
        out.append(
            Reservation(
                f"--gpu-memory-utilization {fraction:g} x budget {budget_gb:g} GB", fraction * budget_gb
            )
        )
    # Both lock host RAM beside the pool: on unified memory that is the same pool.
    for name in ("--swap-space", "--cpu-offload-gb"):
        gb = flag_gb(flags, name)
        if gb:
            out.append(Reservation(f"{name} {gb:g}", gb))
    return out

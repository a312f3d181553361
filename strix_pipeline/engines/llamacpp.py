"""llama.cpp's llama-server: allocates weights, KV cache and compute buffers at load, no pool fraction."""

from __future__ import annotations

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines.base import EngineSpec, common_reservations, extra_flags, served_name

KIND = "llamacpp"
DEFAULT_PORT = 8080
DEFAULT_EXECUTABLE = ["llama-server"]


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
    # -c is the total across slots; a profile's context_length is per request (as vLLM's
    # --max-model-len), so every slot can take a full-length prompt.
    total_ctx = profile.context_length * profile.parallel
    flags = [
        "-m", model_path,
        "--alias", served_name(profile),
        "-c", str(total_ctx),
        "-np", str(profile.parallel),
        "-ngl", "999",
        "-fa", "on",
        "--no-mmap",  # with mmap the weights may sit in the page cache instead of GTT
        "--metrics",
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
        ready_paths=("/health", "/v1/models"),  # /health is 503 while loading, 200 when ready
        metrics_path="/metrics",
        metrics_prefix="llamacpp:",
        version_path="/props",
        version_key="build_info",
        flags=flags,
        reservations=common_reservations(profile),
    )

"""llama.cpp's llama-server: allocates weights, KV cache and compute buffers at load, no pool fraction."""

from __future__ import annotations

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines.base import EngineSpec, common_reservations, extra_flags, served_name

KIND = "llamacpp"
DEFAULT_PORT = 8080
DEFAULT_EXECUTABLE = ["llama-server"]
# Flags that say where the model is and where the engine listens, not how it computes: left out of
# the comparable flags (the fingerprint), so a moved file or another port never breaks a series.
NOT_COMPARABLE_FLAGS = frozenset({"-m", "--model", "--alias", "--host", "--port"})
OVERRIDABLE_DEFAULTS: list[tuple[tuple[str, ...], list[str]]] = [
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), ["-ngl", "999"]),
    (("-fa", "--flash-attn"), ["-fa", "on"]),
    # with mmap the weights may sit in the page cache instead of GTT
    (("--no-mmap", "--mmap", "-lm", "--load-mode"), ["--no-mmap"]),
]


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
    ]  # fmt: skip
    extras = extra_flags(KIND, engine, profile)
    # llama.cpp renames flags over time (``--no-mmap`` became ``--load-mode none``; ``-fa`` took a
    # value): a default is left out when the config names the same option itself.
    for aliases, argv in OVERRIDABLE_DEFAULTS:
        if not any(f.split("=", 1)[0] in aliases for f in extras):
            flags += argv
    flags += ["--metrics", "--host", bind_host, "--port", str(port)]
    flags += extras
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

"""llama.cpp's llama-server: allocates weights, KV cache and compute buffers at load, no pool fraction."""

from __future__ import annotations

from strix_pipeline.config import ModelProfile
from strix_pipeline.engines.base import ReleaseChange, Reservation, common_reservations, served_name

KIND = "llamacpp"
DEFAULT_PORT = 8080
DEFAULT_EXECUTABLE = ["llama-server"]
# Flags that say where the model is and where the engine listens, not how it computes: left out of
# the comparable flags (the fingerprint), so a moved file or another port never breaks a series.
NOT_COMPARABLE_FLAGS = frozenset({"-m", "--model", "--alias", "--host", "--port"})
READY_PATHS = ("/health", "/v1/models")  # /health is 503 while loading, 200 when ready
METRICS_PREFIX = "llamacpp:"
VERSION_PATH = "/props"
VERSION_KEY = "build_info"
# How older releases' command lines differ from today's (engines.base.flags_for_release): none in the
# package index's window (b9093 … b11434): every flag the launchers pass (-m --alias -c -np -t
# --metrics --no-webui; -ngl -fa on --no-mmap on a Box) is taken by all of them.
RELEASE_CHANGES: tuple[ReleaseChange, ...] = ()
OVERRIDABLE_DEFAULTS: list[tuple[tuple[str, ...], list[str]]] = [
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), ["-ngl", "999"]),
    (("-fa", "--flash-attn"), ["-fa", "on"]),
    # with mmap the weights may sit in the page cache instead of GTT
    (("--no-mmap", "--mmap", "-lm", "--load-mode"), ["--no-mmap"]),
]


def flags(profile: ModelProfile, model_path: str, extras: list[str]) -> list[str]:
    # -c is the total across slots; a profile's context_length is per request (as vLLM's
    # --max-model-len), so every slot can take a full-length prompt.
    total_ctx = profile.context_length * profile.parallel
    out = [
        "-m", model_path,
        "--alias", served_name(profile),
        "-c", str(total_ctx),
        "-np", str(profile.parallel),
    ]  # fmt: skip
    # llama.cpp renames flags over time (``--no-mmap`` became ``--load-mode none``; ``-fa`` took a
    # value): a default is left out when the config names the same option itself.
    for aliases, argv in OVERRIDABLE_DEFAULTS:
        if not any(f.split("=", 1)[0] in aliases for f in extras):
            out += argv
    return [*out, "--metrics"]


def reservations(flags: list[str], profile: ModelProfile, budget_gb: float | None) -> list[Reservation]:
    return common_reservations(profile)  # no pool fraction: only the profile's own reserve

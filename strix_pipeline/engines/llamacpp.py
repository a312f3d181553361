"""llama.cpp's llama-server: allocates weights, KV cache and compute buffers at load, no pool fraction."""

from __future__ import annotations

from strix_pipeline.config import ModelProfile
from strix_pipeline.engines import offload_bundles
from strix_pipeline.engines.base import (
    DeviceMemory,
    ReleaseChange,
    Reservation,
    common_reservations,
    served_name,
)

KIND = "llamacpp"
# Production serves llama-server on 8080 by convention; the engine under benchmark listens elsewhere, so
# users' clients never reach it (and pollute its figures) during the window (docs/box.md: fencing it).
PRODUCTION_PORT = 8080
DEFAULT_PORT = PRODUCTION_PORT + 10000
# llama-server compiles nothing at start: no compile cache to keep
COMPILE_CACHE_DIR: str | None = None
DEFAULT_EXECUTABLE = ["llama-server"]
# Flags that say where the model is and where the engine listens, not how it computes: left out of
# the comparable flags (the fingerprint), so a moved file or another port never breaks a series.
NOT_COMPARABLE_FLAGS = frozenset(
    {"-m", "--model", "--alias", "--host", "--port", "-lv", "--verbosity", "--log-verbosity"}
)
# The log verbosity at which llama-server says what it allocated at load (model, KV and compute
# buffer sizes: memory/breakdown.py); the default (3) prints none of it. It adds a few dozen lines per
# request to the engine's log, nothing to what it computes (so it is left out of the fingerprint).
LOG_VERBOSITY = ["-lv", "4"]
READY_PATHS = ("/health", "/v1/models")  # /health is 503 while loading, 200 when ready
METRICS_PREFIX = "llamacpp:"
VERSION_PATH = "/props"
VERSION_KEY = "build_info"
# The image's compiled GPU targets, printed without a GPU (the architecture gate,
# hosts/docker/image_checks.py):
# the offload targets named in each HIP backend library (clang's bundle entries
# "hipv4-amdgcn-amd-amdhsa--gfx1151"; every other byte a line break, so each entry is a line of its own
# whatever grep's -o does with several on one line). A Vulkan build has no HIP library and prints nothing: no
# GPU-specific code, nothing to refuse. A library with compressed bundles (CCOB) is read by
# engines/offload_bundles.py's reader in the image's python3; without one it is unreadable (refused).
# STRIX_ARCH_ROOTS is never set in an image: it lets the tests run this very command on a folder.
ARCH_LIST_COMMAND = [
    "sh",
    "-c",
    "for f in $(find ${STRIX_ARCH_ROOTS:-/app /usr/local /usr/lib /opt} -type f -name 'libggml-hip*.so*' "
    "2>/dev/null); do "
    'if grep -q CCOB "$f"; then '
    'if command -v python3 >/dev/null 2>&1; then python3 -c "$1" "$f"; '
    'else echo "$f: unreadable: its offload bundles are compressed (CCOB) and the image has no python3 '
    'to read them"; fi; '
    "else t=$(tr -c 'a-z0-9-' '\\n' < \"$f\" | grep -E 'amdgcn-amd-amdhsa--gfx[0-9a-f]+$' | sed 's/.*--//' "
    "| sort -u | tr '\\n' ' '); "
    'echo "$f: ${t:-none}"; fi; done',
    "sh",  # $0
    offload_bundles.READER,  # $1: decompresses and reads a CCOB library
]
# How older releases' command lines differ from today's (engines.base.flags_for_release): none in the
# package index's window (b9093 … b11434): every flag the launchers pass (-m --alias -c -np -t
# --metrics --no-webui; -ngl -fa on --no-mmap on a Box) is taken by all of them.
RELEASE_CHANGES: tuple[ReleaseChange, ...] = ()
OVERRIDABLE_DEFAULTS: list[tuple[tuple[str, ...], list[str]]] = [
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), ["-ngl", "999"]),
    (("-fa", "--flash-attn"), ["-fa", "on"]),
    # with mmap the weights may sit in the page cache instead of GTT
    (("--no-mmap", "--mmap", "-lm", "--load-mode"), ["--no-mmap"]),
    # its load-time allocations in its log (C5's weights / KV / other), as on host `local`
    (("-lv", "--verbosity", "--log-verbosity"), LOG_VERBOSITY),
]


def flags(profile: ModelProfile, model_path: str, extras: list[str]) -> list[str]:
    # -c is the total across slots; a profile's context_length is per request (as vLLM's
    # --max-model-len), so every slot can take a full-length prompt.
    total_ctx = profile.context_length * profile.parallel
    out = [
        "-m",
        model_path,
        "--alias",
        served_name(profile),
        "-c",
        str(total_ctx),
        "-np",
        str(profile.parallel),
    ]
    # llama.cpp renames flags over time (``--no-mmap`` became ``--load-mode none``; ``-fa`` took a
    # value): a default is left out when the config names the same option itself.
    for aliases, argv in OVERRIDABLE_DEFAULTS:
        if not any(f.split("=", 1)[0] in aliases for f in extras):
            out += argv
    return [*out, "--metrics"]


def reservations(
    flags: list[str], profile: ModelProfile, budget_gb: float | None, device: DeviceMemory | None = None
) -> list[Reservation]:
    return common_reservations(profile)  # no pool fraction: only the profile's own reserve

"""Memory copy bandwidth of this machine, the denominator of decode efficiency. One command, ~10 s:

    .venv/bin/python benchmarks/bandwidth.py [--threads 1,N] [--size-mib 256] [--repeats 5]

Runs :func:`strix_pipeline.memory.bandwidth.measure_copy_bandwidth` with 1 thread and with
``os.cpu_count()`` threads (or ``--threads``): numpy copies over buffers far larger than any L3, bytes
counted as read + write (2 x copied, STREAM's convention), the best of the passes. When the local
models are on this machine (``make run`` puts them in the cache) it adds the bytes each reads per
generated token and the decode speed the measured bandwidth allows at most (its ceiling at batch 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _host import cpu_model  # noqa: E402

from strix_pipeline.memory.bandwidth import BYTES_COUNTED, measure_copy_bandwidth  # noqa: E402
from strix_pipeline.memory.bytes_per_token import ModelBytes, from_gguf, from_hf_checkpoint  # noqa: E402
from strix_pipeline.provision.cache import cache_dir  # noqa: E402
from strix_pipeline.provision.gemma_checkpoint import find_checkpoint, gguf_sha256  # noqa: E402

GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
CONTEXT_TOKENS = 256  # a short chat's context: the KV read is a few percent of the weights here


def _local_models() -> list[tuple[str, ModelBytes]]:
    gguf = cache_dir() / "models" / GGUF_NAME
    if not gguf.is_file():
        return []
    out = [("llama-server (GGUF)", from_gguf(gguf))]
    checkpoint = find_checkpoint(gguf_sha256(gguf))
    if checkpoint is not None:
        out.append(("vLLM (bf16 safetensors)", from_hf_checkpoint(checkpoint.path)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default=f"1,{os.cpu_count() or 1}", help="comma-separated counts")
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    counts = sorted({int(t) for t in args.threads.split(",")})
    table = Table(title=f"copy bandwidth, {args.size_mib} MiB per pass")
    for col in ("threads", "GB/s", "passes", "time s"):
        table.add_column(col, justify="right")
    best = None
    for n in counts:
        started = time.monotonic()
        probe = measure_copy_bandwidth(n, size_mib=args.size_mib, repeats=args.repeats)
        took = time.monotonic() - started
        table.add_row(str(n), f"{probe.bytes_per_s / 1e9:.1f}", str(probe.repeats), f"{took:.1f}")
        best = probe if best is None or probe.bytes_per_s > best.bytes_per_s else best
    console = Console()
    console.print(table)
    models = _local_models()
    if best is not None and models:
        ceiling = Table(
            title=f"decode ceiling at {best.bytes_per_s / 1e9:.1f} GB/s, {CONTEXT_TOKENS} tokens of context"
        )
        for col in ("model", "weights MB", "KV B/token", "MB/token", "tok/s at most"):
            ceiling.add_column(col, justify="right")
        for label, m in models:
            per_token = m.bytes_per_token(CONTEXT_TOKENS)
            ceiling.add_row(
                label,
                f"{m.weight_bytes / 1e6:.1f}",
                str(m.kv_bytes_per_token),
                f"{per_token / 1e6:.1f}",
                f"{best.bytes_per_s / per_token:.0f}",
            )
        console.print(ceiling)
    console.print(f"bytes counted: {BYTES_COUNTED}; CPU {cpu_model()}; {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Prefill and decode speed of the embedded llama-server build this machine runs. One command:

    .venv/bin/python benchmarks/engine_speed.py [--threads 1] [--repeats 2] [--binary PATH]

Starts llama-server (the build ``make`` made for this CPU, or ``--binary``/``$STRIX_LLAMA_SERVER``)
with Gemma 3 270M Q4_K_M on a loopback port and sends, ``--repeats`` times each, an ~867-token prompt
with ``cache_prompt: false`` (prefill) and a 64-token completion with ``ignore_eos`` (decode). The
speeds are llama-server's own ``timings`` (``prompt_per_second``, ``predicted_per_second``), so the
client does not enter them. The defaults repeat the earlier measurement docs/benchmarks.md cites (one
thread, two requests each), where the portable AVX2 build gave prefill 152-156 tok/s and decode 23 tok/s
on this project's machine type.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _host import cpu_model  # noqa: E402

from strix_pipeline.hosts.local.llama_server import LLAMA_SERVER_ENV, LocalLlamaServer  # noqa: E402
from strix_pipeline.provision import llamacpp_build  # noqa: E402

PROMPT_SENTENCE = "The quick brown fox jumps over the lazy dog while the engineers measure tokens. "


def _prompt(client: httpx.Client, base: str, tokens: int) -> tuple[str, int]:
    text, n = "", 0
    while n < tokens:
        text += PROMPT_SENTENCE
        n = len(client.post(f"{base}/tokenize", json={"content": text}).json()["tokens"])
    return text, n


def measure(threads: int, repeats: int) -> tuple[list[dict], str]:
    rows = []
    with LocalLlamaServer(ctx_size=2048, parallel=1, threads=threads, ready_timeout_s=180) as srv:
        with httpx.Client(timeout=600) as c:
            prompt, n = _prompt(c, srv.base_url, 867)
            for i in range(repeats):
                t = c.post(
                    f"{srv.base_url}/completion",
                    json={"prompt": prompt, "n_predict": 1, "cache_prompt": False},
                ).json()["timings"]
                rows.append(
                    {"what": "prefill", "i": i, "tokens": t["prompt_n"], "tok_s": t["prompt_per_second"]}
                )
            for i in range(repeats):
                t = c.post(
                    f"{srv.base_url}/completion",
                    json={
                        "prompt": "def fibonacci(n):",
                        "n_predict": 64,
                        "ignore_eos": True,
                        "cache_prompt": False,
                    },
                ).json()["timings"]
                rows.append(
                    {"what": "decode", "i": i, "tokens": t["predicted_n"], "tok_s": t["predicted_per_second"]}
                )
        build = srv.engine_build or "?"
    return rows, build


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--binary", help="another llama-server to measure (e.g. a native build)")
    args = parser.parse_args()
    if args.binary:
        os.environ[LLAMA_SERVER_ENV] = args.binary
    what = args.binary or "strix build " + str((llamacpp_build.installed_build() or {}).get("key"))
    spec = llamacpp_build.build_spec()
    started = time.monotonic()
    rows, build = measure(args.threads, args.repeats)
    table = Table(title=f"llama-server speed: {what}, {args.threads} thread(s), Gemma 3 270M Q4_K_M")
    for col in ("measure", "request", "tokens", "tok/s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["what"], str(r["i"] + 1), str(r["tokens"]), f"{r['tok_s']:.1f}")
    console = Console()
    console.print(table)
    flags = " ".join(spec.cpu_flags) if not args.binary else "(external binary)"
    console.print(f"build_info {build}; ISA {flags}; CPU {cpu_model()}; {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

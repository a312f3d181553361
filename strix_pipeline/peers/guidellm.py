"""GuideLLM 0.8 benchmarks JSON (``guidellm run ... --output kind=json``): one benchmark, one level.

Read from ``$.benchmarks[i].metrics`` the way GuideLLM's console prints them
(``benchmark/outputs/console.py``): latencies over the ``successful`` requests (TTFT p50 =
``time_to_first_token_ms.successful.median``; ``request_latency`` is in seconds), throughputs as the
``total`` mean of the Server Throughput table (output tok/s = ``output_tokens_per_second.total.mean``,
req/s = ``requests_per_second.total.mean``); GuideLLM's ITL is strix's TPOT (see ``_LATENCIES``).
The version is ``$.metadata.guidellm_version``. Levels
follow the strategy: ``synchronous`` is concurrency 1, ``concurrent`` its ``streams``, ``throughput``
its ``max_concurrency`` (every request at once without one), ``constant`` and ``poisson`` their
``rate`` (level ``rate x 60`` of kind ``rate``, as strix levels an open loop). The scenario is
``random`` for GuideLLM's ``synthetic_text`` data (strix's name for its synthetic run), else
``guidellm``; ``--scenario`` names another.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strix_pipeline.peers.common import (
    Field,
    ImportOptions,
    RecordedVersion,
    checked_time,
    level_for,
    peer_result,
)
from strix_pipeline.records import LevelAggregate, RunResult

TOOL = "guidellm"
VERSION = RecordedVersion(("metadata", "guidellm_version"), ("0.8",), "GuideLLM", "benchmarks JSON")
# GuideLLM's latency metrics (successful requests) -> strix's columns, with the factor to ms.
# GuideLLM's "ITL" is (latency - TTFT) / (tokens - 1) of each request (weighted by its tokens): the
# definition of strix's (and vLLM's) TPOT. Its "TPOT" is latency / tokens, TTFT included, which strix
# has no column for; nor does GuideLLM give the gaps between streamed events (strix's ITL).
_LATENCIES = {
    "time_to_first_token_ms": ("ttft", 1.0),
    "inter_token_latency_ms": ("tpot", 1.0),
    "request_latency": ("e2e", 1000.0),  # seconds
}


def detect(doc: Any) -> bool:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return isinstance(meta, dict) and "guidellm_version" in meta and "benchmarks" in doc


def load(path: Path, opts: ImportOptions) -> RunResult:
    doc, f, version = VERSION.read(path, opts)
    benchmarks = f.arr(doc, "benchmarks")
    scenario = opts.scenario or _scenario(doc)
    aggs: list[LevelAggregate] = []
    model: str | None = None
    starts: list[float] = []
    ends: list[float] = []
    for i, b in enumerate(benchmarks):
        where = f"$.benchmarks[{i}]"
        agg, b_model = _level(f, b, where, scenario)
        if any((a.level, a.level_kind) == (agg.level, agg.level_kind) for a in aggs):
            raise f.fail(
                f"{where}.config.strategy", f"a second benchmark at level {agg.level} ({agg.level_kind})"
            )
        aggs.append(agg)
        model = model or b_model
        starts.append(f.req_num(b, "start_time", where))
        ends.append(f.req_num(b, "end_time", where))
    return peer_result(
        path,
        tool=TOOL,
        version=version,
        opts=opts,
        model=model,
        started_at=checked_time(
            f, "$.benchmarks[*].start_time", lambda: datetime.fromtimestamp(min(starts), UTC)
        ),
        ended_at=checked_time(f, "$.benchmarks[*].end_time", lambda: datetime.fromtimestamp(max(ends), UTC)),
        aggregates=aggs,
        command="guidellm run",
    )


def _scenario(doc: Mapping[str, Any]) -> str:
    try:
        kinds = {d.get("kind") for d in doc["config"]["spec"]["data"]}
    except (KeyError, TypeError, AttributeError):
        return TOOL
    return "random" if kinds == {"synthetic_text"} else TOOL


def _level(f: Field, b: Any, where: str, scenario: str) -> tuple[LevelAggregate, str | None]:
    config = f.obj(b, "config", where)
    strategy = f.obj(config, "strategy", f"{where}.config")
    sw = f"{where}.config.strategy"
    kind = f.req_text(strategy, "type_", sw)
    metrics = f.obj(b, "metrics", where)
    mw = f"{where}.metrics"
    made = f.obj(f.obj(b, "scheduler_metrics", where), "requests_made", f"{where}.scheduler_metrics")
    rw = f"{where}.scheduler_metrics.requests_made"
    ok = f.count(made, "successful", rw)
    failed = f.count(made, "errored", rw) + f.count(made, "incomplete", rw)
    rate: float | None = None
    conc: int | None = None
    if kind == "synchronous":
        conc = 1
    elif kind == "concurrent":
        conc = f.count(strategy, "streams", sw)
    elif kind == "throughput":
        raw = f.get(strategy, "max_concurrency", sw)
        conc = ok + failed if raw is None else f.count(strategy, "max_concurrency", sw)
    elif kind in ("constant", "poisson"):
        rate = f.req_num(strategy, "rate", sw)
        if rate <= 0:
            raise f.fail(f"{sw}.rate", f"expected a positive rate, got {rate!r}")
    else:
        raise f.fail(
            f"{sw}.type_",
            f"strategy {kind!r} is not one this reader levels (synchronous, concurrent, "
            "throughput, constant, poisson)",
        )
    level, level_kind = level_for(max_concurrency=conc, rate=rate)
    agg = LevelAggregate(
        run_id="",
        scenario=scenario,
        level=level,
        level_kind=level_kind,
        requests_ok=ok,
        requests_failed=failed,
        duration_s=f.req_num(b, "duration", where),
        requested_rate=rate,
    )
    for name, (col, factor) in _LATENCIES.items():
        stats = f.obj(f.obj(metrics, name, mw), "successful", f"{mw}.{name}")
        sw2 = f"{mw}.{name}.successful"
        pct = f.obj(stats, "percentiles", sw2)
        setattr(agg, f"{col}_mean_ms", _ms(f.req_num(stats, "mean", sw2), factor, stats, ok))
        setattr(agg, f"{col}_p50_ms", _ms(f.req_num(stats, "median", sw2), factor, stats, ok))
        for p in ("p90", "p95", "p99"):
            setattr(agg, f"{col}_{p}_ms", _ms(f.req_num(pct, p, f"{sw2}.percentiles"), factor, stats, ok))
    agg.output_tokens_per_s = _total_mean(f, metrics, "output_tokens_per_second", mw)
    agg.requests_per_s = _total_mean(f, metrics, "requests_per_second", mw)
    prompt = f.obj(f.obj(metrics, "prompt_token_count", mw), "successful", f"{mw}.prompt_token_count")
    agg.input_tokens_mean = f.req_num(prompt, "mean", f"{mw}.prompt_token_count.successful") if ok else None
    out = f.obj(f.obj(metrics, "output_token_count", mw), "successful", f"{mw}.output_token_count")
    agg.output_tokens_total = round(f.req_num(out, "total_sum", f"{mw}.output_token_count.successful"))
    goodput = metrics.get("request_goodput")
    if isinstance(goodput, Mapping):
        agg.goodput_requests_per_s = _total_mean(f, metrics, "request_goodput", mw)
    backend = config.get("backend")
    model = (
        backend.get("model")
        if isinstance(backend, Mapping) and isinstance(backend.get("model"), str)
        else None
    )
    return agg, model or None


def _ms(value: float, factor: float, stats: Mapping[str, Any], ok: int) -> float | None:
    # GuideLLM writes 0.0 for a statistic over no requests: strix keeps "no data" as NULL
    if ok == 0 or stats.get("count") == 0:
        return None
    return value * factor


def _total_mean(f: Field, metrics: Mapping[str, Any], name: str, where: str) -> float:
    total = f.obj(f.obj(metrics, name, where), "total", f"{where}.{name}")
    return f.req_num(total, "mean", f"{where}.{name}.total")

"""What `strix bench` writes: the ``--out`` JSON (schema: docs/bench-output.md), vLLM's result document
for ``--result-format vllm``, and the file writing both (``--append-result`` as vLLM's)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strix_pipeline.config import SLO, ConfigError
from strix_pipeline.loadgen.metrics import distributions, token_totals, total_tokens_per_s
from strix_pipeline.loadgen.vllm_flags import Plan
from strix_pipeline.loadgen.vllm_result import vllm_result
from strix_pipeline.records import HARNESS_VERSION, LevelAggregate, RequestRecord

OUT_SCHEMA_VERSION = 1
LEVEL_KEY = {
    "concurrency": "concurrency",
    "input_tokens": "input_tokens",
    "phase": "phase",
    "rate": "rate_per_min",
    "single": "level",
}


def _stats(a: LevelAggregate, name: str) -> dict[str, float | None]:
    return {s: getattr(a, f"{name}_{s}_ms") for s in ("mean", "p50", "p90", "p95", "p99")}


def _spread(dist: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    d = dist.get(name)
    return {k: d[k] for k in ("count", "std", "min", "max")} if d else {}


def level_json(a: LevelAggregate, records: Sequence[RequestRecord] = ()) -> dict[str, Any]:
    """One level of the ``--out`` JSON; ``records`` (the level's requests) add each metric's count,
    std, min and max, the input token total and the total token throughput."""

    dist = distributions(records) if records else {}
    key = LEVEL_KEY.get(a.level_kind, "level")
    out: dict[str, Any] = {key: ("cold" if a.level == 0 else "warm") if a.level_kind == "phase" else a.level}
    out |= {
        "level": a.level,
        "level_kind": a.level_kind,
        "requests_ok": a.requests_ok,
        "requests_failed": a.requests_failed,
        "duration_s": a.duration_s,
        "ttft_ms": _stats(a, "ttft")
        | {"p95_ci_low": a.ttft_p95_ci_low_ms, "p95_ci_high": a.ttft_p95_ci_high_ms}
        | _spread(dist, "ttft"),
        "tpot_ms": _stats(a, "tpot") | _spread(dist, "tpot"),
        "itl_ms": _stats(a, "itl") | _spread(dist, "itl"),
        "itl_per_token_ms": _stats(a, "itl_per_token") | _spread(dist, "itl_per_token"),
        "e2e_ms": _stats(a, "e2e") | _spread(dist, "e2e"),
        "queue_ms": {"mean": a.queue_mean_ms, "p95": a.queue_p95_ms} | _spread(dist, "queue"),
        "input_tokens_mean": a.input_tokens_mean,
        "input_tokens_total": token_totals(records)[0] if records else None,
        "output_tokens_total": a.output_tokens_total,
        "output_tokens_estimated": a.output_tokens_estimated,
        "output_tokens_per_s": a.output_tokens_per_s,
        "total_tokens_per_s": total_tokens_per_s(records, a.duration_s) if records else None,
        "requests_per_s": a.requests_per_s,
        "goodput_requests_per_s": a.goodput_requests_per_s,
        "requested_rate": a.requested_rate,
        "achieved_rate": a.achieved_rate,
        "prefill_tokens_per_s": a.prefill_tokens_per_s,
        "decode_tokens_per_s": a.decode_tokens_per_s,
        "cached_tokens_mean": a.cached_tokens_mean,
    }
    return out


def level_records(result: Any, a: LevelAggregate) -> list[RequestRecord]:
    """The measured requests of one level of a result."""
    return [
        r
        for r in result.requests
        if r.scenario == a.scenario and r.level == a.level and r.level_kind == a.level_kind and not r.warmup
    ]


def result_json(
    result: Any,
    *,
    run_id: str,
    url: str,
    model: str | None,
    profile_name: str,
    slo: SLO,
    started: datetime,
    metadata: dict[str, str] | None = None,
    vllm_compat: dict[str, Any] | None = None,
) -> dict[str, Any]:
    scenarios: dict[str, dict[str, Any]] = {}
    for a in result.aggregates:
        scenarios.setdefault(a.scenario, {"levels": []})["levels"].append(
            level_json(a, level_records(result, a))
        )
    for name, block in scenarios.items():
        rs = [r for r in result.requests if r.scenario == name and not r.warmup]
        errors: dict[str, int] = {}
        for r in rs:
            if not r.ok:
                errors[r.error_class or "unknown"] = errors.get(r.error_class or "unknown", 0) + 1
        block["errors_by_class"] = errors
    return {
        "schema_version": OUT_SCHEMA_VERSION,
        "harness_version": HARNESS_VERSION,
        "run_id": run_id,
        "url": url,
        "model": model,
        "profile": profile_name,
        "started_at": started.isoformat(),
        "ended_at": datetime.now(UTC).isoformat(),
        "slo": slo.model_dump(),
        "smoke_ok": result.smoke_ok,
        "smoke_output": result.smoke_output,
        "errors": result.errors,
        "metadata": metadata or {},
        "vllm_compat": vllm_compat or None,  # the vLLM flags of the run, when it was given any
        "scenarios": scenarios,
    }


def write_json(path: Path, doc: dict[str, Any], append: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if append:  # as vLLM's --append-result: one JSON object a line
        with path.open("a+", encoding="utf-8") as f:
            if f.tell() != 0:
                f.write("\n")
            json.dump(doc, f, default=str)
        return
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")


def vllm_doc(result: Any, plan: Plan, model: str) -> dict[str, Any]:

    aggs = [a for a in result.aggregates if a.scenario in ("random", "dataset")]
    if len(aggs) != 1:
        raise ConfigError(f"--result-format vllm: the run has {len(aggs)} levels, vLLM's result one")
    a = aggs[0]
    opts = plan.vllm
    opts.model_id = plan.model_id or model
    opts.num_prompts = plan.requests or (a.requests_ok + a.requests_failed)
    opts.request_rate = plan.rate if plan.rate is not None else math.inf
    # vLLM's max_concurrency: the closed loop's clients, or the open loop's cap; None: no limit
    capped = plan.mode == "random" and plan.levels is not None
    if plan.rate is None:
        opts.max_concurrency = a.level if capped or plan.mode == "dataset" else None
    else:
        opts.max_concurrency = plan.levels[0] if capped and plan.levels else None
    return vllm_result(level_records(result, a), a, opts)

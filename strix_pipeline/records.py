"""Typed records exchanged between the load generator, launchers, registry, warehouse and analysis.

Each dataclass maps one-to-one onto a warehouse table (same name, same column order): the warehouse
derives nothing the producer did not write, so what a user queries is what the harness measured.
Times are UTC-aware ``datetime``; durations are milliseconds; memory is bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

HARNESS_VERSION = "0.1.0"


@dataclass
class RequestRecord:
    """One request as the client saw it (table ``requests``). A failure is a row, never dropped."""

    run_id: str
    scenario: str
    level: int  # concurrency for a sweep, input tokens for the ladder, 0 for cold / 1 for warm, ...
    level_kind: str  # "concurrency" | "input_tokens" | "rate" | "phase" | "single"
    request_index: int
    warmup: bool
    sent_at: datetime  # wall clock, for people
    sent_offset_ms: float  # perf_counter offset from the start of the level, for arithmetic
    queue_ms: float  # time waiting for a client slot (closed loop) or behind schedule (open loop)
    ttfb_ms: float | None
    ttft_ms: float | None
    e2e_ms: float | None
    input_tokens: int | None
    input_tokens_estimated: bool
    output_tokens: int | None
    output_tokens_estimated: bool
    cached_tokens: int | None
    ok: bool
    error_class: str | None
    error_message: str | None
    event_offsets_ms: list[float] = field(default_factory=list)  # content events, from send
    event_tokens: list[int] = field(default_factory=list)  # tokens per content event when known, else []
    server_timings: str | None = None  # JSON of llama-server's `timings`, verbatim
    prompt_id: str | None = None


# Flat aggregate columns: one name, one meaning (see DESIGN.md "Metric definitions").
LATENCY_METRICS = ("ttft", "tpot", "itl", "itl_per_token", "e2e")
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99")


@dataclass
class LevelAggregate:
    """Aggregate of one (run, scenario, level) over non-warm-up requests (table ``aggregates``)."""

    run_id: str
    scenario: str
    level: int
    level_kind: str
    requests_ok: int
    requests_failed: int
    duration_s: float | None  # last completion - first send
    ttft_mean_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p95_ms: float | None = None
    ttft_p99_ms: float | None = None
    ttft_p95_ci_low_ms: float | None = None
    ttft_p95_ci_high_ms: float | None = None
    tpot_mean_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p95_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p95_ms: float | None = None
    itl_p99_ms: float | None = None
    itl_per_token_mean_ms: float | None = None
    itl_per_token_p50_ms: float | None = None
    itl_per_token_p90_ms: float | None = None
    itl_per_token_p95_ms: float | None = None
    itl_per_token_p99_ms: float | None = None
    e2e_mean_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p90_ms: float | None = None
    e2e_p95_ms: float | None = None
    e2e_p99_ms: float | None = None
    queue_mean_ms: float | None = None
    queue_p95_ms: float | None = None
    input_tokens_mean: float | None = None
    output_tokens_total: int | None = None
    output_tokens_estimated: bool = False
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    goodput_requests_per_s: float | None = None
    requested_rate: float | None = None  # open loop only
    achieved_rate: float | None = None
    prefill_tokens_per_s: float | None = None  # input tokens / TTFT (ladder, prefix cache)
    decode_tokens_per_s: float | None = None  # 1000 / TPOT (decode)
    cached_tokens_mean: float | None = None


@dataclass
class RunRecord:
    """One benchmark run = (host, engine, image digest, model profile, suite) (table ``runs``)."""

    run_id: str
    host: str
    engine: str  # engine name from the config, e.g. "llamacpp", "vllm"
    engine_kind: str  # "llamacpp" | "vllm" | "sglang"
    image_repository: str | None  # None on the local host
    image_tag: str | None
    image_digest: str | None  # "sha256:..." ; local runs use "local:<build>"
    model_profile: str
    model: str
    quantization: str
    suite: str  # "standard" suite name
    profile: str  # "quick" | "standard"
    fingerprint: str
    harness_version: str
    engine_build: str | None
    launch_command: str | None
    engine_flags: str | None  # JSON list of the engine flags that matter for comparability
    status: str  # "ok" | "partial" | "failed_start" | "failed_serve" | "failed_guard" | "error"
    failure_reason: str | None
    log_tail: str | None
    started_at: datetime
    ended_at: datetime | None
    dagster_run_id: str | None = None
    rocm_version: str | None = None
    kernel: str | None = None
    firmware: str | None = None
    kernel_cmdline: str | None = None
    ttm_pages_limit: int | None = None
    baseline_bytes: int | None = None  # memory in use before the engine started
    loaded_idle_bytes: int | None = None  # after load, idle
    held_bytes: int | None = None  # loaded_idle - baseline
    peak_bytes: int | None = None
    after_stop_bytes: int | None = None
    memory_returned: bool | None = None  # after_stop within tolerance of baseline
    image_version: str | None = None  # human version (tag or label)
    image_sort_key: str | None = None  # explicit version order
    model_family: str | None = None  # ModelProfile.family: C3/C5 compare engines within one family


@dataclass
class MemorySample:
    """One counter reading (table ``memory_samples``). Several sources are kept: no single one is trusted."""

    run_id: str
    sampled_at: datetime
    phase: str  # "baseline" | "loading" | "idle" | "bench" | "after_stop"
    source: str  # "sysfs:card0" | "meminfo" | "rocm-smi:card0" | "process" | "amd-smi:0"
    metric: str  # "vram_used" | "gtt_used" | "vram_total" | "gtt_total" | "mem_used" | "rss"
    value_bytes: int


@dataclass
class ServerMetricSample:
    """One Prometheus sample scraped from the engine (table ``server_metrics``)."""

    run_id: str
    scenario: str
    level: int
    scraped_at: datetime
    phase: str  # "before" | "during" | "after"
    name: str  # e.g. "llamacpp:tokens_predicted_total", "vllm:kv_cache_usage_perc"
    labels: str  # JSON object of the sample's labels
    value: float


@dataclass
class ImageRecord:
    """One (repository, tag) as last seen in its registry (table ``images``)."""

    engine: str
    registry: str
    repository: str
    tag: str
    digest: str
    floating: bool
    created: datetime | None
    version: str | None  # org.opencontainers.image.version, else the tag
    revision: str | None
    labels: str | None  # JSON
    sort_key: str  # explicit version order, see registry.version_sort_key
    first_seen: datetime
    last_seen: datetime
    gone: bool = False
    gone_since: datetime | None = None


@dataclass
class CriterionResult:
    """One criterion of one evaluation (table ``decisions``)."""

    evaluation_id: str
    evaluated_at: datetime
    host: str
    verdict: str  # the evaluation's verdict, repeated on each row for easy filtering
    criterion: str  # "C1".."C5"
    name: str  # "official_image_starts", ...
    required: bool
    status: str  # "pass" | "fail" | "unknown"
    value: float | None
    threshold: float | None
    ci_low: float | None
    ci_high: float | None
    unit: str | None
    evidence_run_ids: list[str]
    image_digests: list[str]
    quantization_mismatch: bool
    reason: str
    first_held_at: datetime | None


@dataclass
class RunResult:
    """Everything one benchmark run produced: loaded into the warehouse in one transaction."""

    run: RunRecord
    requests: list[RequestRecord] = field(default_factory=list)
    aggregates: list[LevelAggregate] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)
    server_metrics: list[ServerMetricSample] = field(default_factory=list)
    # None: the host has no production engine; False: it was stopped and could not be restored
    production_restored: bool | None = None


def as_dicts(items: list[Any]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(i) for i in items]


def column_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]

"""The warehouse's tables, one dataclass each: a level's aggregates, a run, its memory and server
metric samples, an image, a criterion's result, and everything one run produced."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime

from strix_pipeline.records.request_table import RequestRecord, RequestTable

HARNESS_VERSION = "0.1.0"


# The registry name of engine builds installed on a `local` host (llama-server built here, vLLM's CPU
# package): they are images too, registered by image_scan.py, never discovered in a registry.
LOCAL_REGISTRY = "local"


# Flat aggregate columns: one name, one meaning (see docs/bench-output.md, "Metric definitions").
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
    # measured requests the level set out to send (None: recorded before schema v3), and why it sent
    # fewer when it did (e.g. its max duration): a short level is complete only with its reason
    requests_planned: int | None = None
    stopped_reason: str | None = None


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
    # "ok" | "partial" | "failed_start" | "failed_serve" | "failed_guard" | "error" | "cancelled"
    # (interrupted: Ctrl-C or a terminated Dagster run; never usable evidence, like the failures)
    # | "deadline" (still going at the restore's time: stopped, a failure with its reason)
    status: str
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
    # schema v6: the production engine's outage on a Box run (None: no production engine there):
    # when it was stopped, when it answered its health URL again, and the part of that window that
    # was the pipeline's own (waits, settling, stopping) rather than the engine's load and traffic
    production_down_at: datetime | None = None
    production_up_at: datetime | None = None
    production_overhead_s: float | None = None
    # schema v7: the distance to the memory-bandwidth limit (runner/efficiency.py), with its inputs:
    # the host's copy bandwidth (read+write bytes/s) and its threads, the model's weight bytes and KV
    # bytes per token, the single-client decode speed and the context it ran at, and the figure in
    # (0, 1] -- None, with efficiency_problem saying why, when the inputs do not give one
    bandwidth_bytes_per_s: float | None = None
    bandwidth_threads: int | None = None
    model_weight_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    decode_tok_s: float | None = None
    decode_context_tokens: float | None = None
    decode_efficiency: float | None = None
    efficiency_problem: str | None = None
    # schema v9: the engine's compile cache at its start (engines/<kind>.py COMPILE_CACHE_DIR, kept in a
    # volume per image): "cold" (nothing compiled yet: the start includes the compilation), "warm", or
    # None (the engine compiles nothing at start, or a local host)
    compile_cache: str | None = None
    # schema v10: the device total as HIP sees it (KFD topology) and the amdttm module's pages_limit
    # (DKMS drivers), read by the host's probe; ttm_pages_limit above is the limit in force
    hip_device_total_bytes: int | None = None
    amdttm_pages_limit: int | None = None
    # schema v12: what the engine started with besides its argv. engine_env: the environment the
    # configuration gave the container (the engine's `env` and its image source's), a JSON object --
    # part of the fingerprint; image_env: the image's own ENV (its config, read without running it), a
    # JSON list of "NAME=value" as Docker gives it -- recorded, not compared (it moves with every
    # release, the trend's x-axis); criterion C1 reads both. None: not known (a local host, older runs).
    engine_env: str | None = None
    image_env: str | None = None
    # schema v13: the held memory by the engine's own log (memory/breakdown.py; other = held - both),
    # the tokens its KV cache holds, and the production configuration's KV pool (C5 shows it beside)
    weights_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_capacity_tokens: int | None = None
    production_pool_bytes: int | None = None
    # schema v14: the dtype a CPU engine computes in and why (engines/vllm_dtype.py; --dtype is in
    # engine_flags, so in the fingerprint)
    engine_dtype: str | None = None
    # schema v18: what the suite profile asks of the engine (fingerprint.workload_digest), so a profile
    # whose requests changed -- or another profile -- starts a new series
    workload: str | None = None
    # schema v21: power and energy (hosts/probes/energy.py) from the GPU samples beside the memory ones:
    # the package power before the engine started (stored apart, never subtracted), the files that gave
    # it, the energy per measured request, output tokens per joule and the mean power over the client's
    # window of the single-client decode level and of the decision's load (load_level, the sweep's
    # concurrency), why they are empty (energy_problem: no counter, gaps, ...), and whether the GPU
    # throttled while busy (throttle_reason: the rule that fired; None: not known)
    idle_power_w: float | None = None
    power_source: str | None = None
    decode_j_per_request: float | None = None
    decode_tokens_per_j: float | None = None
    decode_power_w: float | None = None
    load_level: int | None = None
    load_j_per_request: float | None = None
    load_tokens_per_j: float | None = None
    load_power_w: float | None = None
    energy_problem: str | None = None
    throttled: bool | None = None
    throttle_reason: str | None = None
    # what a baseline run's settings came from: "production as deployed (sha256:<digest of the read>)"
    # when they were read from production (planning/production_baseline.py); None: the configuration's
    baseline_source: str | None = None


@dataclass
class MemorySample:
    """One counter reading (table ``memory_samples``). Several sources are kept: no single one is trusted.

    The GPU's power, clocks, temperature and load are sampled in the same reads (source ``gpu:<card>:<file>``
    or ``rapl:<zone>``, memory/gpu_counters.py): for those, ``value_bytes`` is the file's integer in the
    unit the metric names (``power_uw``, ``sclk_hz``, ``temp_mdegc``, ``busy_pct``, ``energy_uj``)."""

    run_id: str
    sampled_at: datetime
    phase: str  # "baseline" | "loading" | "idle" | "bench" | "after_stop"
    source: str  # "sysfs:card0" | "meminfo" | "rocm-smi:card0" | "process" | "amd-smi:0" | "gpu:card0:..."
    metric: str  # "vram_used" | "gtt_used" | "vram_total" | "gtt_total" | "mem_used" | "rss" | "power_uw" ...
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
    # What the exposition said about the sample's family (schema v4; NULL on rows stored before):
    # the family its `# TYPE` / `# HELP` lines name (a histogram's `x_bucket`, `x_sum` and `x_count`
    # samples are family `x`), its type -- "counter" (a running total: read its increase, never plot
    # it as a level), "gauge", "histogram", "summary", ... or "untyped" when the exposition gave no
    # `# TYPE` -- and its `# HELP` text (None: no HELP line).
    family: str | None = None
    metric_type: str | None = None
    metric_help: str | None = None


@dataclass
class QualityAnswer:
    """One item of the evaluation set as a run answered it (table ``quality_answers``)."""

    run_id: str
    set_version: str  # quality.items.set_version(): scores compare only on the same set
    item_id: str
    passed: bool
    answer: str  # the completion's first line, at most 200 characters


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
    # schema v5: the verdict is `switch` but rests on one candidate run (see analysis.decision)
    provisional: bool = False
    # schema v15: C3 / C5 judged on two match-ups (analysis.decision.criteria.MATCHUPS): the match-up the
    # fields above are of (decision.decided_by), and the criterion on the other one, shown, never deciding
    matchup: str | None = None
    other_matchup: str | None = None
    other_status: str | None = None
    other_value: float | None = None
    other_threshold: float | None = None
    other_ci_low: float | None = None
    other_ci_high: float | None = None
    other_run_ids: list[str] | None = None
    other_reason: str | None = None


@dataclass
class RunResult:
    """Everything one benchmark run produced: loaded into the warehouse in one transaction."""

    run: RunRecord
    # the load generator fills a RequestTable; a plain list is accepted too (and converted on load)
    requests: RequestTable | list[RequestRecord] = field(default_factory=RequestTable)
    aggregates: list[LevelAggregate] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)
    server_metrics: list[ServerMetricSample] = field(default_factory=list)
    quality: list[QualityAnswer] = field(default_factory=list)
    # None: the host has no production engine; False: it was stopped and could not be restored
    production_restored: bool | None = None


def column_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]

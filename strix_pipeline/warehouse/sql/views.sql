-- Views for people (and for the decision and the trend charts, which read them).
-- Re-created in full whenever this file changes; they hold no data. Every view names a run by
-- run_id and a version by image_version, ordered by image_sort_key (the explicit version order,
-- never the date a run happened). `series` is the series fingerprint: results with different
-- series never belong on one trend line.

-- The run facts every other view joins to, with the fallbacks spelled once.
CREATE OR REPLACE VIEW v_run_base AS
SELECT
    r.run_id,
    r.host,
    r.engine,
    r.engine_kind,
    coalesce(r.image_repository || ':' || r.image_tag, r.image_digest) AS image,
    r.image_digest,
    coalesce(r.image_version, r.image_tag, r.image_digest) AS image_version,
    r.image_sort_key,
    r.model_profile,
    r.model,
    coalesce(r.model_family, r.model_profile) AS model_family,
    r.quantization,
    r.suite,
    r.profile,
    r.workload,  -- what the profile asks (fingerprint.workload_digest): in the series
    r.baseline_source,  -- 'production as deployed (<read digest>)' when read from production
    r.status,
    r.status IN ('ok', 'partial') AS usable,
    r.failure_reason,
    r.started_at,
    r.ended_at,
    r.fingerprint,
    r.harness_version,
    r.engine_build,
    r.engine_flags,
    r.engine_dtype,
    r.rocm_version,
    r.kernel,
    r.firmware,
    r.baseline_bytes,
    r.loaded_idle_bytes,
    r.held_bytes,
    r.peak_bytes,
    r.after_stop_bytes,
    r.memory_returned,
    r.dagster_run_id,
    r.image_repository,
    r.image_tag,
    r.launch_command,
    r.production_down_at,
    r.production_up_at,
    r.production_overhead_s,
    r.compile_cache,
    r.hip_device_total_bytes,
    r.amdttm_pages_limit,
    r.bandwidth_bytes_per_s,
    r.bandwidth_threads,
    r.model_weight_bytes,
    r.kv_bytes_per_token,
    r.decode_tok_s,
    r.decode_context_tokens,
    r.decode_efficiency,
    r.efficiency_problem,
    r.idle_power_w,
    r.power_source,
    r.decode_j_per_request,
    r.decode_tokens_per_j,
    r.decode_power_w,
    r.load_level,
    r.load_j_per_request,
    r.load_tokens_per_j,
    r.load_power_w,
    r.energy_problem,
    r.throttled,
    r.throttle_reason,
    -- version order: the explicit sort key of the image, never the date a run happened
    coalesce(r.image_sort_key, r.image_version, r.image_tag, '') AS version_order
FROM runs r;

-- Every aggregate with its run's facts and its series (fingerprint || '/' || scenario): what the
-- charts, the change points and the decision read.
CREATE OR REPLACE VIEW v_run_aggregates AS
SELECT
    b.*,
    b.fingerprint || '/' || a.scenario AS series,
    a.* EXCLUDE (run_id)
FROM v_run_base b
JOIN aggregates a ON a.run_id = b.run_id;

-- The newest run of each engine with each model profile on each host, whatever became of it
-- (failed runs included): "what does it look like now". `latest` means this ordering everywhere.
CREATE OR REPLACE VIEW v_latest_run AS
SELECT *
FROM v_run_base
QUALIFY row_number() OVER (PARTITION BY host, engine, model_profile ORDER BY started_at DESC, run_id DESC) = 1;

CREATE OR REPLACE VIEW v_runs AS
SELECT
    b.run_id,
    b.started_at,
    b.host,
    h.kind AS host_kind,
    b.engine,
    b.engine_kind,
    b.image,
    b.image_version,
    b.image_sort_key,
    b.image_digest,
    b.model_profile,
    b.model,
    b.model_family,
    b.quantization,
    b.suite,
    b.profile,
    b.status,
    b.failure_reason,
    round(date_diff('millisecond', b.started_at, b.ended_at) / 1000.0, 1) AS duration_s,
    a.scenarios,
    a.levels,
    coalesce(a.requests_ok, 0) AS requests_ok,
    coalesce(a.requests_failed, 0) AS requests_failed,
    round(b.held_bytes / 1073741824.0, 2) AS held_gib,
    round(b.peak_bytes / 1073741824.0, 2) AS peak_gib,
    b.memory_returned,
    -- a Box run's outage of the production engine, and the part of it that was the pipeline's own
    round(date_diff('millisecond', b.production_down_at, b.production_up_at) / 1000.0, 1) AS production_offline_s,
    b.production_overhead_s,
    b.compile_cache,  -- 'cold' or 'warm': a start that compiled is not compared with one that did not
    -- the device total as HIP saw it on the Box: what vLLM's and SGLang's pool fractions were of
    round(b.hip_device_total_bytes / 1073741824.0, 2) AS hip_device_total_gib,
    -- share of the memory-bandwidth limit the single-client decode reaches, in (0, 1], with its inputs
    round(b.decode_efficiency, 3) AS decode_efficiency,
    round(b.bandwidth_bytes_per_s / 1e9, 2) AS bandwidth_gb_s,
    b.decode_tok_s,
    b.model_weight_bytes,
    b.kv_bytes_per_token,
    b.decode_context_tokens,
    b.efficiency_problem,
    -- energy while serving (package power integrated over the client's window; idle never subtracted):
    -- at the single-client decode level and at the decision's load (load_level); the idle power apart
    round(b.idle_power_w, 1) AS idle_power_w,
    round(b.decode_power_w, 1) AS decode_power_w,
    round(b.decode_j_per_request, 2) AS decode_j_per_request,
    round(b.decode_tokens_per_j, 3) AS decode_tokens_per_j,
    b.load_level,
    round(b.load_power_w, 1) AS load_power_w,
    round(b.load_j_per_request, 2) AS load_j_per_request,
    round(b.load_tokens_per_j, 3) AS load_tokens_per_j,
    b.power_source,
    b.energy_problem,
    b.throttled,  -- clock or temperature show throttling while busy: the speed may be the chassis's
    b.throttle_reason,
    b.fingerprint,
    b.harness_version,
    b.engine_build,
    b.engine_dtype,  -- what a CPU engine computes in, and why (engines/vllm_dtype.py)
    b.rocm_version,
    b.kernel,
    b.firmware,
    b.dagster_run_id
FROM v_run_base b
LEFT JOIN hosts h ON h.name = b.host
LEFT JOIN (
    SELECT
        run_id,
        count(DISTINCT scenario) AS scenarios,
        count(*) AS levels,
        sum(requests_ok)::BIGINT AS requests_ok,
        sum(requests_failed)::BIGINT AS requests_failed
    FROM aggregates
    GROUP BY run_id
) a ON a.run_id = b.run_id;

-- The newest usable run ('ok' or 'partial') of each engine with each model profile on each host
-- (the same ordering as v_latest_run, over usable runs only).
CREATE OR REPLACE VIEW v_latest_by_engine AS
SELECT
    host,
    engine,
    engine_kind,
    model_family,
    model_profile,
    model,
    quantization,
    run_id,
    status,
    started_at,
    round(date_diff('minute', started_at, now()) / 1440.0, 2) AS age_days,
    image,
    image_version,
    image_sort_key,
    image_digest,
    round(held_bytes / 1073741824.0, 2) AS held_gib,
    held_bytes,
    memory_returned,
    fingerprint
FROM v_run_base
WHERE usable
QUALIFY row_number() OVER (PARTITION BY host, engine, model_profile ORDER BY started_at DESC, run_id DESC) = 1;

-- Latency and throughput per concurrency level (closed-loop sweeps); the C3 criterion and the
-- "TTFT p95 at 5 by version" and "throughput vs concurrency" charts read this.
CREATE OR REPLACE VIEW v_ttft_at_concurrency AS
SELECT
    host, engine, engine_kind, model_family, model_profile, model, quantization, series,
    image_version, image_sort_key, image_digest, run_id, status AS run_status, usable, started_at,
    scenario, level AS concurrency, requests_ok, requests_failed,
    ttft_p50_ms, ttft_p90_ms, ttft_p95_ms, ttft_p95_ci_low_ms, ttft_p95_ci_high_ms, ttft_p99_ms,
    tpot_p50_ms, tpot_p95_ms, itl_p50_ms, itl_p95_ms, e2e_p50_ms, e2e_p95_ms, queue_p95_ms,
    output_tokens_per_s, requests_per_s, goodput_requests_per_s
FROM v_run_aggregates
WHERE level_kind = 'concurrency';

-- Prefill speed per input length (1 client): input tokens / TTFT.
CREATE OR REPLACE VIEW v_prefill_ladder AS
SELECT
    host, engine, engine_kind, model_family, model_profile, quantization, series,
    image_version, image_sort_key, run_id, status AS run_status, usable, started_at,
    level AS input_tokens, input_tokens_mean, requests_ok, requests_failed,
    ttft_p50_ms, ttft_p95_ms, prefill_tokens_per_s
FROM v_run_aggregates
WHERE scenario = 'prefill_ladder';

-- Memory each run held: the run's summary (held = loaded idle - baseline) beside the peaks each
-- sampled counter saw, because no single counter is trusted on unified memory.
CREATE OR REPLACE VIEW v_memory AS
SELECT
    r.host,
    r.engine,
    r.engine_kind,
    r.model_family,
    r.model_profile,
    r.quantization,
    r.image_version,
    r.image_sort_key,
    r.run_id,
    r.status AS run_status,
    r.usable,
    r.started_at,
    r.baseline_bytes,
    r.loaded_idle_bytes,
    r.held_bytes,
    round(r.held_bytes / 1073741824.0, 2) AS held_gib,
    r.peak_bytes,
    round(r.peak_bytes / 1073741824.0, 2) AS peak_gib,
    r.after_stop_bytes,
    r.memory_returned,
    m.samples,
    m.max_vram_used_bytes,
    m.max_gtt_used_bytes,
    m.max_mem_used_bytes
FROM v_run_base r
LEFT JOIN (
    SELECT
        run_id,
        -- memory readings only: the GPU's power, clocks and load share the table (source 'gpu:', 'rapl:')
        count(*) FILTER (WHERE source NOT LIKE 'gpu:%' AND source NOT LIKE 'rapl:%') AS samples,
        max(value_bytes) FILTER (WHERE metric = 'vram_used') AS max_vram_used_bytes,
        max(value_bytes) FILTER (WHERE metric = 'gtt_used') AS max_gtt_used_bytes,
        max(value_bytes) FILTER (WHERE metric = 'mem_used') AS max_mem_used_bytes
    FROM memory_samples
    GROUP BY run_id
) m ON m.run_id = r.run_id;

-- Every criterion of every evaluation, newest first; `latest` marks each host's newest evaluation.
CREATE OR REPLACE VIEW v_decisions AS
SELECT
    evaluated_at,
    host,
    verdict,
    criterion,
    name,
    required,
    status,
    value,
    threshold,
    ci_low,
    ci_high,
    unit,
    quantization_mismatch,
    reason,
    first_held_at,
    evidence_run_ids,
    image_digests,
    evaluation_id,
    evaluated_at = max(evaluated_at) OVER (PARTITION BY host) AS latest
FROM decisions;

-- C3 and C5 on both match-ups: a row per evaluation, criterion and match-up -- "production"
-- (each engine's production format) and "equal_weights" (the baseline serving the candidate's weights);
-- `decides` marks the match-up the verdict took (decision.decided_by).
CREATE OR REPLACE VIEW v_decision_matchups AS
SELECT evaluated_at, host, criterion, matchup, true AS decides, status, value, threshold, ci_low, ci_high,
       unit, evidence_run_ids AS run_ids, reason, evaluation_id,
       evaluated_at = max(evaluated_at) OVER (PARTITION BY host) AS latest
FROM decisions WHERE matchup IS NOT NULL
UNION ALL
SELECT evaluated_at, host, criterion, other_matchup, false, other_status, other_value, other_threshold,
       other_ci_low, other_ci_high, unit, other_run_ids, other_reason, evaluation_id,
       evaluated_at = max(evaluated_at) OVER (PARTITION BY host) AS latest
FROM decisions WHERE other_matchup IS NOT NULL;

-- Aggregates in long form (one row per run, scenario, level and metric) for comparisons.
CREATE OR REPLACE VIEW v_metrics_long AS
UNPIVOT (
    SELECT
        run_id, scenario, level, level_kind,
        ttft_p50_ms, ttft_p95_ms, ttft_p99_ms, tpot_p50_ms, tpot_p95_ms, itl_p50_ms, itl_p95_ms,
        e2e_p50_ms, e2e_p95_ms, queue_p95_ms,
        output_tokens_per_s, requests_per_s, goodput_requests_per_s,
        prefill_tokens_per_s, decode_tokens_per_s
    FROM aggregates
)
ON ttft_p50_ms, ttft_p95_ms, ttft_p99_ms, tpot_p50_ms, tpot_p95_ms, itl_p50_ms, itl_p95_ms,
   e2e_p50_ms, e2e_p95_ms, queue_p95_ms,
   output_tokens_per_s, requests_per_s, goodput_requests_per_s,
   prefill_tokens_per_s, decode_tokens_per_s
INTO NAME metric VALUE value;

-- A vs B: any two runs on one host, per scenario, level and metric. Filter on a_run_id and
-- b_run_id (or engines and versions). ratio = b / a; b_better knows that latencies (*_ms) are
-- better lower and rates better higher. quantization_differs flags unlike-for-like comparisons.
CREATE OR REPLACE VIEW v_compare AS
SELECT
    ra.host,
    ma.scenario,
    ma.level,
    ma.level_kind,
    ma.metric,
    ra.run_id AS a_run_id,
    ra.engine AS a_engine,
    ra.image_version AS a_version,
    ra.model_family AS a_model_family,
    ra.quantization AS a_quantization,
    ma.value AS a_value,
    rb.run_id AS b_run_id,
    rb.engine AS b_engine,
    rb.image_version AS b_version,
    rb.model_family AS b_model_family,
    rb.quantization AS b_quantization,
    mb.value AS b_value,
    round(mb.value / nullif(ma.value, 0), 4) AS ratio,
    round(100.0 * (mb.value - ma.value) / nullif(ma.value, 0), 2) AS delta_pct,
    CASE WHEN ma.metric LIKE '%\_ms' ESCAPE '\' THEN mb.value < ma.value ELSE mb.value > ma.value END AS b_better,
    ra.quantization IS DISTINCT FROM rb.quantization AS quantization_differs,
    ra.model_family = rb.model_family AS same_model_family,
    ra.fingerprint = rb.fingerprint AS same_series,
    ra.started_at AS a_started_at,
    rb.started_at AS b_started_at
FROM v_metrics_long ma
JOIN v_run_base ra ON ra.run_id = ma.run_id
JOIN v_metrics_long mb
    ON mb.scenario = ma.scenario AND mb.level = ma.level AND mb.level_kind = ma.level_kind
    AND mb.metric = ma.metric AND mb.run_id <> ma.run_id
JOIN v_run_base rb ON rb.run_id = mb.run_id AND rb.host = ra.host;

-- Change points found on each series, active ones first.
CREATE OR REPLACE VIEW v_changes AS
SELECT
    detected_at, host, engine, scenario, level, metric, version_before, version_after,
    magnitude_pct, pvalue, status, ack_status, ack_reason, fingerprint AS series, sort_key_after, change_id
FROM changes;

-- Each engine metric of each level read the way its Prometheus type says (schema v4 keeps the
-- exposition's `# TYPE` and `# HELP` beside the samples): a running total -- a counter's samples,
-- a histogram's or summary's _bucket/_sum/_count -- as its `increase` from the level's first scrape
-- to its last (NULL when it went down: the engine restarted, no guess), a level (gauge, untyped, a
-- summary's quantiles) as its last and highest value. `cumulative` says which reading applies;
-- metric_type NULL: the sample was stored before v4 and its type was not recorded.
CREATE OR REPLACE VIEW v_server_metrics AS
SELECT
    run_id,
    scenario,
    level,
    coalesce(family, name) AS family,
    name,
    labels,
    metric_type,
    any_value(metric_help) AS metric_help,
    (metric_type = 'counter' AND name NOT LIKE '%\_created' ESCAPE '\')
        OR (metric_type IN ('histogram', 'summary')
            AND (name LIKE '%\_bucket' ESCAPE '\' OR name LIKE '%\_sum' ESCAPE '\' OR name LIKE '%\_count' ESCAPE '\'))
        AS cumulative,
    count(*) AS scrapes,
    min(scraped_at) AS first_scraped_at,
    max(scraped_at) AS last_scraped_at,
    arg_min(value, scraped_at) AS first_value,
    arg_max(value, scraped_at) AS last_value,
    max(value) AS max_value,
    CASE
        WHEN cumulative IS NOT TRUE THEN NULL
        WHEN arg_max(value, scraped_at) >= arg_min(value, scraped_at)
            THEN arg_max(value, scraped_at) - arg_min(value, scraped_at)
    END AS increase
FROM server_metrics
GROUP BY run_id, scenario, level, family, name, labels, metric_type;

-- The support matrix people share about Strix Halo: for each host, engine, image version and model
-- profile, what the newest attempt came to --
--   'serves'  status ok/partial: it became ready and answered measured requests (smoke included);
--   'starts'  failed_serve: it became ready, then served nothing (or the smoke output was invalid);
--   'fails'   failed_start or error: it never became ready, or the run broke;
--   'not_run' failed_guard, cancelled, deferred or deadline: a guard refused the run (an image "not
--             built for gfx1151" is one), someone cancelled it, or it did not fit the window (or
--             outlasted it, stopped at the restore's time) -- which says
--             nothing about the engine (shown only when no attempt of that cell got further);
-- with the reason and the run id (`cell` spells all three; `reason` is the run's failure_reason, which
-- on an 'ok' run is only a note, left out of `cell`). `attempts` / `attempts_served` count the
-- cell's runs (guard refusals not counted). version_rank 1 is each engine's newest version on the
-- host, in version order (never the date a run happened): ORDER BY version_rank lists newest first.
CREATE OR REPLACE VIEW v_support_matrix AS
WITH attempts AS (
    SELECT
        b.*,
        CASE
            WHEN b.usable THEN 'serves'
            WHEN b.status = 'failed_serve' THEN 'starts'
            WHEN b.status IN ('failed_guard', 'cancelled', 'deferred', 'deadline') THEN 'not_run'
            ELSE 'fails'
        END AS outcome
    FROM v_run_base b
)
SELECT
    host,
    engine,
    engine_kind,
    image_version,
    max(version_order) OVER cell_runs AS version_order,
    dense_rank() OVER (PARTITION BY host, engine ORDER BY version_order DESC) AS version_rank,
    model_profile,
    model_family,
    quantization,
    outcome,
    outcome IN ('serves', 'starts') AS starts,
    outcome = 'serves' AS serves,
    outcome = 'fails' AS fails,
    status,
    failure_reason AS reason,
    run_id,
    started_at,
    image_digest,
    count(*) FILTER (WHERE outcome <> 'not_run') OVER cell_runs AS attempts,
    count(*) FILTER (WHERE outcome = 'serves') OVER cell_runs AS attempts_served,
    outcome || CASE WHEN status = 'ok' THEN '' ELSE coalesce(': ' || failure_reason, '') END
        || ' (' || run_id || ')' AS cell
FROM attempts
WINDOW cell_runs AS (PARTITION BY host, engine, image_version, model_profile)
QUALIFY row_number() OVER (
    PARTITION BY host, engine, image_version, model_profile
    ORDER BY outcome <> 'not_run' DESC, started_at DESC, run_id DESC
) = 1
ORDER BY host, engine, version_rank, model_profile;

-- The runs a bisection benchmarked: probes of one release each, kept out of the change-point series
-- they search (analysis/changepoints.py), shown in every other view like any run.
CREATE OR REPLACE VIEW v_bisection_runs AS
SELECT DISTINCT run_id FROM bisection_steps WHERE run_id IS NOT NULL;

-- Every bisection with its steps in order: which change, the brackets, each release benchmarked with
-- its figure, interval and side, and what was found (`first_release`, status `found`).
CREATE OR REPLACE VIEW v_bisections AS
SELECT b.bisection_id, b.change_id, b.host, b.engine, b.metric, b.scenario, b.level,
       b.version_before, b.version_after, b.status, b.first_release, b.last_without,
       b.runs_used, b.max_runs, b.reason, b.started_at, b.updated_at,
       s.step, s.version AS step_version, s.run_id AS step_run_id, s.value AS step_value,
       s.low AS step_low, s.high AS step_high, s.side AS step_side, s.note AS step_note
FROM bisections b LEFT JOIN bisection_steps s USING (bisection_id)
ORDER BY b.started_at DESC, b.bisection_id, s.step;

-- Every comparison by pairs, newest first, one row per metric: B against A as a percentage with its
-- interval beside the verdict, and the runs each one started (failed and dropped included); the
-- primary metric (the comparison's verdict), each figure's estimator, the failed and excluded runs.
CREATE OR REPLACE VIEW v_comparisons AS
SELECT c.comparison_id, c.host, c.engine, c.release_a, c.release_b, c.matchup, c.metric, c.verdict,
       (c.ratio - 1) * 100 AS change_pct, (c.low - 1) * 100 AS low_pct, (c.high - 1) * 100 AS high_pct,
       c.ratio, c.low, c.high, c.pairs, c.looks, c.cap, c.target, c.alpha, c.dropped_pairs,
       coalesce(r.runs, 0) AS runs, c.started_at, c.ended_at,
       c.primary_metric, c.estimator, c.withheld, c.fails_more, c.failed_runs_a, c.runs_a,
       c.failed_runs_b, c.runs_b, c.failure_p, c.excluded_a, c.excluded_b, c.exclusion_p
FROM comparisons c
LEFT JOIN (SELECT comparison_id, count(*) AS runs FROM comparison_runs GROUP BY comparison_id) r
  USING (comparison_id)
ORDER BY c.started_at DESC, c.comparison_id, c.metric;

-- Each run's score on the evaluation set (strix_pipeline/quality): items answered of items asked, per
-- set version (scores compare only on the same set), beside the run's engine, release and weights.
CREATE OR REPLACE VIEW v_run_quality AS
SELECT r.host, r.engine, r.model_profile, r.quantization, r.image_version, r.run_id, r.started_at,
       q.set_version, q.passed, q.items, q.passed / q.items AS score, q.missed
FROM v_run_base r
JOIN (
    SELECT run_id, set_version, count(*) FILTER (WHERE passed) AS passed, count(*) AS items,
           list(item_id ORDER BY item_id) FILTER (WHERE NOT passed) AS missed
    FROM quality_answers
    GROUP BY run_id, set_version
) q ON q.run_id = r.run_id;

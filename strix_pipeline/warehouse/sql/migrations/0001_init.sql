-- Schema v1: one table per record type in strix_pipeline/records/ (same names, same column order),
-- plus hosts, registry_errors and the bookkeeping tables.
-- Request-level tables carry no keys or indexes on purpose: loads are bulk appends and a key index
-- would halve ingestion; the access layer keeps run_id unique by replacing a run in one transaction.
-- The same holds for every key: this schema serves the DuckDB file and a DuckLake lakehouse alike, and
-- DuckLake has no PRIMARY KEY, UNIQUE or CHECK constraints, so the writers MERGE on the key instead
-- (hosts.py, images.py, changes.py). Files created before this comment kept their key constraints:
-- harmless, the same writers serve them.

CREATE TABLE schema_version (
    version    INTEGER NOT NULL,   -- key
    name       VARCHAR NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL
);

-- Small key/value facts about the schema itself (e.g. the hash of the views last installed).
CREATE TABLE schema_meta (
    key   VARCHAR NOT NULL,   -- key
    value VARCHAR
);

CREATE TABLE hosts (
    name        VARCHAR NOT NULL,   -- key
    kind        VARCHAR,
    description VARCHAR,
    first_seen  TIMESTAMPTZ,
    last_seen   TIMESTAMPTZ
);

CREATE TABLE images (
    engine     VARCHAR NOT NULL,
    registry   VARCHAR NOT NULL,
    repository VARCHAR NOT NULL,
    tag        VARCHAR NOT NULL,
    digest     VARCHAR NOT NULL,
    floating   BOOLEAN NOT NULL,
    created    TIMESTAMPTZ,
    version    VARCHAR,
    revision   VARCHAR,
    labels     VARCHAR,      -- JSON object of the image config's labels
    sort_key   VARCHAR NOT NULL,
    first_seen TIMESTAMPTZ NOT NULL,
    last_seen  TIMESTAMPTZ NOT NULL,
    gone       BOOLEAN NOT NULL DEFAULT false,
    gone_since TIMESTAMPTZ
    -- key: (registry, repository, tag)
);

CREATE TABLE registry_errors (
    registry   VARCHAR NOT NULL,
    repository VARCHAR NOT NULL,
    error       VARCHAR NOT NULL,
    occurred_at TIMESTAMPTZ NOT NULL   -- not "at": AT is a keyword in DuckDB 2
);

CREATE TABLE runs (
    run_id            VARCHAR NOT NULL,
    host              VARCHAR NOT NULL,
    engine            VARCHAR NOT NULL,
    engine_kind       VARCHAR NOT NULL,
    image_repository  VARCHAR,
    image_tag         VARCHAR,
    image_digest      VARCHAR,
    model_profile     VARCHAR NOT NULL,
    model             VARCHAR NOT NULL,
    quantization      VARCHAR NOT NULL,
    suite             VARCHAR NOT NULL,
    profile           VARCHAR NOT NULL,
    fingerprint       VARCHAR NOT NULL,
    harness_version   VARCHAR NOT NULL,
    engine_build      VARCHAR,
    launch_command    VARCHAR,
    engine_flags      VARCHAR,   -- JSON list
    status            VARCHAR NOT NULL,
    failure_reason    VARCHAR,
    log_tail          VARCHAR,
    started_at        TIMESTAMPTZ NOT NULL,
    ended_at          TIMESTAMPTZ,
    dagster_run_id    VARCHAR,
    rocm_version      VARCHAR,
    kernel            VARCHAR,
    firmware          VARCHAR,
    kernel_cmdline    VARCHAR,
    ttm_pages_limit   BIGINT,
    baseline_bytes    BIGINT,
    loaded_idle_bytes BIGINT,
    held_bytes        BIGINT,
    peak_bytes        BIGINT,
    after_stop_bytes  BIGINT,
    memory_returned   BOOLEAN,
    image_version     VARCHAR,
    image_sort_key    VARCHAR
);

CREATE TABLE requests (
    run_id                  VARCHAR NOT NULL,
    scenario                VARCHAR NOT NULL,
    level                   BIGINT NOT NULL,
    level_kind              VARCHAR NOT NULL,
    request_index           BIGINT NOT NULL,
    warmup                  BOOLEAN NOT NULL,
    sent_at                 TIMESTAMPTZ NOT NULL,
    sent_offset_ms          DOUBLE NOT NULL,
    queue_ms                DOUBLE NOT NULL,
    ttfb_ms                 DOUBLE,
    ttft_ms                 DOUBLE,
    e2e_ms                  DOUBLE,
    input_tokens            BIGINT,
    input_tokens_estimated  BOOLEAN NOT NULL,
    output_tokens           BIGINT,
    output_tokens_estimated BOOLEAN NOT NULL,
    cached_tokens           BIGINT,
    ok                      BOOLEAN NOT NULL,
    error_class             VARCHAR,
    error_message           VARCHAR,
    event_offsets_ms        DOUBLE[],
    event_tokens            BIGINT[],
    server_timings          VARCHAR,   -- JSON, verbatim from llama-server
    prompt_id               VARCHAR
);

CREATE TABLE aggregates (
    run_id                   VARCHAR NOT NULL,
    scenario                 VARCHAR NOT NULL,
    level                    BIGINT NOT NULL,
    level_kind               VARCHAR NOT NULL,
    requests_ok              BIGINT NOT NULL,
    requests_failed          BIGINT NOT NULL,
    duration_s               DOUBLE,
    ttft_mean_ms             DOUBLE,
    ttft_p50_ms              DOUBLE,
    ttft_p90_ms              DOUBLE,
    ttft_p95_ms              DOUBLE,
    ttft_p99_ms              DOUBLE,
    ttft_p95_ci_low_ms       DOUBLE,
    ttft_p95_ci_high_ms      DOUBLE,
    tpot_mean_ms             DOUBLE,
    tpot_p50_ms              DOUBLE,
    tpot_p90_ms              DOUBLE,
    tpot_p95_ms              DOUBLE,
    tpot_p99_ms              DOUBLE,
    itl_mean_ms              DOUBLE,
    itl_p50_ms               DOUBLE,
    itl_p90_ms               DOUBLE,
    itl_p95_ms               DOUBLE,
    itl_p99_ms               DOUBLE,
    itl_per_token_mean_ms    DOUBLE,
    itl_per_token_p50_ms     DOUBLE,
    itl_per_token_p90_ms     DOUBLE,
    itl_per_token_p95_ms     DOUBLE,
    itl_per_token_p99_ms     DOUBLE,
    e2e_mean_ms              DOUBLE,
    e2e_p50_ms               DOUBLE,
    e2e_p90_ms               DOUBLE,
    e2e_p95_ms               DOUBLE,
    e2e_p99_ms               DOUBLE,
    queue_mean_ms            DOUBLE,
    queue_p95_ms             DOUBLE,
    input_tokens_mean        DOUBLE,
    output_tokens_total      BIGINT,
    output_tokens_estimated  BOOLEAN NOT NULL,
    output_tokens_per_s      DOUBLE,
    requests_per_s           DOUBLE,
    goodput_requests_per_s   DOUBLE,
    requested_rate           DOUBLE,
    achieved_rate            DOUBLE,
    prefill_tokens_per_s     DOUBLE,
    decode_tokens_per_s      DOUBLE,
    cached_tokens_mean       DOUBLE
);

CREATE TABLE memory_samples (
    run_id      VARCHAR NOT NULL,
    sampled_at  TIMESTAMPTZ NOT NULL,
    phase       VARCHAR NOT NULL,
    source      VARCHAR NOT NULL,
    metric      VARCHAR NOT NULL,
    value_bytes BIGINT NOT NULL
);

CREATE TABLE server_metrics (
    run_id     VARCHAR NOT NULL,
    scenario   VARCHAR NOT NULL,
    level      BIGINT NOT NULL,
    scraped_at TIMESTAMPTZ NOT NULL,
    phase      VARCHAR NOT NULL,
    name       VARCHAR NOT NULL,
    labels     VARCHAR NOT NULL,   -- JSON object
    value      DOUBLE NOT NULL
);

CREATE TABLE decisions (
    evaluation_id         VARCHAR NOT NULL,
    evaluated_at          TIMESTAMPTZ NOT NULL,
    host                  VARCHAR NOT NULL,
    verdict               VARCHAR NOT NULL,
    criterion             VARCHAR NOT NULL,
    name                  VARCHAR NOT NULL,
    required              BOOLEAN NOT NULL,
    status                VARCHAR NOT NULL,
    value                 DOUBLE,
    threshold             DOUBLE,
    ci_low                DOUBLE,
    ci_high               DOUBLE,
    unit                  VARCHAR,
    evidence_run_ids      VARCHAR[] NOT NULL,
    image_digests         VARCHAR[] NOT NULL,
    quantization_mismatch BOOLEAN NOT NULL,
    reason                VARCHAR NOT NULL,
    first_held_at         TIMESTAMPTZ
);

-- Schema v22: recorded traces imported as workloads (`strix workload import`): one row per name, the
-- newest import. The requests themselves (lengths, arrival offsets, prefix block ids; never text) are
-- the file <artifacts>/traces/<name>.jsonl whose sha256 is content_digest; source_digest is the
-- sha256 of the file imported. NULL figures: the trace has no arrival times / no serving times.
CREATE TABLE traces (
    name              VARCHAR NOT NULL,
    imported_at       TIMESTAMPTZ NOT NULL,
    format            VARCHAR NOT NULL,
    source_file       VARCHAR NOT NULL,
    source_digest     VARCHAR NOT NULL,
    content_digest    VARCHAR NOT NULL,
    requests          BIGINT NOT NULL,
    lengths_estimated BOOLEAN NOT NULL,
    input_p50         DOUBLE NOT NULL,
    input_p90         DOUBLE NOT NULL,
    input_p99         DOUBLE NOT NULL,
    input_max         BIGINT NOT NULL,
    output_p50        DOUBLE NOT NULL,
    output_p90        DOUBLE NOT NULL,
    output_p99        DOUBLE NOT NULL,
    output_max        BIGINT NOT NULL,
    span_s            DOUBLE,
    rate_per_s        DOUBLE,
    concurrency_mean  DOUBLE,
    concurrency_peak  BIGINT,
    prefix_reuse      DOUBLE NOT NULL
);

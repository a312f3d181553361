-- Schema v2.
-- 1. runs.model_family: C3 and C5 compare engines on the same model *family* (a GGUF and a BF16 of one
--    model are one family). v1 rows did not record it; the best v1 knew was the model profile name.
-- 2. hosts gain the facts of their newest run (ROCm, kernel, firmware, cmdline, TTM limit), so a person
--    sees what a host was when it last ran without digging through runs.
-- 3. changes: the change points found on each series, with an acknowledgement a person can give.

ALTER TABLE runs ADD COLUMN model_family VARCHAR;
UPDATE runs SET model_family = model_profile WHERE model_family IS NULL;

ALTER TABLE hosts ADD COLUMN rocm_version VARCHAR;
ALTER TABLE hosts ADD COLUMN kernel VARCHAR;
ALTER TABLE hosts ADD COLUMN firmware VARCHAR;
ALTER TABLE hosts ADD COLUMN kernel_cmdline VARCHAR;
ALTER TABLE hosts ADD COLUMN ttm_pages_limit BIGINT;

UPDATE hosts SET
    rocm_version = r.rocm_version,
    kernel = r.kernel,
    firmware = r.firmware,
    kernel_cmdline = r.kernel_cmdline,
    ttm_pages_limit = r.ttm_pages_limit
FROM (
    SELECT host, rocm_version, kernel, firmware, kernel_cmdline, ttm_pages_limit
    FROM runs
    QUALIFY row_number() OVER (PARTITION BY host ORDER BY started_at DESC) = 1
) AS r
WHERE hosts.name = r.host;

CREATE TABLE changes (
    change_id      VARCHAR NOT NULL,   -- key
    fingerprint    VARCHAR NOT NULL,   -- the series: run fingerprint + '/' + scenario
    engine         VARCHAR NOT NULL,
    host           VARCHAR NOT NULL,
    metric         VARCHAR NOT NULL,   -- e.g. 'ttft_p95_ms'
    scenario       VARCHAR NOT NULL,
    level          BIGINT NOT NULL,
    version_before VARCHAR,
    version_after  VARCHAR,
    sort_key_after VARCHAR,
    magnitude_pct  DOUBLE,
    pvalue         DOUBLE,
    status         VARCHAR NOT NULL,   -- 'provisional' | 'confirmed' (checked by changes.py)
    ack_status     VARCHAR NOT NULL DEFAULT 'active',   -- | 'acknowledged'
    ack_reason     VARCHAR,
    detected_at    TIMESTAMPTZ NOT NULL
);

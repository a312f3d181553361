-- Schema v16: a series' run-to-run noise as measured (issue 33, item 1): per canary series, from the
-- canary's latest runs of its one release, the coefficient of variation of one run and the smallest
-- step a comparison by 3 / 5 / 10 pairs detects at it (alpha 0.05, 80 % power). A set per analysis
-- (computed_at); `strix changes` shows the newest.
CREATE TABLE noise_figures (
    computed_at   TIMESTAMPTZ NOT NULL,
    host          VARCHAR NOT NULL,
    engine        VARCHAR NOT NULL,
    version       VARCHAR NOT NULL,
    fingerprint   VARCHAR NOT NULL,
    scenario      VARCHAR NOT NULL,
    level         BIGINT NOT NULL,
    metric        VARCHAR NOT NULL,
    runs          BIGINT NOT NULL,
    mean          DOUBLE NOT NULL,
    cv            DOUBLE NOT NULL,
    step_3_pairs  DOUBLE NOT NULL,
    step_5_pairs  DOUBLE NOT NULL,
    step_10_pairs DOUBLE NOT NULL,
    run_ids       VARCHAR[] NOT NULL
);

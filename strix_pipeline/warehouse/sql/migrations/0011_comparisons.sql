-- Schema v11: comparisons by pairs (issue 33, item 2). Releases A and B of one engine run in
-- balanced random AB/BA pairs on one host, a fresh server per run, and each metric is judged on the
-- paired ratios B/A (analysis/paired.py): one row per (comparison, metric) here, and one row per
-- engine start in comparison_runs -- the warm-up request it discarded and the failed runs included,
-- so what was left out of a verdict stays visible beside it.
CREATE TABLE comparisons (
    comparison_id    VARCHAR NOT NULL,  -- one `strix compare`: every metric it judged shares it
    host             VARCHAR NOT NULL,
    engine           VARCHAR NOT NULL,
    release_a        VARCHAR NOT NULL,  -- the reference (b11401)
    release_b        VARCHAR NOT NULL,  -- the one judged against it (b11434)
    metric           VARCHAR NOT NULL,  -- decode_tokens_per_s, prefill_tokens_per_s
    higher_is_better BOOLEAN NOT NULL,
    pairs            BIGINT NOT NULL,   -- the kept pairs the last look judged
    ratio            DOUBLE,            -- B/A, exp(mean log ratio); NULL before any look
    low              DOUBLE,            -- its interval at the last look's spent alpha
    high             DOUBLE,
    verdict          VARCHAR NOT NULL,  -- 'different' | 'same' | 'unknown' | 'inconclusive'
    looks            BIGINT NOT NULL,
    target           DOUBLE NOT NULL,   -- the relative step chased (0.05: 5 %)
    alpha            DOUBLE NOT NULL,   -- spent across the looks; the last look's share is its interval's
    look_alpha       DOUBLE,
    cap              BIGINT NOT NULL,   -- the most pairs the ladder could take
    seed             BIGINT NOT NULL,   -- of the AB/BA order
    values_a         DOUBLE[] NOT NULL, -- the kept pairs' values, in the order they ran
    values_b         DOUBLE[] NOT NULL,
    orders           VARCHAR[] NOT NULL,-- 'AB' | 'BA' per kept pair
    dropped_pairs    BIGINT NOT NULL,   -- pairs dropped because a run of theirs failed
    started_at       TIMESTAMPTZ NOT NULL,
    ended_at         TIMESTAMPTZ NOT NULL
);

CREATE TABLE comparison_runs (
    comparison_id VARCHAR NOT NULL,
    run           BIGINT NOT NULL,      -- 1, 2, ... in the order the servers started
    pair          BIGINT NOT NULL,      -- the pair's place in the plan, 1-based
    side          VARCHAR NOT NULL,     -- 'A' | 'B'
    release       VARCHAR NOT NULL,
    kept          BOOLEAN NOT NULL,     -- FALSE: the pair was dropped (this run or its partner failed)
    warmup_ms     DOUBLE,               -- the discarded warm-up request's end-to-end time
    figures       VARCHAR,              -- JSON {metric: value} of this run (NULL: it failed)
    engine_build  VARCHAR,              -- what the server said of itself
    error         VARCHAR,              -- why the run failed (NULL: it did not)
    started_at    TIMESTAMPTZ NOT NULL,
    ended_at      TIMESTAMPTZ NOT NULL
);

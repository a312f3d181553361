-- Schema v8.
-- 1. changes.host_drift: why the change is suspected to be the host's, not the engine's (NULL: not
--    suspected). Set when the canary (a pinned build benchmarked every week) changed in the same
--    window, or when the change lies between two runs of one release; such a change is not alerted
--    as an engine regression. A canary's own change carries "canary: ..." here.
-- 2. bisections / bisection_steps: the search for the first release that shows a confirmed change,
--    one benchmark of a release between the two brackets per step (analysis/bisect.py decides each
--    step from the metric's interval). A bisection's runs stay out of the change-point series (they
--    are probes of one release each), and stay in `runs` like any other run.
ALTER TABLE changes ADD COLUMN host_drift VARCHAR;

CREATE TABLE bisections (
    bisection_id   VARCHAR NOT NULL,   -- key: the change's id, or "manual-..." for `strix bisect`
    change_id      VARCHAR,            -- the change bisected (NULL: by hand, not a stored change)
    host           VARCHAR NOT NULL,
    engine         VARCHAR NOT NULL,
    fingerprint    VARCHAR NOT NULL,   -- the series: run fingerprint + '/' + scenario
    metric         VARCHAR NOT NULL,
    scenario       VARCHAR NOT NULL,
    level          BIGINT NOT NULL,
    version_before VARCHAR NOT NULL,   -- the bracket without the change
    version_after  VARCHAR NOT NULL,   -- the bracket with it
    candidates     VARCHAR NOT NULL,   -- JSON list of {"version", "key"}: the releases between, in order
    status         VARCHAR NOT NULL,   -- 'running' | 'found' | 'inconclusive' | 'exhausted' | 'nothing_between'
    first_release  VARCHAR,            -- the first release that shows the change (status 'found')
    last_without   VARCHAR,            -- its neighbour before it, which does not
    next_key       VARCHAR,            -- the partition the next step benchmarks ('running')
    runs_used      BIGINT NOT NULL,
    max_runs       BIGINT NOT NULL,
    reason         VARCHAR,            -- what a person reads: why it ended, or what runs next
    started_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL
);

CREATE TABLE bisection_steps (
    bisection_id  VARCHAR NOT NULL,
    step          BIGINT NOT NULL,     -- 1, 2, ... in the order they ran
    version       VARCHAR NOT NULL,
    partition_key VARCHAR NOT NULL,
    run_id        VARCHAR,             -- the benchmark run (NULL: it stored no run)
    value         DOUBLE,
    low           DOUBLE,              -- the metric's interval (see analysis/bisect.py)
    high          DOUBLE,
    side          VARCHAR NOT NULL,    -- 'before' | 'after' | 'inconclusive' | 'skipped'
    note          VARCHAR,
    decided_at    TIMESTAMPTZ NOT NULL
);

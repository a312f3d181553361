-- Schema v18: what a run's suite profile asks of the engine (fingerprint.workload_digest: the request
-- shapes, counts, levels and seed of every scenario, as a digest). It is a comparability field: a
-- profile whose requests changed, or another profile, starts a new series instead of joining one.
-- NULL: an older run (its fingerprint was computed without it) or a peer tool's run.
ALTER TABLE runs ADD COLUMN workload VARCHAR;

-- Schema v4: each server metric sample keeps what the engine's Prometheus exposition said about it --
-- its family (the name its `# TYPE` / `# HELP` lines use: a histogram's `_bucket`, `_sum` and
-- `_count` samples share one), the family's type (counter, gauge, histogram, summary, ...; "untyped"
-- when there was no `# TYPE` line) and the `# HELP` text -- so a counter is read as a running total
-- and never plotted as a level. Rows stored before v4 did not keep them: NULL, not a guess from the
-- name.
ALTER TABLE server_metrics ADD COLUMN family VARCHAR;
ALTER TABLE server_metrics ADD COLUMN metric_type VARCHAR;
ALTER TABLE server_metrics ADD COLUMN metric_help VARCHAR;

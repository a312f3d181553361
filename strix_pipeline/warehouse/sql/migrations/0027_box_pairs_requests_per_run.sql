-- Schema v26: comparisons.requests_per_run -- the fewest measured TTFT requests a kept run of the
-- comparison had: a percentile of that many values is named for what it estimates (a "p95" of 20 is
-- about the p90.7, stats/quantiles.quantile_name). NULL: stored before it was, or no TTFT measured.
ALTER TABLE comparisons ADD COLUMN requests_per_run INTEGER;

-- Comparisons by pairs say how each figure is computed and what was left out of a verdict.
-- `estimator`: one run's figure of the metric (decode and prefill are the weekly series' sums over
-- the run's requests, no longer the fastest request); `primary_metric`: the comparison's verdict is
-- that metric's, the others are descriptive; `withheld`: why the ladder's verdict was not kept.
-- Failures are data: per side the runs not excluded and those that failed, the two-proportion test
-- of them and the side failing more with confidence; and the runs a busy host excluded per side,
-- whose difference voids a verdict. Per run: whether it was excluded, and its request failure rate.
ALTER TABLE comparisons ADD COLUMN estimator VARCHAR;
ALTER TABLE comparisons ADD COLUMN primary_metric BOOLEAN;
ALTER TABLE comparisons ADD COLUMN withheld VARCHAR;
ALTER TABLE comparisons ADD COLUMN runs_a BIGINT;
ALTER TABLE comparisons ADD COLUMN failed_runs_a BIGINT;
ALTER TABLE comparisons ADD COLUMN runs_b BIGINT;
ALTER TABLE comparisons ADD COLUMN failed_runs_b BIGINT;
ALTER TABLE comparisons ADD COLUMN failure_p DOUBLE;
ALTER TABLE comparisons ADD COLUMN fails_more VARCHAR;
ALTER TABLE comparisons ADD COLUMN excluded_a BIGINT;
ALTER TABLE comparisons ADD COLUMN excluded_b BIGINT;
ALTER TABLE comparisons ADD COLUMN exclusion_p DOUBLE;
ALTER TABLE comparison_runs ADD COLUMN excluded BOOLEAN;
ALTER TABLE comparison_runs ADD COLUMN failure_rate DOUBLE;

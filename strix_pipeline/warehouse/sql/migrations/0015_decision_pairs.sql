-- Schema v15: C3 and C5 judged on two pairs (issue 34, item 2). `pair`: the pair this row's status,
-- value and interval are of -- "production" (each engine's production format) or "equal_weights" (the
-- baseline serving the candidate's very weights) -- the one decision.decided_by names; NULL for the
-- criteria that compare no pair (C1, C2, C4) and for older evaluations. `other_*`: the same criterion
-- on the other pair, shown beside it and never deciding. View v_decision_pairs gives a row per pair.
ALTER TABLE decisions ADD COLUMN pair VARCHAR;
ALTER TABLE decisions ADD COLUMN other_pair VARCHAR;
ALTER TABLE decisions ADD COLUMN other_status VARCHAR;
ALTER TABLE decisions ADD COLUMN other_value DOUBLE;
ALTER TABLE decisions ADD COLUMN other_threshold DOUBLE;
ALTER TABLE decisions ADD COLUMN other_ci_low DOUBLE;
ALTER TABLE decisions ADD COLUMN other_ci_high DOUBLE;
ALTER TABLE decisions ADD COLUMN other_run_ids VARCHAR[];
ALTER TABLE decisions ADD COLUMN other_reason VARCHAR;

-- Schema v17: the decision's pairs by interleaved runs (issue 34, item 4). A comparison by pairs of
-- the baseline engine against the candidate (runner/engine_pairs.py) names the decision pair it is of
-- -- "production" or "equal_weights" -- in `decision_pair`; NULL for a comparison of two releases of
-- one engine (the week's, a bisection's, the canary's A/A).
ALTER TABLE comparisons ADD COLUMN decision_pair VARCHAR;

-- Schema v19: "pair" names only an AB/BA pair of runs. The decision's two engine match-ups --
-- "production" (each engine's production format) and "equal_weights" (the baseline serving the
-- candidate's very weights) -- are stored under `matchup`: the match-up a criterion's row is of and
-- the other one shown beside it (decisions), and the match-up an engine comparison is of
-- (comparisons). Renamed in place: the values and the columns' order are kept.
ALTER TABLE decisions RENAME COLUMN pair TO matchup;
ALTER TABLE decisions RENAME COLUMN other_pair TO other_matchup;
ALTER TABLE comparisons RENAME COLUMN decision_pair TO matchup;

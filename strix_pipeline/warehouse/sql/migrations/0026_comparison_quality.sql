-- A comparison by pairs judges correctness beside the speed: each run answers the evaluation set and
-- the sides' answers are compared item by item (runner/pairs.py). `scores_lower`: the side ('A' | 'B')
-- answering fewer items with confidence at alpha, which makes the comparison different (quality)
-- whatever its speed; `quality_p`: the one-sided p-value of B answering fewer items than A (NULL: the
-- runs answered no evaluation set, or the comparison was stored before it was asked).
ALTER TABLE comparisons ADD COLUMN scores_lower VARCHAR;
ALTER TABLE comparisons ADD COLUMN quality_p DOUBLE;

-- Schema v3: each aggregate row says how many measured requests its level set out to send and, when
-- it sent fewer (a level cut at its max duration), why. Older rows did not record either: NULL, not a
-- guess.
ALTER TABLE aggregates ADD COLUMN requests_planned BIGINT;
ALTER TABLE aggregates ADD COLUMN stopped_reason VARCHAR;

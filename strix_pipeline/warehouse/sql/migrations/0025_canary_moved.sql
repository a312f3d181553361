-- Schema v25: changes.canary_moved -- what the canary did in the same window (its metric, step and
-- host facts), written beside an engine change that a confirmed canary step on the same measurement
-- covers. Unlike host_drift it does not silence the change: it is alerted and bisected like any other.
-- NULL: the canary did not move there.
ALTER TABLE changes ADD COLUMN canary_moved VARCHAR;

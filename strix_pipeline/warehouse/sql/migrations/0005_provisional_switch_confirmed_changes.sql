-- Schema v5.
-- 1. decisions.provisional: a `switch` verdict that rests on one candidate run is provisional until a
--    second run (a repeat of that image or the next version) agrees, as a change point is. Repeated on
--    every criterion row of the evaluation, like `verdict`. Evaluations stored before v5 were never
--    marked: false.
-- 2. changes.confirmed_at: when a change point was first found confirmed, so the evaluation after it
--    can alert on the regressions confirmed since the previous evaluation (NULL: provisional, or
--    confirmed before v5 -- such a change was confirmed at some time no row recorded, and is not
--    alerted on again).
--    (No DEFAULT on the new column: DuckLake adds columns without one; every writer sets it.)
ALTER TABLE decisions ADD COLUMN provisional BOOLEAN;
UPDATE decisions SET provisional = false WHERE provisional IS NULL;
ALTER TABLE changes ADD COLUMN confirmed_at TIMESTAMPTZ;

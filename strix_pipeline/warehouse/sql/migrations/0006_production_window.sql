-- Schema v6: how long a Box run kept its users from their production engine. The image is pulled and
-- every refusal decided before production stops; each run records when production went down, when it
-- answered its health URL again, and the seconds of that window that were the pipeline's own (the
-- baseline wait, settling, stopping, the health wait) rather than the engine's load and traffic.
-- Runs stored before v6, and runs on hosts without a production engine: NULL.
ALTER TABLE runs ADD COLUMN production_down_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN production_up_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN production_overhead_s DOUBLE;

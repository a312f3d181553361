-- Schema v21: a run's power and energy, from the GPU's hwmon power, clock, temperature and load
-- samples stored beside its memory samples (source 'gpu:<card>:<file>' or 'rapl:<zone>'). The idle
-- package power before the engine started is stored apart and never subtracted from the energy;
-- energy per measured request, output tokens per joule and mean power over the client's window of the
-- single-client decode level and of the decision's load (load_level); energy_problem says why they are
-- empty; throttled marks a run whose shader clock or temperature show throttling while busy.
ALTER TABLE runs ADD COLUMN idle_power_w DOUBLE;
ALTER TABLE runs ADD COLUMN power_source VARCHAR;
ALTER TABLE runs ADD COLUMN decode_j_per_request DOUBLE;
ALTER TABLE runs ADD COLUMN decode_tokens_per_j DOUBLE;
ALTER TABLE runs ADD COLUMN decode_power_w DOUBLE;
ALTER TABLE runs ADD COLUMN load_level BIGINT;
ALTER TABLE runs ADD COLUMN load_j_per_request DOUBLE;
ALTER TABLE runs ADD COLUMN load_tokens_per_j DOUBLE;
ALTER TABLE runs ADD COLUMN load_power_w DOUBLE;
ALTER TABLE runs ADD COLUMN energy_problem VARCHAR;
ALTER TABLE runs ADD COLUMN throttled BOOLEAN;
ALTER TABLE runs ADD COLUMN throttle_reason VARCHAR;

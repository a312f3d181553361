-- Schema v7: each run's distance to the memory-bandwidth limit, with every input stored so anyone can
-- recompute it: decode_efficiency = decode_tok_s * (model_weight_bytes + kv_bytes_per_token *
-- decode_context_tokens) / bandwidth_bytes_per_s. NULL efficiency with efficiency_problem: the inputs
-- gave no figure in (0, 1] (runner/efficiency.py). Runs stored before v7: all NULL.
ALTER TABLE runs ADD COLUMN bandwidth_bytes_per_s DOUBLE;
ALTER TABLE runs ADD COLUMN bandwidth_threads INTEGER;
ALTER TABLE runs ADD COLUMN model_weight_bytes BIGINT;
ALTER TABLE runs ADD COLUMN kv_bytes_per_token BIGINT;
ALTER TABLE runs ADD COLUMN decode_tok_s DOUBLE;
ALTER TABLE runs ADD COLUMN decode_context_tokens DOUBLE;
ALTER TABLE runs ADD COLUMN decode_efficiency DOUBLE;
ALTER TABLE runs ADD COLUMN efficiency_problem VARCHAR;

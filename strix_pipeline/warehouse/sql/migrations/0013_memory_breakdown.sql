-- Schema v13: a run's held memory broken down from the engine's own log (issue 34, item 1: C5 at the
-- same context). weights_bytes / kv_cache_bytes: what the engine's log says it allocated at load
-- (memory/breakdown.py); the rest is held_bytes minus both. kv_capacity_tokens: the tokens its KV cache
-- holds (vLLM's "KV cache size: N tokens", llama-server's -c). production_pool_bytes: the KV pool the
-- production configuration gives the engine (vLLM's configured pool), shown beside the same-context
-- figures. NULL: not in the log / not known (older runs).
ALTER TABLE runs ADD COLUMN weights_bytes BIGINT;
ALTER TABLE runs ADD COLUMN kv_cache_bytes BIGINT;
ALTER TABLE runs ADD COLUMN kv_capacity_tokens BIGINT;
ALTER TABLE runs ADD COLUMN production_pool_bytes BIGINT;

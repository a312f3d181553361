-- Schema v14: the dtype a CPU engine computes in, and why (issue 34, item 3): "<dtype>: <reason>"
-- (engines/vllm_dtype.py DtypeChoice.recorded), e.g. "float32: no avx512_bf16 or amx_bf16: ...". The
-- dtype itself is in engine_flags (--dtype), so in the fingerprint; the reason is recorded, not compared.
-- NULL: the engine chooses none (llama-server, a Box's GPU engine) or an older run.
ALTER TABLE runs ADD COLUMN engine_dtype VARCHAR;

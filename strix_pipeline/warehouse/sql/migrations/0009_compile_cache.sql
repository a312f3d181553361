-- Schema v9: whether an engine's start found its compile cache (vLLM's kernels, kept in a volume per
-- image on the Box): 'cold' starts compile and take longer than 'warm' ones, so start times are
-- compared within one kind. NULL: an engine that compiles nothing at start, a local host, older runs.
ALTER TABLE runs ADD COLUMN compile_cache VARCHAR;

-- Schema v12: what an engine started with besides its argv (issue 34, item 5). engine_env: the
-- environment the configuration gave the container (the engine's `env` and its image source's), a
-- JSON object, part of the fingerprint; image_env: the image's own ENV from its config (read without
-- running it), a JSON list of "NAME=value". Criterion C1 fails on HSA_OVERRIDE_GFX_VERSION in either.
-- NULL: a local host (no image), older runs.
ALTER TABLE runs ADD COLUMN engine_env VARCHAR;
ALTER TABLE runs ADD COLUMN image_env VARCHAR;

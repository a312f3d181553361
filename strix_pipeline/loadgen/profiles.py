"""The suite's named profiles."""

from __future__ import annotations

from strix_pipeline.config import ScenarioProfile

# Recommended [profiles.quick]: the whole suite in ~1-2 min with Gemma 3 270M on 2 CPU cores
# (llama-server -c 8192 -np 4: 2048 tokens per slot, so every length below fits one slot).
QUICK_PROFILE = ScenarioProfile.model_validate(
    {
        "request_timeout_s": 120,
        "smoke": {"output_tokens": 16},
        "concurrency_sweep": {
            "levels": [1, 2, 4],
            "requests_per_level": 4,
            "warmup": 1,
            "input_tokens": 128,
            "output_tokens": 16,
            "max_duration_s": 60,
        },
        "prefill_ladder": {
            "input_tokens": [128, 256, 512, 1024],
            "requests_per_level": 1,
            "output_tokens": 2,
        },
        "decode": {"requests": 1, "output_tokens": 32, "input_tokens": 64},
        "prefix_cache": {"prefix_tokens": 1024, "suffix_tokens": 32, "output_tokens": 2, "repeats": 1},
    }
)

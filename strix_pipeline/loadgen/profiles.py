"""The suite's named profiles as the embedded default configuration defines them.

``[profiles.quick]`` in default.toml is the one quick suite: what ``make run`` measures, and what
``strix bench --profile quick`` runs when the configuration in use names no quick profile.
"""

from __future__ import annotations

from strix_pipeline.config import DEFAULT_CONFIG, ConfigError, ScenarioProfile, read_config


def default_profile(name: str) -> ScenarioProfile:
    """The profile ``name`` of the embedded default configuration, read and checked as any config is."""
    profiles = read_config(DEFAULT_CONFIG).profiles
    if name not in profiles:
        raise ConfigError(f"{DEFAULT_CONFIG}: no profile named {name!r} (defined: {sorted(profiles)})")
    return profiles[name]


# every prompt length in it fits one request's 2048 tokens of context (gemma3-270m's context_length)
QUICK_PROFILE = default_profile("quick")

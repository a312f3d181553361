"""The Dagster layer's composition root: `definitions.py` builds the one `Definitions` from the config
(assets and checks from `assets/`, jobs, sensors and schedules from `schedules/`); `run.py` is the
process `strix run` starts. The domain (`strix_pipeline`) never imports this package."""

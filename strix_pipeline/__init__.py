"""strix-pipeline: benchmark LLM inference engines on Strix Halo, keep the results, decide when to switch."""

from strix_pipeline.records import HARNESS_VERSION

__version__ = HARNESS_VERSION

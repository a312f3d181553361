"""The load generator: an accurate streaming client and the standard benchmark suite.

Public API (used by the Dagster asset, the launchers and ``strix bench``)::

    result = await run_suite(base_url, model, profile, slo, run_id, scenarios=None,
                             context_length=None, traces_dir=None, metrics_url=None, on_progress=print)
    result = run_suite_sync(...)  # same, in its own event loop
    result = await run_load(base_url, model, slo, run_id, DatasetLoad(prompts, levels=[1, 4]))
    result = await run_load(base_url, model, slo, run_id, RandomLoad(input_lens, output_lens))

Every entry point takes the same watchers as keywords (``Watchers``: metrics_url, on_progress,
on_request, scrape_interval_s, engine_exit). ``base_url`` is the server root
(``http://127.0.0.1:8080``; a trailing ``/v1`` is accepted).

The rooms: ``suite`` (the entry points), ``scenarios`` (the catalogue, ``SCENARIOS``), ``level``
(driving one level), ``context`` (what a level sends through), ``loads`` (dataset and random loads),
``trace_replay`` (a recorded trace's replay, the ``trace`` scenario), ``server`` (what the server
says about itself), ``profiles`` (the default config's profiles),
``client``/``sse`` (the streaming client), ``metrics``, ``prometheus``, ``workloads``, ``vllm_flags``
and ``vllm_result`` (``vllm bench serve``'s names and result). This module only re-exports.
"""

from __future__ import annotations

from strix_pipeline.loadgen.loads import DatasetLoad, RandomLoad
from strix_pipeline.loadgen.loop import run as run_async
from strix_pipeline.loadgen.profiles import QUICK_PROFILE
from strix_pipeline.loadgen.scenarios import SCENARIOS
from strix_pipeline.loadgen.server import detect_context_length, detect_model, normalize_base_url
from strix_pipeline.loadgen.suite import (
    SuiteInterrupted,
    SuiteResult,
    Watchers,
    run_load,
    run_suite,
    run_suite_sync,
)
from strix_pipeline.loadgen.workloads import load_dataset

__all__ = [
    "SCENARIOS",
    "QUICK_PROFILE",
    "SuiteResult",
    "SuiteInterrupted",
    "Watchers",
    "DatasetLoad",
    "RandomLoad",
    "run_suite",
    "run_suite_sync",
    "run_load",
    "load_dataset",
    "detect_context_length",
    "detect_model",
    "normalize_base_url",
    "run_async",
]

"""C5 at the same context: a local llama-server run records what the engine says it
allocated at load -- its weights and its KV cache, from its own log (memory/breakdown.py) -- so the
decision's C5 reason gives llama-server's weights / KV / other beside vLLM's. llama-server prints
those lines only at log verbosity 4; the launcher passes it, and the flag is no part of the series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import need
from support.pipeline_helpers import llama_available, write_config

from strix_pipeline.config_load import load_config
from strix_pipeline.engines.llamacpp import LOG_VERBOSITY
from strix_pipeline.provision import gemma_model
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.units import MIB


@pytest.mark.llama
def test_a_local_llama_server_run_records_its_weights_and_kv_cache_from_its_log(tmp_path: Path) -> None:
    need(llama_available(), "llama-server and the Gemma model", "make test builds them")
    config = load_config(write_config(tmp_path))
    target = BenchmarkTarget("local", "llamacpp", "gemma3-270m", "tiny", None)
    result = run_benchmark(config, target, log=lambda _: None, scenarios=["smoke"])
    run = result.run
    assert run.status == "ok", run.failure_reason
    assert " ".join(LOG_VERBOSITY) in (run.launch_command or "")
    assert "-lv" not in json.loads(run.engine_flags or "[]")  # how it logs is not how it computes
    # the weights as loaded: Gemma 3 270M Q4_K_M's tensors, a little under the GGUF file the run served
    gguf = gemma_model.assemble().stat().st_size
    assert run.weights_bytes is not None and 0.8 * gguf < run.weights_bytes < 1.1 * gguf, run.weights_bytes
    # the KV cache for the profile's slots x context, in f16: tens of MiB, less than the whole held
    assert run.kv_cache_bytes is not None and 4 * MIB < run.kv_cache_bytes, run.kv_cache_bytes
    print(f"held {run.held_bytes}, weights {run.weights_bytes}, KV {run.kv_cache_bytes}")

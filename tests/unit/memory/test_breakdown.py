"""The engines' own log lines -> weights / KV / other, on lines captured from the real engines."""

from __future__ import annotations

from pathlib import Path

from strix_pipeline.memory.breakdown import breakdown, parse_engine_log, parse_llamacpp_log, parse_vllm_log

LOGS = Path(__file__).parents[2] / "fixtures" / "engine_logs"


def test_vllm_cpu_log_of_a_make_run() -> None:
    got = parse_vllm_log((LOGS / "vllm-0.32.0-cpu-2gib.log").read_text())
    assert got.weights_bytes == round(0.50 * 1024**3)  # "Checkpoint size: 0.50 GiB"
    assert got.kv_bytes == 2147483648  # the launch line's exact bytes, not the worker's "2.0" GiB
    assert got.kv_capacity_tokens == 110_733 and got.max_concurrency == 54.07


def test_vllm_gpu_lines_and_the_rest_from_the_held_figure() -> None:
    text = (
        "(Worker pid=1) INFO [gpu_model_runner.py:2602] Model loading took 0.5234 GiB and 3.1 seconds\n"
        "(Worker pid=1) INFO [gpu_worker.py:298] Available KV cache memory: 40.25 GiB\n"
    )
    got = parse_vllm_log(text)
    assert got.weights_bytes == round(0.5234 * 1024**3) and got.kv_bytes == round(40.25 * 1024**3)
    split = breakdown(45 * 1024**3, got)
    assert split is not None and split.other_bytes == 45 * 1024**3 - got.weights_bytes - got.kv_bytes


def test_llamacpp_buffers_are_summed() -> None:
    text = (
        "load_tensors:   CPU_Mapped model buffer size =   241.41 MiB\n"
        "llama_kv_cache:        CPU KV buffer size =    48.00 MiB\n"
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 1280 cells\n"
        "llama_kv_cache:        CPU KV buffer size =    18.75 MiB\n"
        "llama_context:        CPU compute buffer size =   515.00 MiB\n"
    )
    got = parse_llamacpp_log(text)
    assert got.weights_bytes == round(241.41 * 1024**2)
    assert got.kv_bytes == round((48.00 + 18.75) * 1024**2)
    assert got.compute_bytes == 515 * 1024**2


def test_a_log_without_the_lines_gives_none_not_zero() -> None:
    got = parse_engine_log("llamacpp", (LOGS / "vllm-0.32.0-cpu-2gib.log").read_text())
    assert got.weights_bytes is None and got.kv_bytes is None
    split = breakdown(10, got)
    assert split is not None and split.other_bytes is None
    assert breakdown(None, got) is None
    assert parse_engine_log("sglang", "anything").kv_bytes is None

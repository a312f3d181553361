"""A run's distance to the memory-bandwidth limit: the probe, the model's bytes, the figure, all stored.

decode efficiency = decode tok/s x bytes read per token / measured bandwidth (memory/efficiency.py).
The decode speed is the single-client one (batch 1: every step reads all weights and the context's
KV once): the decode scenario's, else the concurrency sweep's first level's; the context is that
level's mean prompt plus half its mean output (the KV grows while a reply is generated). The
bandwidth is a copy probe on the host benchmarked, with the engine's thread count, taken before the
engine starts (memory/bandwidth.py; on a Docker host in a container of its
``efficiency_probe_image``, which reads the model file there too: hosts/probes/efficiency.py). A
figure outside (0, 1] is not stored as a value: the run's ``efficiency_problem`` says why.
"""

from __future__ import annotations

from pathlib import Path

from strix_pipeline.memory.bandwidth import BandwidthProbe, measure_copy_bandwidth
from strix_pipeline.memory.bytes_per_token import ModelBytes, ModelFileError, from_gguf, from_hf_checkpoint
from strix_pipeline.memory.efficiency import decode_efficiency
from strix_pipeline.records import LevelAggregate, RunResult
from strix_pipeline.runner.target import Log

# Why a Docker host's run has no figure when its host names no efficiency probe image: the copy probe
# and the GGUF/safetensors header reader run in a container with python3 and numpy on the host
# (hosts/probes/efficiency.py), and the memory probe's busybox has neither; the decode speed is stored.
DOCKER_HOST_EFFICIENCY = (
    "not measured on a Docker host without efficiency_probe_image: the bandwidth probe and the "
    "model-file reader need an image with python3 and numpy there (the vLLM ROCm image has both)"
)
SWEEP = "concurrency_sweep"
DECODE = "decode"


def probe_bandwidth(threads: int, log: Log) -> BandwidthProbe | None:
    """The host's copy bandwidth with ``threads`` threads (None, logged, when the probe cannot run)."""
    try:
        probe = measure_copy_bandwidth(threads=max(1, threads))
    except (MemoryError, ValueError, OSError, RuntimeError) as e:
        log(f"memory-bandwidth probe failed: {type(e).__name__}: {e}")
        return None
    log(bandwidth_line(probe))
    return probe


def bandwidth_line(probe: BandwidthProbe) -> str:
    return f"memory bandwidth: {probe.bytes_per_s / 1e9:.1f} GB/s ({probe.threads} threads, {probe.method})"


def model_line(model: ModelBytes) -> str:
    return (
        f"model bytes per token: {model.weight_bytes / 1e9:.3f} GB of weights + "
        f"{model.kv_bytes_per_token} B of KV per token in context ({model.source})"
    )


def model_bytes(path: Path | None) -> tuple[ModelBytes | None, str | None]:
    """The bytes per token of the model file (GGUF) or checkpoint directory served, or why not."""
    if path is None:
        return None, "no model path known for this run"
    try:
        return (from_hf_checkpoint(path) if path.is_dir() else from_gguf(path)), None
    except (ModelFileError, OSError) as e:
        return None, f"model bytes unknown: {e}"


def single_client_decode(result: RunResult) -> tuple[LevelAggregate | None, float | None]:
    """The one-client level and its decode tok/s: the decode scenario's (output tokens after the
    first over the time after the first), else the sweep's first level's (1000 / mean TPOT)."""
    for a in result.aggregates:
        if a.scenario == DECODE and a.level == 1 and a.decode_tokens_per_s:
            return a, a.decode_tokens_per_s
    for a in result.aggregates:
        if a.scenario == SWEEP and a.level == 1 and a.tpot_mean_ms:
            return a, 1000.0 / a.tpot_mean_ms
    return None, None


def record_efficiency(
    result: RunResult, probe: BandwidthProbe | None, model: ModelBytes | None, why_no_model: str | None
) -> None:
    """Store the inputs on the run and, when they give one in (0, 1], the figure."""
    run = result.run
    if probe is not None:
        run.bandwidth_bytes_per_s, run.bandwidth_threads = probe.bytes_per_s, probe.threads
    if model is not None:
        run.model_weight_bytes, run.kv_bytes_per_token = model.weight_bytes, model.kv_bytes_per_token
    single, speed = single_client_decode(result)
    if single is None or speed is None:
        run.efficiency_problem = f"no single-client decode speed measured ({DECODE} or {SWEEP} level 1)"
        return
    run.decode_tok_s = speed
    out_mean = (single.output_tokens_total or 0) / max(1, single.requests_ok)
    run.decode_context_tokens = (single.input_tokens_mean or 0.0) + out_mean / 2
    problems = [p for p in (why_no_model, None if probe else "no bandwidth probe") if p]
    if problems or model is None or probe is None:
        run.efficiency_problem = "; ".join(problems)
        return
    eff = decode_efficiency(
        run.decode_tok_s, model.bytes_per_token(run.decode_context_tokens), probe.bytes_per_s
    )
    run.decode_efficiency, run.efficiency_problem = eff.value, eff.problem

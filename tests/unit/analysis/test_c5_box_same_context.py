"""C5 at the same context on the Box: two Docker-host runs recorded as the Docker
runner records them -- vLLM's launch sized by the launcher for the profile's token capacity (its KV
bytes on the launch line of its log, the tokens its KV cache holds from vLLM's own line, production's
configured pool beside), llama-server's ``-c`` -- make C5 say "at the same context" and decide on what
each holds; a vLLM whose pool stayed the configured fraction (an older release) is "not at the same
context"."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from support.decision_seed import SEPT, evidence_of, make_config, run_record, run_result

from strix_pipeline.analysis.decision import memory_not_above_llamacpp
from strix_pipeline.engines.base import DeviceMemory
from strix_pipeline.hosts.docker import launcher as dk
from strix_pipeline.hosts.docker.model_config import ModelConfig
from strix_pipeline.records import RunResult
from strix_pipeline.runner.record import record_breakdown
from strix_pipeline.units import GB, GIB

# Qwen3-30B-A3B's KV shape: 48 full-attention layers, 4 KV heads of 128, bf16
QWEN3_30B = {"num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "num_attention_heads": 32}
HIP_TOTAL = int(62.9 * GIB)
TOKENS = 4096 * 8  # the profile's defaults: 4,096 tokens x 8 slots
# a pool block is 48 layers x 16 tokens x 4 x 128 x 2 x 2 B; a 4,096-token request takes 256 of them
KV_BYTES = 48 * 16 * 4 * 128 * 2 * 2 * 256 * 8
NOW = SEPT + timedelta(days=1)


def vllm_log(tmp_path: Path, release: str) -> tuple[Path, int | None]:
    """The Docker launcher's log of a vLLM run on the Box (no daemon: the config is injected) and the
    production pool it recorded: its own lines, the launch line, then vLLM's at load."""
    config = make_config()
    launcher = dk.DockerLauncher(
        config.hosts["strix-halo"],
        config.engines["vllm"],
        config.models["qwen3-30b-a3b"],
        "vllm/vllm-openai-rocm@sha256:" + "a" * 64,
        f"box-{release}",
        tmp_path,
        release=release,
        read_config=lambda d: ModelConfig(QWEN3_30B, f"{d}/config.json"),
    )
    launcher.size_pools(DeviceMemory(total_gb=HIP_TOTAL / GB))
    launcher.size_for_context()
    sized = launcher.kv_sizing is not None
    kv_line = (
        "reserved 3.00 GiB memory for KV Cache as specified by kv_cache_memory_bytes config"
        if sized
        else "Available KV cache memory: 36.01 GiB"
    )
    tokens = f"{TOKENS:,}" if sized else "393,408"
    with launcher.log_path.open("a") as f:
        f.write(
            f"[strix 03:00:05] command: {launcher.spec.command_line()}\n"
            "(EngineCore pid=87) INFO [gpu_model_runner.py] Model loading took 16.00 GiB and 41.2 seconds\n"
            f"(EngineCore pid=87) INFO [gpu_worker.py] {kv_line}\n"
            f"(EngineCore pid=87) INFO [kv_cache_utils.py] GPU KV cache size: {tokens} tokens\n"
        )
    return launcher.log_path, launcher.production_pool_bytes


def candidate(tmp_path: Path, held_gib: float, release: str = "v0.11.0") -> RunResult:
    run = run_record("vllm-box", "vllm", held_gib=held_gib, digest="sha256:" + "a" * 64)
    log, pool = vllm_log(tmp_path, release)
    record_breakdown(run, "vllm", log, pool)
    return run_result(run, ttft5=(820.0, 760.0, 900.0))


def baseline(tmp_path: Path) -> RunResult:
    run = run_record(
        "llama-box",
        "llamacpp",
        started_at=SEPT - timedelta(hours=2),
        tag="server-rocm-b6500",
        profile="qwen3-30b-a3b-q4",
        quant="Q4_K_M",
        held_gib=19.0,
        digest="sha256:" + "b" * 64,
    )
    log = tmp_path / "llama-box-llamacpp.log"
    log.write_text(
        "load_tensors:        ROCm0 model buffer size = 16384.00 MiB\n"
        "llama_kv_cache:      ROCm0 KV buffer size =  3072.00 MiB\n"
        "llama_context:      ROCm0 compute buffer size =   300.00 MiB\n"
    )
    record_breakdown(run, "llamacpp", log, None, TOKENS)  # -c 4096 x 8, shared by the slots
    return run_result(run, ttft5=(1450.0, 1380.0, 1530.0))


def c5(tmp_path: Path, cand: RunResult):
    ev = evidence_of([cand, baseline(tmp_path)], make_config(), NOW)
    return memory_not_above_llamacpp(ev, make_config())


@pytest.mark.parametrize(("held", "status"), [(18.0, "pass"), (21.0, "fail")])
def test_two_box_runs_at_the_same_context_decide_on_what_each_holds(
    tmp_path: Path, held: float, status: str
) -> None:
    cand = candidate(tmp_path, held)
    r = cand.run
    assert (r.kv_cache_bytes, r.kv_capacity_tokens) == (KV_BYTES, TOKENS)  # the launch line's exact bytes
    assert r.production_pool_bytes == pytest.approx(0.85 * HIP_TOTAL, abs=1)
    result = c5(tmp_path, cand)
    assert result.status == status, result.reason
    assert result.evidence_run_ids == ["vllm-box", "llama-box"]
    other = held - 16.0 - 3.0
    assert (
        f"held after load {held:.1f} GiB (v0.11.0 (sha256:aaaaaaaaaaaa)) (weights 16.00 GiB / KV 3.00 GiB / "
        f"other {other:.2f} GiB, "
        "KV for 32,768 tokens) vs llamacpp 19.0 GiB (server-rocm-b6500 (sha256:bbbbbbbbbbbb)) (weights 16.00 "
        "GiB / KV 3.00 GiB / "
        "other 0.00 GiB, KV for 32,768 tokens); at the same context; "
        "production's pool as configured: 53.46 GiB" in result.reason
    ), result.reason


def test_a_box_run_whose_pool_stayed_the_fraction_is_not_at_the_same_context(tmp_path: Path) -> None:
    cand = candidate(tmp_path, 18.0, release="v0.10.1")  # no --kv-cache-memory-bytes in that release
    assert cand.run.kv_capacity_tokens == 393_408 and cand.run.kv_cache_bytes == round(36.01 * GIB)
    result = c5(tmp_path, cand)
    assert "not at the same context (393,408 vs 32,768 KV tokens)" in result.reason, result.reason
    assert "production's pool as configured: 53.46 GiB" in result.reason

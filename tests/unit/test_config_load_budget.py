"""The budget rule at config load on a CPU Docker host: vLLM's CPU backend reserves
its KV bytes, not --gpu-memory-utilization of the budget."""

from __future__ import annotations

from strix_pipeline.config import StrixConfig
from strix_pipeline.config_load import budget_problems


def config(devices: list[str]) -> StrixConfig:
    return StrixConfig.model_validate(
        {
            "hosts": {
                "cpubox": {
                    "kind": "docker",
                    "docker_host": "unix:///var/run/docker.sock",
                    "devices": devices,
                    "memory_budget_gb": 16,
                }
            },
            "engines": {
                "vllm": {
                    "kind": "vllm",
                    # 4 GiB of KV cache and 4 GiB of swap: 8.6 GB, not 0.85 x 16 + 4.3 = 17.9 GB
                    "extra_flags": ["--kv-cache-memory-bytes", str(4 * 2**30), "--swap-space", "4"],
                }
            },
            "models": {"m": {"model": "m", "family": "m", "quantization": "BF16", "path": "/m"}},
            "profiles": {"quick": {}},
            "runs": {"cpubox": [{"engine": "vllm", "model": "m", "profile": "quick"}]},
            "decision": {"host": "cpubox", "candidate_engine": "vllm", "baseline_engine": "vllm"},
        }
    )


def test_a_cpu_docker_host_counts_vllms_kv_bytes():
    assert budget_problems(config([])) == []


def test_a_gpu_docker_host_counts_the_fraction_until_the_box_is_read():
    (problem,) = budget_problems(config(["/dev/kfd", "/dev/dri"]))
    assert "--gpu-memory-utilization 0.85 x budget 16 GB = 13.6 GB" in problem
    assert "--swap-space 4 GiB = 4.3 GB" in problem, problem

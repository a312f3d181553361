"""Pool engines sized against the device total HIP reports, size flags in their own
units, vLLM's CPU backend reserving its KV bytes, and SGLang's HiCache refused on unified memory."""

from __future__ import annotations

import pytest

from strix_pipeline.config import EngineConfig, ModelProfile
from strix_pipeline.engines import build_spec, vllm
from strix_pipeline.engines.base import DeviceMemory, flag_gb, pool_fit_problem
from strix_pipeline.engines.sglang import unified_memory_problems
from strix_pipeline.units import GB, GIB

# Strix Halo, 128 GB, default TTM limit: PyTorch/HIP report about 62.9 GiB (docs/box.md;
# kyuz0 vLLM toolbox docs, ROCm issue 6004), whatever the budget says
HIP_TOTAL = int(62.9 * GIB)
QWEN3_30B_BF16 = int(56.9 * GIB)  # 16 safetensors shards of Qwen3-30B-A3B in BF16


def profile(**kw) -> ModelProfile:
    return ModelProfile(
        model="Qwen3-30B-A3B",
        family="qwen3-30b-a3b",
        quantization="BF16",
        path="/m",
        memory_fraction=0.85,
        **kw,
    )


def gb(spec) -> float:
    return sum(r.gb for r in spec.reservations)


def test_vllm_reserves_its_fraction_of_the_hip_device_total_not_of_the_budget():
    device = DeviceMemory(total_gb=HIP_TOTAL / GB)
    spec = build_spec(EngineConfig(kind="vllm"), profile(), "/m", budget_gb=120, device=device)
    assert gb(spec) == pytest.approx(0.85 * HIP_TOTAL / GB)  # 57.4 GB, not 0.85 x 120 = 102
    assert "device total 67.5 GB (HIP)" in spec.reservations[0].what
    assert spec.pool_fraction == 0.85 and spec.pool_flag == "--gpu-memory-utilization"
    # no device total read: the budget stands in, as before
    assert gb(build_spec(EngineConfig(kind="vllm"), profile(), "/m", budget_gb=120)) == pytest.approx(102)


def test_the_example_bf16_model_does_not_fit_the_pool_and_the_refusal_has_the_numbers():
    why = pool_fit_problem(
        0.85, HIP_TOTAL, QWEN3_30B_BF16, fraction_flag="--gpu-memory-utilization", what="vllm 'qwen3'"
    )
    assert why is not None
    assert "weights 56.9 GiB exceed the pool --gpu-memory-utilization 0.85 x device total 62.9 GiB" in why
    assert "= 53.5 GiB, by 3.4 GiB" in why
    assert pool_fit_problem(0.85, HIP_TOTAL, int(30 * GIB), fraction_flag="-f", what="x") is None
    assert pool_fit_problem(0.85, None, QWEN3_30B_BF16, fraction_flag="-f", what="x") is None  # not read


def test_size_flags_are_read_in_their_own_unit():
    assert flag_gb(["--swap-space", "4"], "--swap-space", GIB) == pytest.approx(4.294967296)
    assert flag_gb(["--hicache-size=20"], "--hicache-size") == 20.0
    spec = build_spec(
        EngineConfig(kind="vllm"),
        profile(extra_flags={"vllm": ["--cpu-offload-gb", "10"]}),
        "/m",
        budget_gb=120,
    )
    assert [r.gb for r in spec.reservations][-1] == pytest.approx(10 * GIB / GB)


def test_vllm_on_a_cpu_docker_host_reserves_its_kv_bytes_not_the_fraction():
    cpu = DeviceMemory(cpu=True)
    flags = {"vllm": ["--kv-cache-memory-bytes", str(2 * GIB)]}
    spec = build_spec(EngineConfig(kind="vllm"), profile(extra_flags=flags), "/m", budget_gb=16, device=cpu)
    assert gb(spec) == pytest.approx(2 * GIB / GB)
    env = DeviceMemory(cpu=True, env={"VLLM_CPU_KVCACHE_SPACE": "3"})
    spec = build_spec(EngineConfig(kind="vllm"), profile(), "/m", budget_gb=16, device=env)
    assert gb(spec) == pytest.approx(3 * GIB / GB)
    # neither: vLLM's CPU worker takes the fraction of all host memory -- the budget rule stands
    spec = build_spec(EngineConfig(kind="vllm"), profile(), "/m", budget_gb=16, device=cpu)
    assert gb(spec) == pytest.approx(0.85 * 16)


@pytest.mark.parametrize(
    "flags",
    [
        ["--hicache-size", "20"],
        ["--enable-hierarchical-cache"],
        ["--hicache-ratio=2"],
    ],
)
def test_hicache_is_a_unified_memory_problem_whatever_its_size(flags):
    (why,) = unified_memory_problems(["--mem-fraction-static", "0.55", *flags])
    assert "unified-memory host" in why and "never enable it there" in why
    assert unified_memory_problems(["--mem-fraction-static", "0.55"]) == []


def test_a_gpu_spec_sized_in_kv_bytes_keeps_its_fraction_as_the_start_gate():
    """engines/vllm.py for_context: on a GPU the KV bytes for the context beside the fraction, which
    still counts (vLLM asks that much of the device free at start); on the CPU backend they replace it."""
    device = DeviceMemory(total_gb=HIP_TOTAL / GB)
    spec = build_spec(EngineConfig(kind="vllm"), profile(), "/m", budget_gb=120, device=device)
    assert vllm.production_pool_bytes(spec.flags, profile(), device) == pytest.approx(0.85 * HIP_TOTAL, abs=1)
    sized = vllm.for_context(spec, 3 * GIB, profile(), device)
    assert (
        sized.flags[-2:] == ["--kv-cache-memory-bytes", str(3 * GIB)]
        and "--gpu-memory-utilization" in sized.flags
    )
    assert sized.command[-len(sized.flags) :] == sized.flags
    assert gb(sized) == pytest.approx(0.85 * HIP_TOTAL / GB)
    on_cpu = vllm.for_context(spec, 3 * GIB, profile(), DeviceMemory(cpu=True))
    assert "--gpu-memory-utilization" not in on_cpu.flags
    assert [(r.what, r.gb) for r in on_cpu.reservations][-1] == (
        f"--kv-cache-memory-bytes {3 * GIB}",
        3 * GIB / GB,
    )
    both = build_spec(
        EngineConfig(kind="vllm"),
        profile(extra_flags={"vllm": ["--kv-cache-memory-bytes", "5"]}),
        "/m",
        budget_gb=120,
        device=device,
    )
    assert gb(both) == pytest.approx(0.85 * HIP_TOTAL / GB)
    # the CPU backend's pool as configured: its KV bytes, VLLM_CPU_KVCACHE_SPACE GiB, else unknown
    env = DeviceMemory(cpu=True, env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert vllm.production_pool_bytes(spec.flags, profile(), env) == 2 * GIB
    assert vllm.production_pool_bytes(spec.flags, profile(), DeviceMemory(cpu=True)) is None
    assert vllm.production_pool_bytes(spec.flags, profile(), DeviceMemory()) is None  # not read

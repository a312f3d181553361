"""C5 at the same context on a Docker host: the Docker launcher sizes vLLM's KV cache
for the profile's token capacity from the checkpoint's config.json as the engine's container sees it,
replacing the pool fraction with ``--kv-cache-memory-bytes``; where it cannot, the fraction stays and
the engine's log says why. The config is read by an injected reader here: no daemon.

Gemma 3 270M (18 layers: 3 full + 15 sliding with window 512, 1 KV head, head_dim 256, bf16) at
2,048 tokens x 8 slots. On the CPU (block 128) vLLM's own log confirmed the rules
(tests/unit/memory/test_kv_capacity.py); on a GPU the block is 16 tokens:
a page is 16 x 1 x 256 x 2 (K, V) x 2 B = 16,384 B, a pool block 3 layers of it = 49,152 B; a request
takes 2048/16 = 128 blocks in the full-attention group and ceil(min(511 + 2048, 2048)/16) + 1 = 129 in
each of the 5 sliding groups: 773 blocks; 8 requests: 49,152 x 773 x 8 = 303,955,968 B.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strix_pipeline.config import DockerHostConfig, EngineConfig, ModelProfile
from strix_pipeline.engines.base import DeviceMemory, flag_value
from strix_pipeline.hosts.docker import launcher as dk
from strix_pipeline.hosts.docker.model_config import ModelConfig
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.memory.bytes_per_token import ModelFileError
from strix_pipeline.units import GB, GIB

GEMMA = Path(__file__).parents[2] / "fixtures" / "gemma3-270m-bf16" / "config.json"
DIGEST = "sha256:" + "ab" * 32
HIP_TOTAL = int(62.9 * GIB)  # the device total HIP reports on a 128 GB Box with the default TTM limit
GPU_BYTES = 49_152 * 773 * 8  # the module docstring's derivation
CPU_BYTES = 393_216 * 101 * 8  # block 128: 3 x 128 x 256 x 2 x 2 B; 16 + 5 x (16 + 1) blocks a request
FRACTION, KV = "--gpu-memory-utilization", "--kv-cache-memory-bytes"


class Reader:
    """An injected config reader: Gemma's config.json, or ``error`` raised; records what it was asked."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.asked = error, []

    def __call__(self, model_dir: str) -> ModelConfig:
        self.asked.append(model_dir)
        if self.error is not None:
            raise self.error
        return ModelConfig(json.loads(GEMMA.read_text()), f"{model_dir}/config.json (test)")


def launcher(
    tmp_path: Path,
    reader: Reader,
    *,
    release: str | None = "v0.11.0",
    env: dict[str, str] | None = None,
    budget_gb: float | None = None,
    extra: list[str] | None = None,
) -> dk.DockerLauncher:
    host = DockerHostConfig(
        kind="docker", docker_host="ssh://u@box", models_dir="/srv/models", memory_budget_gb=budget_gb
    )
    profile = ModelProfile(
        model="Gemma 3 270M",
        family="gemma3-270m",
        quantization="BF16",
        path="/srv/models/gemma3-270m-bf16",
        context_length=2048,
        parallel=8,
        extra_flags={"vllm": extra or []},
    )
    engine = EngineConfig(kind="vllm", env=env or {})
    return dk.DockerLauncher(
        host,
        engine,
        profile,
        f"vllm/vllm-openai-rocm@{DIGEST}",
        "run-1",
        tmp_path,
        release=release,
        read_config=reader,
    )


def on_gpu(ln: dk.DockerLauncher) -> dk.DockerLauncher:
    ln.size_pools(DeviceMemory(total_gb=HIP_TOTAL / GB))
    return ln


def said(ln: dk.DockerLauncher) -> str:
    return ln.log_path.read_text()


def test_the_gpu_spec_holds_kv_for_exactly_the_slots_beside_the_fraction(tmp_path: Path) -> None:
    reader = Reader()
    ln = on_gpu(launcher(tmp_path, reader))
    assert flag_value(ln.spec.flags, FRACTION) == "0.85"  # the configured pool until it is sized
    ln.size_for_context()
    assert reader.asked == ["/models/gemma3-270m-bf16"]  # where the engine's container sees it
    assert flag_value(ln.spec.flags, KV) == str(GPU_BYTES) == "303955968"
    assert f"{KV} {GPU_BYTES}" in " ".join(ln.spec.command)
    # the fraction stays: vLLM sizes the KV by the bytes but asks F x total free at start, production's gate
    assert flag_value(ln.spec.flags, FRACTION) == "0.85"
    assert ln.kv_sizing is not None and ln.kv_sizing.block_size == 16
    assert ln.kv_sizing.capacity_tokens == 2048 * 8 and ln.kv_sizing.max_concurrency == 8.0
    # so the guards count what vLLM asks free at start: 0.85 x the device total
    assert [r.what for r in ln.spec.reservations] == [
        "--gpu-memory-utilization 0.85 x device total 67.5 GB (HIP)"
    ]
    assert ln.spec.pool_fraction == 0.85  # production's fraction: the weights-fit check stays its
    text = said(ln)
    assert "vLLM KV cache for the same context as llama-server: 303955968 B = 6184 blocks" in text
    assert "16384 tokens, concurrency 8.00" in text


def test_production_pool_is_the_fraction_of_the_device_total_hip_reports(tmp_path: Path) -> None:
    ln = on_gpu(launcher(tmp_path, Reader()))
    ln.size_for_context()
    assert ln.production_pool_bytes == pytest.approx(0.85 * HIP_TOTAL, abs=1)
    assert "the configured pool (production's pool, 53.46 GiB) is shown beside it" in said(ln)
    # not read (no device total): no figure, rather than one of the budget
    unread = launcher(tmp_path / "unread", Reader())
    unread.size_for_context()
    assert unread.production_pool_bytes is None and unread.kv_sizing is not None


def test_sizing_survives_the_pools_sized_again(tmp_path: Path) -> None:
    ln = on_gpu(launcher(tmp_path, Reader()))
    ln.size_for_context()
    on_gpu(ln)  # size_pools rebuilds the spec: the context's KV stays
    assert flag_value(ln.spec.flags, KV) == str(GPU_BYTES) and ln.spec.flags.count(KV) == 1
    ln.size_for_context()  # once: nothing is read or said again
    assert said(ln).count("for the same context") == 1


def test_an_older_release_keeps_the_fraction_and_says_why(tmp_path: Path) -> None:
    reader = Reader()
    ln = on_gpu(launcher(tmp_path, reader, release="v0.10.1"))
    ln.size_for_context()
    assert flag_value(ln.spec.flags, FRACTION) == "0.85" and KV not in ln.spec.flags
    assert ln.kv_sizing is None and reader.asked == []  # the release decides before any read
    assert ln.production_pool_bytes == pytest.approx(0.85 * HIP_TOTAL, abs=1)  # shown beside C5
    text = said(ln)
    assert (
        "vLLM KV cache not sized for the same context as llama-server: vLLM v0.10.1: before 0.10.2: " in text
    )
    assert f"no {KV}" in text and "the pool stays as configured (production's pool, 53.46 GiB)" in text


def test_an_unreadable_config_keeps_the_fraction_and_says_why(tmp_path: Path) -> None:
    why = ModelFileError("/models/gemma3-270m-bf16/config.json in vllm/vllm-openai-rocm@…: no such file")
    ln = on_gpu(launcher(tmp_path, Reader(why)))
    ln.size_for_context()
    assert flag_value(ln.spec.flags, FRACTION) == "0.85" and KV not in ln.spec.flags
    assert ln.kv_sizing is None
    assert f"not sized for the same context as llama-server: {why}; the pool stays" in said(ln)


def test_a_cache_dtype_it_cannot_size_keeps_the_fraction(tmp_path: Path) -> None:
    ln = on_gpu(launcher(tmp_path, Reader(), extra=["--kv-cache-dtype", "nvfp4"]))
    ln.size_for_context()
    assert ln.kv_sizing is None and "--kv-cache-dtype nvfp4: not one of" in said(ln)


def test_fp8_cache_and_a_block_size_flag_are_sized_as_vllm_would(tmp_path: Path) -> None:
    ln = on_gpu(launcher(tmp_path, Reader(), extra=["--kv-cache-dtype", "fp8", "--block-size", "32"]))
    ln.size_for_context()
    assert ln.kv_sizing is not None and ln.kv_sizing.block_size == 32
    # 1-byte cells: a page is 32 x 256 x 2 B = 16,384 B, a pool block 49,152 B; a request 64 + 5 x 65
    assert ln.kv_sizing.bytes == 49_152 * (64 + 5 * 65) * 8


def test_a_configuration_sizing_the_cache_itself_is_left_so(tmp_path: Path) -> None:
    ln = on_gpu(launcher(tmp_path, Reader(), extra=[KV, str(GIB)]))
    ln.size_for_context()
    assert ln.kv_sizing is None and flag_value(ln.spec.flags, KV) == str(GIB)
    assert f"the configuration gives {KV} itself" in said(ln)


def test_an_unknown_release_is_taken_as_todays_and_said_so(tmp_path: Path) -> None:
    ln = on_gpu(launcher(tmp_path, Reader(), release=None))  # no record, no version label pulled
    ln.size_for_context()
    assert flag_value(ln.spec.flags, KV) == str(GPU_BYTES)
    assert f"(release not known: taken as one with {KV})" in said(ln)


def test_the_cpu_backend_is_sized_in_its_own_blocks_without_the_env_that_would_override_it(
    tmp_path: Path,
) -> None:
    """The Box simulator's vLLM: the CPU backend, with VLLM_CPU_KVCACHE_SPACE as its configured pool."""
    space = {"VLLM_CPU_KVCACHE_SPACE": "2"}
    ln = launcher(tmp_path, Reader(), release="0.32.0", env=space)
    ln.size_pools(DeviceMemory(cpu=True, env=space))
    assert ln.spec.env == space and ln.spec.reservations[0].what == "VLLM_CPU_KVCACHE_SPACE 2 GiB"
    ln.size_for_context()
    assert ln.kv_sizing is not None and ln.kv_sizing.block_size == 128
    assert flag_value(ln.spec.flags, KV) == str(CPU_BYTES) == "317718528"
    assert "VLLM_CPU_KVCACHE_SPACE" not in ln.spec.env  # vLLM 0.32's CPU platform lets it win
    assert [r.what for r in ln.spec.reservations] == [f"{KV} {CPU_BYTES}"]
    assert ln.production_pool_bytes == 2 * GIB  # the configured pool, as on host local


def test_a_sized_cache_over_the_budget_is_refused_before_production_stops(tmp_path: Path) -> None:
    # on the CPU backend the sized bytes are the reservation: 0.30 GB of KV over a 0.2 GB budget
    ln = launcher(tmp_path, Reader(), budget_gb=0.2)
    ln.size_pools(DeviceMemory(cpu=True))
    with pytest.raises(EngineStartError) as e:
        ln.size_for_context()
    assert (
        e.value.status == "failed_guard"
        and f"{KV} " in e.value.reason
        and "memory_budget_gb 0.2" in e.value.reason
    )


def test_other_engines_are_not_sized(tmp_path: Path) -> None:
    host = DockerHostConfig(kind="docker", docker_host="ssh://u@box", models_dir="/srv/models")
    profile = ModelProfile(model="q", family="q", quantization="Q4_K_M", path="/srv/models/q.gguf")
    reader = Reader()
    ln = dk.DockerLauncher(
        host, EngineConfig(kind="llamacpp"), profile, f"x@{DIGEST}", "r", tmp_path, read_config=reader
    )
    ln.size_for_context()
    assert reader.asked == [] and ln.production_pool_bytes is None and not ln.log_path.exists()


def test_the_config_is_read_through_the_model_mounts_alone(tmp_path: Path) -> None:
    ln = launcher(tmp_path, Reader())
    assert ln.model_volumes() == {"/srv/models": {"bind": "/models", "mode": "ro"}}
    # the compile cache volume is the engine's only: a read must not create it (it would say "warm")
    assert set(ln.volumes()) - set(ln.model_volumes()) == {ln.compile_cache_volume()}

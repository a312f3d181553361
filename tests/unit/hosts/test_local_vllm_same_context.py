"""The local vLLM starts with a KV cache sized for llama-server's token capacity, and without the
VLLM_CPU_KVCACHE_SPACE that would override it (vLLM 0.32 platforms/cpu.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from strix_pipeline.engines import vllm as vllm_spec
from strix_pipeline.engines import vllm_dtype
from strix_pipeline.engines.base import flag_value
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.vllm_server import LocalVllmServer, default_profile
from strix_pipeline.memory.kv_capacity import layout_from_config, vllm_kv_sizing

GEMMA = Path(__file__).parents[2] / "fixtures" / "gemma3-270m-bf16"
EXIT = [sys.executable, "-c", "import sys; sys.exit(3)"]


# a CPU that computes bf16 natively, and one that does not (float32 there: engines/vllm_dtype.py)
BF16_CPU = vllm_dtype.CpuId("bf16 cpu", frozenset({"avx2", "avx512f", "avx512_bf16"}))
AVX2_CPU = vllm_dtype.CpuId("avx2 cpu", frozenset({"avx2", "fma"}))


def _started(tmp_path: Path, ckpt: Path, cpu: vllm_dtype.CpuId = BF16_CPU, **kw: object) -> LocalVllmServer:
    profile = default_profile("bf16", str(ckpt), 2048, 8)
    srv = LocalVllmServer(
        profile=profile,
        executable=EXIT,
        log_dir=tmp_path,
        ready_timeout_s=30,
        progress=lambda _: None,
        cpu=cpu,
        **kw,
    )
    with pytest.raises(EngineStartError):
        srv.start()
    return srv


def test_kv_cache_sized_for_slots_times_context(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(GEMMA, ckpt)
    srv = _started(tmp_path, ckpt)
    kv = int(flag_value(srv.command, vllm_spec.KV_BYTES_FLAG) or 0)
    assert srv.kv_sizing is not None and kv == srv.kv_sizing.bytes
    sizing = vllm_kv_sizing(layout_from_config(ckpt), kv, 2048)
    assert sizing.max_concurrency == 8.0 and sizing.capacity_tokens == 8 * 2048
    assert kv < srv.kv_cache_gib * 1024**3  # far below the configured pool
    assert "VLLM_CPU_KVCACHE_SPACE" not in srv.env


def test_without_a_readable_config_the_configured_pool(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    srv = _started(tmp_path, ckpt)
    assert srv.kv_sizing is None
    assert flag_value(srv.command, vllm_spec.KV_BYTES_FLAG) == str(srv.kv_cache_gib * 1024**3)
    assert srv.env["VLLM_CPU_KVCACHE_SPACE"] == str(srv.kv_cache_gib)


def test_an_older_release_without_the_flag_gets_whole_gib_rounded_up(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(GEMMA, ckpt)
    srv = _started(tmp_path, ckpt, vllm_version="0.9.2")
    assert vllm_spec.KV_BYTES_FLAG not in srv.command
    assert srv.env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # ~0.3 GB for the capacity -> 1 GiB


def test_in_float32_the_same_context_takes_twice_the_bytes(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(GEMMA, ckpt)
    bf16 = _started(tmp_path / "a", ckpt)
    fp32 = _started(tmp_path / "b", ckpt, cpu=AVX2_CPU)
    assert (
        flag_value(fp32.command, "--dtype") == "float32" and flag_value(bf16.command, "--dtype") == "bfloat16"
    )
    kv = int(flag_value(fp32.command, vllm_spec.KV_BYTES_FLAG) or 0)
    assert kv == 2 * int(flag_value(bf16.command, vllm_spec.KV_BYTES_FLAG) or 0)
    sizing = vllm_kv_sizing(layout_from_config(ckpt, 4), kv, 2048)
    assert sizing.max_concurrency == 8.0 and sizing.capacity_tokens == 8 * 2048

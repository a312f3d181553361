"""The local vLLM launcher without vLLM: an engine that exits before it is ready is ``failed_start`` in
describe_exit's words, and the CPU spec replaces only the box spec's memory flag."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from support.engines import reserved_gb

from strix_pipeline.config import EngineConfig
from strix_pipeline.engines import build_spec, vllm_dtype
from strix_pipeline.engines import vllm as vllm_spec
from strix_pipeline.engines.base import flag_value
from strix_pipeline.hosts.errors import EngineStartError, describe_exit
from strix_pipeline.hosts.local.vllm_server import LocalVllmServer, default_profile


@pytest.mark.parametrize(
    ("code", "script"),
    [
        (
            -signal.SIGABRT,
            "import os, signal; print('fake vllm loading', flush=True); os.kill(os.getpid(), signal.SIGABRT)",
        ),
        (3, "import sys; print('fake vllm loading', flush=True); sys.exit(3)"),
    ],
)
def test_exit_before_ready_is_failed_start(tmp_path: Path, code: int, script: str) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    srv = LocalVllmServer(
        checkpoint=ckpt, executable=[sys.executable, "-c", script], log_dir=tmp_path, ready_timeout_s=60
    )
    with pytest.raises(EngineStartError) as info:
        srv.start()
    err = info.value
    assert err.status == "failed_start"
    assert err.reason == f"vLLM {describe_exit(code, 'vLLM')} before it was ready"
    assert "fake vllm loading" in (err.log_tail or "")
    assert not srv.running and srv.pids() == []
    assert srv.rpc_dir is not None and not srv.rpc_dir.exists()


def test_cpu_spec_replaces_only_the_memory_flag() -> None:
    profile = default_profile("bf16", "/ckpt", 2048, 4)
    box = build_spec(EngineConfig(kind="vllm"), profile, "/ckpt", port=8123, bind_host="127.0.0.1")
    cpu = vllm_spec.for_cpu(box, ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], 2, profile)
    assert cpu.executable == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag_value(box.flags, "--gpu-memory-utilization") == str(profile.memory_fraction)
    assert "--gpu-memory-utilization" not in cpu.flags
    assert flag_value(cpu.flags, "--kv-cache-memory-bytes") == str(2 * 1024**3)
    rest = [f for f in box.flags if f not in ("--gpu-memory-utilization", str(profile.memory_fraction))]
    assert [f for f in cpu.flags if f not in ("--kv-cache-memory-bytes", str(2 * 1024**3))] == rest
    assert flag_value(cpu.flags, "--model") == "/ckpt"
    assert reserved_gb(cpu) == pytest.approx(2 * 1024**3 / 1e9)


@pytest.mark.parametrize(
    ("flags", "extra", "dtype"),
    [
        (frozenset({"avx2", "fma"}), [], "float32"),
        (frozenset({"avx2", "avx512f", "avx512_bf16"}), [], "bfloat16"),
        (frozenset({"avx2"}), ["--dtype", "bfloat16"], "bfloat16"),  # configured: it wins
    ],
)
def test_the_launcher_computes_in_the_dtype_chosen_for_its_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], extra: list[str], dtype: str
) -> None:
    monkeypatch.setenv("STRIX_CACHE_DIR", str(tmp_path / "cache"))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    srv = LocalVllmServer(
        checkpoint=ckpt,
        executable=[sys.executable, "-c", "import sys; sys.exit(3)"],
        log_dir=tmp_path,
        ready_timeout_s=60,
        extra_args=extra,
        cpu=vllm_dtype.CpuId("test cpu", flags),
    )
    with pytest.raises(EngineStartError):
        srv.start()
    assert srv.command.count("--dtype") == 1 and flag_value(srv.command, "--dtype") == dtype
    assert srv.dtype_choice is not None and srv.dtype_choice.dtype == dtype

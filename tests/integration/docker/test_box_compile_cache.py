"""vLLM's compile cache kept across starts, on the Box simulator (dockerd behind a real sshd): the
engine's cache directory is a volume of its own per image, the first start of an image is recorded
``cold`` and compiles, the next is ``warm`` and finds what the first compiled -- so start times are
compared within one kind. The engine is a busybox stand-in that compiles when its cache is empty."""

from __future__ import annotations

import subprocess

import pytest
from conftest import need
from support.bench_docker import BUSYBOX, HOST, make_config, managed
from support.box_images import VLLM_STANDIN, push_image, vllm_standin_files
from support.box_sim import KEY_ENV  # the env var the simulator's box_key sets
from support.infra import free_port, start_registry

from strix_pipeline.config import StrixConfig
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

REPO = "strix-test/vllm-standin"


@pytest.fixture(scope="module")
def standin(registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory):
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    scratch = tmp_path_factory.mktemp("vllm-standin")
    reg = start_registry(scratch)
    image = push_image(reg, REPO, "v0.20.0", vllm_standin_files(scratch))
    yield image
    image.remove()
    reg.stop()
    volumes = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", "name=strix-compile-cache-vllm-"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for v in volumes:
        subprocess.run(["docker", "volume", "rm", "-f", v], capture_output=True, check=False)


def test_the_first_start_of_an_image_is_cold_and_the_next_warm(
    model_path, box_sshd, box_key, standin, tmp_path
):
    data = make_config(tmp_path, standin, model_path).model_dump()
    data["hosts"][HOST].update(
        {
            "docker_host": box_sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(box_sshd.known_hosts),
        }
    )
    source = {
        "registry": standin.registry.host,
        "repository": REPO,
        "insecure": True,
        "executable": [VLLM_STANDIN],
    }
    data["engines"]["vllm"] = {"kind": "vllm", "port": free_port(), "images": [source]}
    config = StrixConfig.model_validate(data)
    runs = []
    for i in range(2):
        result = run_benchmark(
            config,
            BenchmarkTarget(HOST, "vllm", "gemma", "tiny", standin.record("vllm")),
            run_id=f"cache-{i}",
            log=lambda _: None,
            force=True,
            scenarios=["smoke"],
        )
        assert managed(f"cache-{i}") == []
        runs.append(result.run)
    assert [r.compile_cache for r in runs] == ["cold", "warm"], [(r.status, r.failure_reason) for r in runs]
    logs = [(config.artifacts_dir() / "logs" / r.run_id / f"{r.run_id}-vllm.log").read_text() for r in runs]
    assert "compiling kernels" in logs[0] and "compiled kernels found" in logs[1]
    assert "compile cache strix-compile-cache-vllm-" in logs[1]

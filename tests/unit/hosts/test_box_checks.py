"""The Box's own word before production stops (hosts/box/checks.py, hosts/box/gpu_holders.py): what device a
pool is a fraction of, the weights' bytes as the probe lists them, which containers hold the GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strix_pipeline.config import DockerHostConfig, EngineConfig
from strix_pipeline.hosts.box import gpu_holders
from strix_pipeline.hosts.box.checks import device_memory, parse_sizes
from strix_pipeline.hosts.box.gpu_holders import _has_gpu_device, check_idle_ceiling
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.memory import HostMemoryFacts
from strix_pipeline.units import GB, GIB


def facts(total: int | None) -> HostMemoryFacts:
    return HostMemoryFacts(None, None, None, hip_device_total_bytes=total)


def test_the_device_is_hips_total_when_read_and_a_host_without_gpu_is_a_cpu_host():
    box = DockerHostConfig(kind="docker", docker_host="ssh://b@box")
    d = device_memory(box, EngineConfig(kind="vllm"), facts(int(62.9 * GIB)))
    assert d.total_gb == pytest.approx(67.54, abs=0.01) and not d.cpu
    cpu = DockerHostConfig(kind="docker", docker_host="unix:///var/run/docker.sock", devices=[])
    d = device_memory(cpu, EngineConfig(kind="vllm", env={"VLLM_CPU_KVCACHE_SPACE": "4"}), facts(None))
    assert d.cpu and d.total_gb is None and d.env == {"VLLM_CPU_KVCACHE_SPACE": "4"}
    # no devices passed, but a KFD GPU node (the simulator, a test host): not a CPU host
    assert not device_memory(cpu, EngineConfig(kind="vllm"), facts(GIB)).cpu


def test_weight_bytes_are_the_checkpoint_files_alone():
    listing = (
        "30543486976 /strix-model/model-00001-of-00002.safetensors\n"
        "30543486976 /strix-model/model-00002-of-00002.safetensors\n"
        "2 /strix-model/config.json\n11422654 /strix-model/tokenizer.json\n"
    )
    assert parse_sizes(listing) == 2 * 30543486976
    assert parse_sizes("2 /strix-model/config.json\n") is None  # no weights: cannot tell, never 0


@pytest.mark.parametrize(
    ("host_config", "holds"),
    [
        ({"Devices": [{"PathOnHost": "/dev/kfd", "PathInContainer": "/dev/kfd"}]}, True),
        (
            {"Devices": [{"PathOnHost": "/dev/dri/renderD128", "PathInContainer": "/dev/dri/renderD128"}]},
            True,
        ),
        ({"Devices": [{"PathOnHost": "/dev/null", "PathInContainer": "/dev/kfd"}]}, True),
        ({"Privileged": True}, True),
        ({"Devices": [{"PathOnHost": "/dev/fuse", "PathInContainer": "/dev/fuse"}]}, False),
        ({}, False),
    ],
)
def test_a_container_holds_the_gpu_when_it_has_a_gpu_device(host_config, holds):
    assert _has_gpu_device({"HostConfig": host_config}) is holds


def test_the_idle_ceiling_refuses_above_it_only():
    check_idle_ceiling(int(0.6 * GB), 1.5, None)
    check_idle_ceiling(None, 1.5, None)  # no reading: nothing to refuse on
    check_idle_ceiling(51 * GB, None, None)  # no ceiling configured
    with pytest.raises(EngineStartError) as e:
        check_idle_ceiling(51 * GB, 1.5, None)
    assert e.value.status == "failed_guard"
    assert "51.00 GB (VRAM + GTT), above the host's idle ceiling idle_ceiling_gb 1.5 GB" in e.value.reason


class _Containers:
    """docker-py's containers.list/get as gpu_holders reads them."""

    def __init__(self, running: list[SimpleNamespace]) -> None:
        self.running = running
        self.containers = self

    def list(self, filters: dict | None = None) -> list[SimpleNamespace]:
        return self.running

    def get(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(top=lambda: {"Titles": ["PID"], "Processes": [["100"]]})


def _gpu_container(name: str) -> SimpleNamespace:
    attrs = {"HostConfig": {"Devices": [{"PathOnHost": "/dev/kfd", "PathInContainer": "/dev/kfd"}]}}
    return SimpleNamespace(name=name, labels={}, attrs=attrs, image=None, id="c" * 64)


def test_holders_the_owner_allowed_by_name_do_not_refuse_the_run():
    client = _Containers([_gpu_container("llama-prod"), _gpu_container("exporter"), _gpu_container("x")])
    smi_json = (
        '{"system": {"PID100": "llama-server, 1, 100, 0, 0", "PID200": "amdgpu_top, 1, 10, 0, 0", '
        '"PID300": "ollama, 1, 10, 0, 0"}}'
    )

    def run_smi(argv: list[str]) -> tuple[int, str, str]:
        return (0, smi_json, "") if argv[0] == "rocm-smi" else (1, "", "no amd-smi")

    allowed = frozenset({"exporter", "amdgpu_top"})
    held, note = gpu_holders.foreign_holders(client, run_smi, production="llama-prod", allowed=allowed)
    assert note is None
    assert [h.name for h in held] == ["x", "ollama pid 300"]
    held, _ = gpu_holders.foreign_holders(client, run_smi, production="llama-prod")
    assert [h.name for h in held] == ["exporter", "x", "amdgpu_top pid 200", "ollama pid 300"]

"""Disk budgets on the Box simulator (dockerd behind a real sshd, every Docker call over
``ssh://``): before anything is pulled or stopped, the compile-cache volumes are held to their budget
-- the oldest no planned run needs goes; the one a planned run needs and the one a container mounts
stay -- and the disk check counts the run's pull by its manifest's bytes, naming the image and them;
the disk short, a probe image an earlier configuration used goes, the configured one stays.

Before: compile-cache volumes were never removed (one per engine image, a new one every week), the
disk check counted the largest image already on the host, whatever the run was about to pull, and an
old probe image (tens of GB for a ROCm one) stayed on the disk for good."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import need
from support.bench_docker import BUSYBOX, HOST, make_config, managed
from support.box_images import ProductionWatch, push_image
from support.box_sim import KEY_ENV
from support.infra import build_image, remove_image, start_registry

from strix_pipeline.config import StrixConfig
from strix_pipeline.hosts.cleanup import probe_images
from strix_pipeline.hosts.cleanup.cache_prune import volume_name
from strix_pipeline.registry.client import RegistryClient
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

REPO = "kyuz0/amd-strix-halo-toolboxes"
MB = 10**6


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=120)


def volume_exists(name: str) -> bool:
    return docker("volume", "inspect", name).returncode == 0


@pytest.fixture
def caches(busybox: str):
    """Three compile-cache volumes of 3 MB each, oldest first: one of an image no series needs, one a
    planned run needs, one a (stopped) container mounts."""
    names = {
        "old": volume_name("vllm", "sha256:" + "0a" * 32),
        "needed": volume_name("vllm", "sha256:" + "0b" * 32),
        "mounted": volume_name("vllm", "sha256:" + "0c" * 32),
    }
    for name in names.values():
        docker("volume", "rm", "-f", name)
        assert docker("volume", "create", name).returncode == 0
        fill = docker(
            "run",
            "--rm",
            "-v",
            f"{name}:/d",
            busybox,
            "busybox",
            "dd",
            "if=/dev/zero",
            "of=/d/f",
            "bs=1000000",
            "count=3",
        )
        assert fill.returncode == 0, fill.stderr
        time.sleep(1.1)  # Docker's CreatedAt is in seconds: the order is the test's
    holder = docker(
        "create", "--name", "strix-test-cache-holder", "-v", f"{names['mounted']}:/d", busybox, "true"
    )
    assert holder.returncode == 0, holder.stderr
    yield names
    docker("rm", "-f", "strix-test-cache-holder")
    for name in names.values():
        docker("volume", "rm", "-f", name)


@pytest.fixture
def old_probe(docker_engine: None):
    """A probe image an earlier configuration of the host used (on the disk, no longer configured)."""
    tag = "strix-test/old-efficiency-probe:1"
    build_image(tag, {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX})
    yield tag
    remove_image(tag)


@pytest.fixture
def next_image(registry_binary: str, docker_engine: None, tmp_path: Path):
    """The run's image, in a loopback registry and not on the host: about 2 MB of compressed layers to
    pull."""
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    reg = start_registry(tmp_path)
    pushed = push_image(
        reg, REPO, "rocm-next", {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX, "/blob": b"\x01" * (3 * MB)}
    )
    yield pushed
    pushed.remove()
    remove_image(f"{reg.host}/{REPO}@{pushed.digest}")
    reg.stop()


def test_caches_are_held_to_their_budget_and_the_pull_is_counted_by_its_manifest(
    model_path, box_sshd, box_key, busybox, production, caches, next_image, old_probe, tmp_path
):
    with RegistryClient(next_image.registry.host, insecure=True) as reg:
        pull_bytes = reg.image_size(REPO, next_image.digest).total_bytes
    assert pull_bytes > MB  # compressed layers: busybox and the blob
    data = make_config(tmp_path, next_image, model_path).model_dump()
    data["hosts"][HOST].update(
        {
            "docker_host": box_sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(box_sshd.known_hosts),
            "probe_image": busybox,
            "min_free_disk_gb": 10**6,  # the disk is short whatever is pruned: refused before the pull
            "compile_cache_budget_gb": 0.005,  # 5 MB: of 9 MB of caches, the old one's 3 MB must go
            "production": {"container": production[0], "health_url": production[1], "health_timeout_s": 30},
        }
    )
    data["engines"]["llamacpp"]["images"] = [
        {"registry": next_image.registry.host, "repository": REPO, "insecure": True}
    ]
    config = StrixConfig.model_validate(data)
    state = config.artifacts_dir() / "state"
    earlier = config.hosts[HOST].model_copy(update={"efficiency_probe_image": old_probe})
    probe_images.remember(state, HOST, earlier)  # what an earlier configuration's runs pulled
    needed_digest = "sha256:" + "0b" * 32
    lines: list[str] = []
    with ProductionWatch(production[0]) as watch:
        result = run_benchmark(
            config,
            BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", next_image.record()),
            run_id="disk-short",
            log=lines.append,
            force=True,
            scenarios=["smoke"],
            keep_images=frozenset({needed_digest}),
        )
    # the caches: the oldest no planned run needs went; the needed and the mounted one stay, said so
    assert not volume_exists(caches["old"])
    assert volume_exists(caches["needed"]) and volume_exists(caches["mounted"])
    said = next((ln for ln in lines if "compile caches" in ln), "")
    # (another test's leftover cache may go too: no planned run of this configuration needs it)
    assert "no planned run needs" in said and caches["old"] in said, lines
    assert caches["needed"] not in said.split("over budget")[0], said
    # the disk: refused naming the image it would pull and its manifest's bytes, nothing pulled or stopped
    r = result.run
    ref = f"{next_image.registry.host}/{REPO}@{next_image.digest}"
    assert r.status == "failed_guard", (r.status, r.failure_reason)
    assert f"pulls {ref} {pull_bytes:,} bytes" in (r.failure_reason or ""), r.failure_reason
    assert docker("image", "inspect", ref).returncode != 0
    # the disk short: the probe image no longer configured went, the configured one (busybox) stayed
    assert any(
        f"pruned probe image(s) the configuration no longer names: {old_probe}" in ln for ln in lines
    ), lines
    assert docker("image", "inspect", old_probe).returncode != 0
    assert docker("image", "inspect", busybox).returncode == 0
    assert watch.states == ["running"] and managed("disk-short") == []

"""Images no series needs are pruned from a Box short of disk, on the Box simulator (dockerd behind a
real sshd, every Docker call over ``ssh://``): an old digest of a tracked image goes; the digest a
series still needs, an image a container uses and production's image stay; production keeps serving
throughout, and a disk still short after the prune refuses the run before anything is pulled."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import need
from support.bench_docker import BUSYBOX, HOST, make_config, managed
from support.box_images import ProductionWatch, push_image
from support.box_sim import KEY_ENV  # the env var the simulator's box_key sets
from support.infra import remove_image, start_registry

from strix_pipeline.config import StrixConfig
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

REPO = "kyuz0/amd-strix-halo-toolboxes"


def present(ref: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False).returncode == 0
    )


@pytest.fixture
def versions(registry_binary: str, docker_engine: None, tmp_path: Path):
    """Four digests of one tracked repository: old and needed pulled, one used by a stopped container,
    and the next one (the run's, not pulled yet)."""
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    reg = start_registry(tmp_path)
    pushed = {
        tag: push_image(reg, REPO, tag, {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX, "/etc/v": tag.encode()})
        for tag in ("rocm-old", "rocm-needed", "rocm-used", "rocm-next")
    }
    refs = {tag: f"{reg.host}/{REPO}@{p.digest}" for tag, p in pushed.items()}
    for tag in ("rocm-old", "rocm-needed", "rocm-used"):
        subprocess.run(["docker", "pull", refs[tag]], capture_output=True, check=True, timeout=120)
    holder = subprocess.run(
        ["docker", "create", "--name", "strix-test-prune-holder", refs["rocm-used"], "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    yield pushed, refs
    subprocess.run(["docker", "rm", "-f", holder], capture_output=True, check=False)
    for p in pushed.values():
        p.remove()
    for ref in refs.values():
        remove_image(ref)
    reg.stop()


def test_a_short_disk_prunes_what_no_series_needs_and_keeps_production_serving(
    model_path, box_sshd, box_key, busybox, production, versions, tmp_path
):
    pushed, refs = versions
    data = make_config(tmp_path, pushed["rocm-next"], model_path).model_dump()
    data["hosts"][HOST].update(
        {
            "docker_host": box_sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(box_sshd.known_hosts),
            "probe_image": busybox,
            "min_free_disk_gb": 10**6,  # no prune frees that much: still refused
            "production": {"container": production[0], "health_url": production[1], "health_timeout_s": 30},
        }
    )
    source = {"registry": pushed["rocm-next"].registry.host, "repository": REPO, "insecure": True}
    data["engines"]["llamacpp"]["images"] = [source]
    config = StrixConfig.model_validate(data)
    lines: list[str] = []
    with ProductionWatch(production[0]) as watch:
        result = run_benchmark(
            config,
            BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", pushed["rocm-next"].record()),
            run_id="prune-short",
            log=lines.append,
            force=True,
            scenarios=["smoke"],
            keep_images=frozenset({pushed["rocm-needed"].digest}),
        )
    r = result.run
    assert r.status == "failed_guard" and "disk for images: " in (r.failure_reason or ""), r.failure_reason
    assert any(
        "pruned 1 image(s) no series needs" in ln and pushed["rocm-old"].digest in ln for ln in lines
    ), lines
    assert not present(refs["rocm-old"])
    assert present(refs["rocm-needed"]) and present(refs["rocm-used"]) and present(busybox)
    assert not present(refs["rocm-next"])  # nothing was pulled
    assert watch.states == ["running"] and managed("prune-short") == []

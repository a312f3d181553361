"""Probe images an earlier configuration used are remembered and removed when the disk is short,
never a configured one (hosts/cleanup/probe_images.py), over a docker-py stand-in; on the Box simulator:
tests/integration/docker/test_box_disk.py."""

from __future__ import annotations

import docker.errors

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.hosts.cleanup import probe_images


class Images:
    def __init__(self, present: set[str], in_use: set[str] = frozenset()) -> None:
        self.present, self.in_use, self.removed = set(present), set(in_use), []

    def remove(self, ref: str, force: bool = False) -> None:
        assert force is False  # Docker's own removal: a layer another image shares stays
        if ref not in self.present:
            raise docker.errors.ImageNotFound(ref)
        if ref in self.in_use:
            raise docker.errors.APIError(f"conflict: unable to remove {ref}: image is being used")
        self.present.discard(ref)
        self.removed.append(ref)


class Client:
    def __init__(self, images: Images) -> None:
        self.images = images


def host(**probes: str) -> DockerHostConfig:
    return DockerHostConfig(kind="docker", docker_host="ssh://u@box", **probes)


def test_the_probe_images_a_configuration_stopped_naming_go_and_the_configured_stay(tmp_path):
    before = host(
        probe_image="busybox:1", rocm_probe_image="rocm/dev:7.1", efficiency_probe_image="rocm/pt:a"
    )
    probe_images.remember(tmp_path, "box", before)
    now = host(probe_image="busybox:1", rocm_probe_image="rocm/dev:7.2", efficiency_probe_image="rocm/pt:b")
    probe_images.remember(tmp_path, "box", now)
    images = Images(
        {"busybox:1", "rocm/dev:7.1", "rocm/dev:7.2", "rocm/pt:a", "rocm/pt:b"}, in_use={"rocm/pt:a"}
    )
    gone = probe_images.prune_unused(Client(images), tmp_path, "box", now)
    assert gone == ["rocm/dev:7.1"] and images.removed == gone
    assert {"busybox:1", "rocm/dev:7.2", "rocm/pt:b", "rocm/pt:a"} <= images.present
    # the one in use stays remembered for a later prune; the removed one is forgotten
    assert probe_images.recorded(tmp_path, "box") == {"busybox:1", "rocm/dev:7.2", "rocm/pt:a", "rocm/pt:b"}
    images.in_use.clear()
    assert probe_images.prune_unused(Client(images), tmp_path, "box", now) == ["rocm/pt:a"]


def test_nothing_recorded_or_an_unreadable_record_removes_nothing(tmp_path):
    images = Images({"busybox:1"})
    assert probe_images.prune_unused(Client(images), tmp_path, "box", host(probe_image="busybox:1")) == []
    (tmp_path / "probe-images-box.json").write_text("{not json")
    assert probe_images.prune_unused(Client(images), tmp_path, "box", host()) == [] and images.removed == []

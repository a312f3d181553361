"""Image sizes from manifests against a real docker-registry on loopback: a plain
manifest and an index (its linux/amd64 entry), and the disk check that refuses a pull the free space
cannot hold, naming the image and its bytes."""

from __future__ import annotations

import hashlib
import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from support.infra import Registry, get_manifest, make_index, put_manifest, start_registry

from strix_pipeline.hosts.box.stop_checks import disk_budget
from strix_pipeline.hosts.cleanup.disk_budget import Pull, pull_sizes
from strix_pipeline.registry.client import OCI_INDEX, OCI_MANIFEST, RegistryClient

pytestmark = [pytest.mark.registry]

REPO = "strix/sized"


@dataclass
class Sized:
    reg: Registry
    amd_ref: str  # host/repo:amd
    index_ref: str  # host/repo:index -> arm (small), amd (large)


def manifest_bytes(reg: Registry, reference: str) -> int:
    """The sizes the registry's own manifest states, read here without the client under test."""
    body, _, _ = get_manifest(reg.url, REPO, reference)
    m = json.loads(body)
    return m["config"]["size"] + sum(layer["size"] for layer in m["layers"])


def upload_blob(reg: Registry, data: bytes) -> dict[str, object]:
    """The distribution API's monolithic upload (POST, then PUT with the digest); its descriptor."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = urllib.request.Request(f"{reg.url}/v2/{REPO}/blobs/uploads/", data=b"", method="POST")
    with urllib.request.urlopen(start, timeout=30) as r:
        location = r.headers["Location"]
    url = location if location.startswith("http") else reg.url + location
    put = urllib.request.Request(
        f"{url}{'&' if '?' in url else '?'}digest={digest}",
        data=data,
        method="PUT",
        headers={"Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(put, timeout=30) as r:
        assert r.status == 201
    return {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": len(data)}


def push_image(reg: Registry, tag: str, layers: list[bytes]) -> None:
    config = upload_blob(reg, json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {}}).encode())
    config["mediaType"] = "application/vnd.oci.image.config.v1+json"
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config,
        "layers": [upload_blob(reg, layer) for layer in layers],
    }
    put_manifest(reg.url, REPO, tag, json.dumps(manifest).encode(), OCI_MANIFEST)


@pytest.fixture(scope="module")
def sized(registry_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sized]:
    reg = start_registry(tmp_path_factory.mktemp("sized"))
    try:
        # the amd image: two layers, 600 kB and 250 kB; the arm one a single small layer
        push_image(reg, "amd", [os.urandom(600_000), os.urandom(250_000)])
        push_image(reg, "arm", [os.urandom(1_000)])
        index = make_index(reg.url, REPO, [("arm", "linux", "arm64"), ("amd", "linux", "amd64")])
        put_manifest(reg.url, REPO, "index", index, OCI_INDEX)
        yield Sized(reg, f"{reg.host}/{REPO}:amd", f"{reg.host}/{REPO}:index")
    finally:
        reg.stop()


def client_for(registry: str) -> RegistryClient:
    return RegistryClient(registry, insecure=True)


def test_a_manifests_size_is_its_layers_and_config(sized: Sized) -> None:
    with client_for(sized.reg.host) as c:
        size = c.image_size(REPO, "amd")
    assert size.total_bytes == manifest_bytes(sized.reg, "amd")
    assert size.layer_bytes == (600_000, 250_000) and size.config_bytes > 0


def test_an_index_is_sized_by_its_linux_amd64_manifest(sized: Sized) -> None:
    with client_for(sized.reg.host) as c:
        size = c.image_size(REPO, "index")
        plain = c.image_size(REPO, "amd")
    assert size.manifest_digest == plain.manifest_digest != size.digest
    assert size.total_bytes == manifest_bytes(sized.reg, "amd")
    assert size.total_bytes > manifest_bytes(sized.reg, "arm")  # not the index's first entry


def test_the_disk_check_refuses_naming_the_image_and_its_bytes(sized: Sized) -> None:
    pulls = pull_sizes([sized.index_ref, sized.amd_ref], client_for)
    assert len(pulls) == 2 and pulls[0].bytes == pulls[1].bytes == manifest_bytes(sized.reg, "amd")
    need = sum(p.bytes for p in pulls) + 1_000 + 5_000
    short = disk_budget(need - 1, pulls, cache_bytes=1_000, min_free_bytes=5_000)
    assert not short.ok and short.checked
    assert sized.index_ref in short.detail and f"{pulls[0].bytes:,} bytes" in short.detail
    assert "short by 1 bytes" in short.detail
    enough = disk_budget(need, pulls, cache_bytes=1_000, min_free_bytes=5_000)
    assert enough.ok
    # the caches count: the same free space without room for them refuses
    assert not disk_budget(need, pulls, cache_bytes=1_001, min_free_bytes=5_000).ok
    assert disk_budget(10**12, [Pull("x", 1)], cache_bytes=0, min_free_bytes=0).ok

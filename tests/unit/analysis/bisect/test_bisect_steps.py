"""Which releases a bisection searches (analysis/bisect/releases.releases_between): registry tags on a Box as
well as the package index's releases on host `local`."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from strix_pipeline.analysis.bisect.releases import releases_between, tag_family
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.versions import version_sort_key

AT = datetime(2026, 11, 1, tzinfo=UTC)


def image(
    tag: str, *, floating: bool = False, gone: bool = False, repo: str = "ggml-org/llama.cpp"
) -> ImageRecord:
    return ImageRecord(
        engine="llamacpp",
        registry="ghcr.io",
        repository=repo,
        tag=tag,
        digest="sha256:" + hashlib.sha256(f"{repo}:{tag}".encode()).hexdigest(),
        floating=floating,
        created=AT,
        version=None if floating else tag,
        revision=None,
        labels=None,
        sort_key=version_sort_key(tag, AT),
        first_seen=AT,
        last_seen=AT,
        gone=gone,
    )


def test_the_box_tags_between_two_rocm_builds_in_build_number_order() -> None:
    tags = [
        "server-rocm-b6500",
        "server-rocm-b6512",
        "server-rocm-b6499",
        "server-rocm-b6600",
        "server-rocm-b6530",
        "server-vulkan-b6520",
        "server-rocm",
        "server-rocm-b6550",
    ]
    images = [image(t, floating=t == "server-rocm") for t in tags]
    images.append(image("server-rocm-b6540", gone=True))
    images.append(image("server-rocm-b6545", repo="someone/llama.cpp"))
    by = {i.tag: i for i in images}
    got = releases_between(images, by["server-rocm-b6500"], by["server-rocm-b6600"], {"server-rocm-b6530"})
    # ROCm builds only (not Vulkan's, not the floating tag, not a gone one, not another repository),
    # in build-number order, the one already in the series left out
    assert [c.version for c in got] == ["server-rocm-b6512", "server-rocm-b6550"]
    assert all(c.key.startswith("llamacpp:server-rocm-b65") for c in got)


def test_a_tag_family_is_the_tag_without_its_version() -> None:
    assert tag_family("server-rocm-b6500") == "server-rocm-b"
    assert tag_family("b11434") == tag_family("b9093") == "b"
    assert tag_family("v0.11.0") == tag_family("v0.9.2") == "v"
    assert tag_family("server-vulkan-b1") != tag_family("server-rocm-b1")

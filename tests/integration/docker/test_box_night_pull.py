"""Every image of a night pulled before production's stop, from a real loopback registry into the real
dockerd: the image a night's second run needs is on the host before anything stops, sized against the
free disk first; an image the registry does not have is named with why, so the night defers that run
and production is never down for it. Before: each run pulled its own image, a night's later runs with
production already down."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import need
from support.bench_docker import BUSYBOX, HOST, make_config
from support.box_images import push_image
from support.infra import remove_image, start_registry

from strix_pipeline.hosts.box.stop_checks import image_present
from strix_pipeline.planning.week import run_name
from strix_pipeline.runner import BenchmarkTarget
from strix_pipeline.runner.night_pull import pull_before_stop

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.timeout(300)]

REPO = "kyuz0/amd-strix-halo-toolboxes"
MISSING = "sha256:" + "ab" * 32  # a digest the registry never stored


@pytest.fixture
def pushed(registry_binary: str, docker_engine: None, tmp_path: Path):
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    reg = start_registry(tmp_path)
    image = push_image(reg, REPO, "rocm-night", {"/bin/busybox": BUSYBOX, "/blob": b"\x02" * 2_000_000})
    yield image
    image.remove()
    remove_image(f"{reg.host}/{REPO}@{image.digest}")
    reg.stop()


def test_a_nights_images_are_pulled_first_and_a_missing_one_is_named(pushed, busybox, client, tmp_path):
    config = make_config(tmp_path, pushed, tmp_path / "model.gguf")
    host = config.hosts[HOST].model_copy(update={"probe_image": busybox})
    config = config.model_copy(update={"hosts": {HOST: host}})
    ref = f"{pushed.registry.host}/{REPO}@{pushed.digest}"
    remove_image(ref)
    assert not image_present(client, ref)
    good = BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", pushed.record())
    gone = replace(pushed.record("badflag"), digest=MISSING, tag="rocm-gone")
    missing = BenchmarkTarget(good.host, "badflag", good.model, good.profile, gone)
    lines: list[str] = []
    failed = pull_before_stop(config, HOST, [missing, good], lines.append)
    assert image_present(client, ref), lines  # the second run's image is on the host before any stop
    assert list(failed) == [run_name(missing)], failed
    why = failed[run_name(missing)]
    assert why.startswith("its image was not pulled before production stopped ("), why
    assert any(f"pulling {ref} before production stops" in ln and "free" in ln for ln in lines), lines
    assert any("deferred, production is not stopped for it" in ln for ln in lines), lines
    # pulled already: a second night's pass has nothing to do
    lines.clear()
    assert pull_before_stop(config, HOST, [good], lines.append) == {} and lines == []

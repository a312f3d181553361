"""Discovery end to end: a real docker-registry on loopback (behind a Link-paging front), images pushed
with docker, the real DuckDB warehouse, and the `strix images` commands."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.infra import (
    Registry,
    build_image,
    delete_manifest,
    make_index,
    push,
    put_manifest,
    remove_image,
    start_registry,
    tag_many,
)
from support.registry_fronts import Fault, Front

from strix_pipeline.cli import images as cli_images
from strix_pipeline.config import ImageSource, StrixConfig
from strix_pipeline.registry.client import OCI_INDEX, RegistryClient
from strix_pipeline.registry.discovery import refresh_images
from strix_pipeline.registry.transport import RetryPolicy
from strix_pipeline.warehouse import Warehouse

pytestmark = [pytest.mark.registry, pytest.mark.docker]

REPO = "ggml-org/llama.cpp"
T0 = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)


@dataclass
class Env:
    reg: Registry
    front: Front
    pushed: list[str]
    tmp: Path

    def image(self, tag: str, content: bytes, version: str) -> str:
        ref = f"{self.reg.host}/{REPO}:{tag}"
        build_image(ref, {"/etc/build": content}, labels={"org.opencontainers.image.version": version})
        self.pushed.append(ref)
        return push(ref)


@pytest.fixture(scope="module")
def env(registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("discovery")
    reg = start_registry(tmp)
    front = Front(reg.url, page_size=2).start()  # ghcr.io-style paging, two tags a page
    e = Env(reg, front, [], tmp)
    try:
        yield e
    finally:
        front.stop()
        for ref in e.pushed:
            remove_image(ref)
        reg.stop()


def config_for(host: str) -> StrixConfig:
    source = {
        "registry": host,
        "repository": REPO,
        "include": [r"^server-rocm-b\d+$"],
        "floating": ["server-rocm"],
        "insecure": True,
    }
    return StrixConfig.model_validate(
        {
            "hosts": {"strix-halo": {"kind": "local"}},
            "engines": {"llamacpp": {"kind": "llamacpp", "images": [source]}, "vllm": {"kind": "vllm"}},
            "models": {"m": {"model": "M", "family": "m", "quantization": "Q4_K_M", "source": "pypi:x"}},
            "profiles": {"quick": {}},
        }
    )


def fast_client(source: ImageSource) -> RegistryClient:
    return RegistryClient(
        source.registry, insecure=True, policy=RetryPolicy(attempts=3, backoff_s=0.01, backoff_max_s=0.05)
    )


def test_discovery_against_a_real_registry_and_warehouse(env: Env, tmp_path: Path) -> None:
    b100 = env.image("server-rocm-b100", b"100", "b100")
    b101 = env.image("server-rocm-b101", b"101", "b101")
    tag_many(env.reg.url, REPO, "server-rocm-b101", ["server-rocm", "server-vulkan-b101"])
    cfg = config_for(env.front.host)

    with Warehouse.open(tmp_path / "wh.duckdb") as wh:

        def refresh(day: int):
            return refresh_images(cfg, wh, client_factory=fast_client, now=T0 + timedelta(days=day))

        r = refresh(0)
        assert sorted(i.tag for i in r.new) == ["server-rocm", "server-rocm-b100", "server-rocm-b101"]
        assert not r.errors and not r.moved and not r.gone
        assert len(env.front.requests_to(r"/tags/list$")) == 2  # 4 tags, 2 a page: followed the Link
        rows = {i.tag: i for i in wh.known_images("llamacpp")}
        assert rows["server-rocm-b100"].digest == b100 and rows["server-rocm"].digest == b101
        assert rows["server-rocm-b100"].version == "b100" and rows["server-rocm"].floating
        assert rows["server-rocm-b100"].created is not None
        assert rows["server-rocm-b100"].sort_key < rows["server-rocm-b101"].sort_key

        r = refresh(1)
        assert not r.changed and r.unchanged == 3

        # the floating tag rebuilt: a new digest is a new version, reported once
        moved_to = env.image("server-rocm", b"102-nightly", "b102")
        r = refresh(2)
        assert [(i.tag, i.digest, i.version) for i in r.moved] == [("server-rocm", moved_to, "b102")]
        assert not r.new and not r.gone
        assert not refresh(3).changed
        assert {i.tag: i.digest for i in wh.known_images()}["server-rocm"] == moved_to

        # a tag deleted in the registry: marked gone, the row is kept
        delete_manifest(env.reg.url, REPO, b100)
        r = refresh(4)
        assert [i.tag for i in r.gone] == ["server-rocm-b100"]
        kept = {i.tag: i for i in wh.known_images()}["server-rocm-b100"]
        assert kept.gone and kept.gone_since == T0 + timedelta(days=4) and kept.digest == b100
        assert not refresh(5).gone

        # an index without linux/amd64: skipped with a reason, not stored
        put_manifest(
            env.reg.url,
            REPO,
            "server-rocm-b103",
            make_index(env.reg.url, REPO, [("server-rocm-b101", "linux", "arm64")]),
            OCI_INDEX,
        )
        r = refresh(6)
        assert [(s.tag, "linux/arm64" in s.reason) for s in r.skipped] == [("server-rocm-b103", True)]
        assert "server-rocm-b103" not in {i.tag for i in wh.known_images()} and not r.errors

        # faults: known images stay as they were, the error is recorded with registry and repository
        before = wh.known_images()
        for fault, times in (
            (Fault(503), 10),
            (Fault(200, {"Content-Type": "application/json"}, b'{"name": "x", "tags": [1, 2'), 1),
        ):
            env.front.add_fault(r"/tags/list$", fault, times=times)
            r = refresh(7)
            assert len(r.errors) == 1 and r.errors[0].repository == REPO and not r.changed
            assert wh.known_images() == before
            env.front.faults.clear()
        errors = wh.query_df(
            "SELECT registry, repository, error FROM registry_errors ORDER BY occurred_at"
        ).rows()
        assert len(errors) == 2 and all(e[:2] == (env.front.host, REPO) for e in errors)
        assert "503" in errors[0][2] and "not JSON" in errors[1][2]


def test_429_then_success_during_a_refresh(env: Env, tmp_path: Path) -> None:
    env.image("server-rocm-b200", b"200", "b200")
    env.front.add_fault(r"/tags/list$", Fault(429, {"Retry-After": "1"}))
    with Warehouse.open(tmp_path / "wh.duckdb") as wh:
        r = refresh_images(config_for(env.front.host), wh, client_factory=fast_client, now=T0)
        assert not r.errors and "server-rocm-b200" in {i.tag for i in r.new}


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    cli_images.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_refresh_json_and_list(env: Env, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env.image("server-rocm-b300", b"300", "b300")
    toml = tmp_path / "strix.toml"
    toml.write_text(
        f"""
[project]
warehouse = "{tmp_path / "wh.duckdb"}"

[hosts.strix-halo]
kind = "local"

[engines.llamacpp]
kind = "llamacpp"
[[engines.llamacpp.images]]
registry = "{env.reg.host}"
repository = "{REPO}"
include = ['^server-rocm-b3\\d\\d$']
insecure = true

[engines.vllm]
kind = "vllm"
[[engines.vllm.images]]
registry = "127.0.0.1:1"
repository = "vllm/vllm-openai-rocm"
insecure = true

[models.m]
model = "M"
family = "m"
quantization = "Q4_K_M"
source = "pypi:x"

[profiles.quick]
"""
    )
    rc = _cli(["--config", str(toml), "images", "refresh", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1  # the vllm registry on port 1 cannot be reached
    assert [i["tag"] for i in out["new"]] == ["server-rocm-b300"]
    assert [e["engine"] for e in out["errors"]] == ["vllm"]

    assert _cli(["--config", str(toml), "images", "refresh", "--engine", "llamacpp"]) == 0
    assert "0 new" in capsys.readouterr().out
    assert _cli(["--config", str(toml), "images", "refresh", "--engine", "nope"]) == 2

    assert _cli(["--config", str(toml), "images", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(i["engine"], i["tag"], i["version"]) for i in listed] == [
        ("llamacpp", "server-rocm-b300", "b300")
    ]
    assert _cli(["--config", str(toml), "images", "list"]) == 0
    assert "server-rocm-b300" in capsys.readouterr().out


def test_index_and_credentials_from_the_environment(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Basic auth with credentials named by username_env/password_env, through the default client;
    an index's linux/amd64 image is what gets stored."""
    env.image("server-rocm-b400", b"400", "b400")
    index = make_index(
        env.reg.url, REPO, [("server-rocm-b400", "linux", "arm64"), ("server-rocm-b400", "linux", "amd64")]
    )
    index_digest = put_manifest(env.reg.url, REPO, "server-rocm-b401", index, OCI_INDEX)
    with start_registry(env.tmp, htpasswd={"ci": "hunter2"}, storage=env.reg.storage) as secured:
        source = {
            "registry": secured.host,
            "repository": REPO,
            "include": [r"^server-rocm-b40\d$"],
            "insecure": True,
            "username_env": "STRIX_TEST_REG_USER",
            "password_env": "STRIX_TEST_REG_PASSWORD",
        }
        cfg = config_for(secured.host).model_copy(
            update={
                "engines": {
                    "llamacpp": config_for(secured.host)
                    .engines["llamacpp"]
                    .model_copy(update={"images": [ImageSource(**source)]})
                }
            }
        )
        with Warehouse.open(tmp_path / "wh.duckdb") as wh:
            r = refresh_images(cfg, wh, engines=["llamacpp"], now=T0)
            assert len(r.errors) == 1 and "basic auth" in r.errors[0].message and not r.new
            monkeypatch.setenv("STRIX_TEST_REG_USER", "ci")
            monkeypatch.setenv("STRIX_TEST_REG_PASSWORD", "hunter2")
            r = refresh_images(cfg, wh, engines=["llamacpp"], now=T0)
            assert not r.errors
            new = {i.tag: i for i in r.new}
            assert sorted(new) == ["server-rocm-b400", "server-rocm-b401"]
            assert (
                new["server-rocm-b401"].digest == index_digest and new["server-rocm-b401"].version == "b400"
            )

"""The checkpoint's config.json read as the engine's container sees it: a created, never started container
of the engine's image with the engine's model mounts, read through Docker's archive API (a fake client
here: the calls and the tar it answers, as docker-py gives them)."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass, field
from typing import Any

import docker.errors
import pytest

from strix_pipeline.hosts.docker import model_config
from strix_pipeline.hosts.guards import MANAGED_LABEL, RUN_LABEL
from strix_pipeline.memory.bytes_per_token import ModelFileError
from strix_pipeline.memory.kv_capacity import layout_from_config_json

IMAGE = "vllm/vllm-openai-rocm@sha256:" + "ab" * 32
MOUNTS = {"/srv/models": {"bind": "/models", "mode": "ro"}}
CONFIG = {"num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "num_attention_heads": 32}
SNAPSHOT = "/models/hub/models--Qwen--Qwen3-30B-A3B/snapshots/abc"
BLOB = "/models/hub/models--Qwen--Qwen3-30B-A3B/blobs/0123"
DIR_MODE, LINK_MODE = 1 << 31 | 0o755, 1 << 27 | 0o777  # Go's os.FileMode bits, as Docker stats them


@dataclass(frozen=True)
class Link:
    target: str  # as Docker resolves it in the container's root


def tar_of(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass
class FakeContainer:
    files: dict[str, bytes | Link | None]  # None: a directory
    id: str = "c0ffee" * 4
    asked: list[str] = field(default_factory=list)
    removed: bool = False

    def get_archive(self, path: str) -> tuple[Any, dict]:
        self.asked.append(path)
        if path not in self.files:
            raise docker.errors.NotFound(f"Could not find the file {path} in container {self.id}")
        entry = self.files[path]
        name = path.rsplit("/", 1)[-1]
        if isinstance(entry, Link):
            return iter([tar_of(name, b"")]), {
                "name": name,
                "size": 22,
                "mode": LINK_MODE,
                "linkTarget": entry.target,
            }
        if entry is None:
            return iter([b""]), {"name": name, "size": 4096, "mode": DIR_MODE, "linkTarget": ""}
        data = tar_of(name, entry)
        return iter([data[:100], data[100:]]), {
            "name": name,
            "size": len(entry),
            "mode": 0o644,
            "linkTarget": "",
        }

    def remove(self, force: bool = False) -> None:
        self.removed = force


@dataclass
class FakeClient:
    container: FakeContainer
    created: list[tuple[str, dict]] = field(default_factory=list)
    refuse: Exception | None = None

    @property
    def containers(self) -> FakeClient:
        return self

    def create(self, image: str, **kwargs: Any) -> FakeContainer:
        if self.refuse is not None:
            raise self.refuse
        self.created.append((image, kwargs))
        return self.container


def read(client: FakeClient, model_dir: str = "/models/q") -> model_config.ModelConfig:
    return model_config.in_image(client, IMAGE, MOUNTS, run_id="run-1")(model_dir)


def test_reads_the_config_through_the_engines_mounts_in_a_container_that_never_runs() -> None:
    client = FakeClient(FakeContainer({"/models/q/config.json": json.dumps(CONFIG).encode()}))
    found = read(client)
    assert found.data == CONFIG and found.source == f"/models/q/config.json in {IMAGE}"
    ((image, kw),) = client.created
    assert image == IMAGE and kw["volumes"] == MOUNTS and kw["network_disabled"] is True
    assert kw["labels"] == {MANAGED_LABEL: "true", RUN_LABEL: "run-1", "strix.check": "file"}
    assert "devices" not in kw and client.container.removed  # created, read, removed: never started
    assert (
        layout_from_config_json(found.data, found.source).bytes_per_token_all_layers == 48 * 4 * 128 * 2 * 2
    )


def test_a_hugging_face_cache_snapshot_link_is_followed_to_its_blob() -> None:
    files = {f"{SNAPSHOT}/config.json": Link(BLOB), BLOB: json.dumps(CONFIG).encode()}
    client = FakeClient(FakeContainer(files))
    assert read(client, SNAPSHOT).data == CONFIG
    assert client.container.asked == [f"{SNAPSHOT}/config.json", BLOB]


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({}, "/models/q/config.json in " + IMAGE + ": no such file in the container"),
        ({"/models/q/config.json": None}, "a directory, not a file"),
        ({"/models/q/config.json": b"{not json"}, "/models/q/config.json in " + IMAGE + ": does not parse"),
        ({"/models/q/config.json": b"[1, 2]"}, "is list, not a JSON object"),
        ({"/models/q/config.json": Link("/models/q/config.json")}, "more than 8 links"),
    ],
)
def test_what_gives_no_config_is_a_reason_naming_the_file(files: dict, said: str) -> None:
    client = FakeClient(FakeContainer(files))
    with pytest.raises(ModelFileError) as e:
        read(client)
    assert said in str(e.value) and client.container.removed


def test_a_docker_error_is_a_reason_not_a_crash() -> None:
    refused = docker.errors.ImageNotFound("No such image", explanation="No such image: vllm/vllm-openai-rocm")
    client = FakeClient(FakeContainer({}), refuse=refused)
    with pytest.raises(ModelFileError) as e:
        read(client)
    assert "not read (ImageNotFound: No such image: vllm/vllm-openai-rocm)" in str(e.value)

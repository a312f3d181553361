"""Production as deployed gives the baseline: a llama-server container's inspect, a Vulkan image and a
systemd unit's ExecStart each become the same image, flags and model file, only the listen address
changed and listed."""

from __future__ import annotations

from typing import Any

import pytest

from strix_pipeline.config import StrixConfig
from strix_pipeline.config_load import load_config
from strix_pipeline.fingerprint import backend_family
from strix_pipeline.hosts.box.production_read import read_container
from strix_pipeline.planning.production_baseline import (
    Mount,
    ProductionRead,
    ProductionReadError,
    derive_baseline,
    parse_systemctl_show,
)
from strix_pipeline.planning.production_target import baseline_choice, production_target

ROCM_DIGEST = "ghcr.io/ggml-org/llama.cpp@sha256:" + "a" * 64
VULKAN_DIGEST = "ghcr.io/ggml-org/llama.cpp@sha256:" + "b" * 64
FLAGS = [
    "-m", "/models/qwen3-30b-a3b-Q4_K_M.gguf", "--alias", "qwen3", "-c", "65536", "-np", "4",
    "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-ngl", "999", "-b", "2048", "-ub", "512", "--no-mmap",
    "--metrics", "--host", "0.0.0.0", "--port", "8080",
]  # fmt: skip


class FakeApi:
    """docker-py's low-level API as far as the reader asks it: inspect of a container and its image."""

    def __init__(self, container: dict[str, Any], image: dict[str, Any]) -> None:
        self.container, self.image = container, image

    def inspect_container(self, name: str) -> dict[str, Any]:
        assert name == "llama-prod"
        return self.container

    def inspect_image(self, ref: str) -> dict[str, Any]:
        assert ref == self.container["Image"]
        return self.image


class FakeClient:
    def __init__(self, api: FakeApi) -> None:
        self.api = api


def inspect_of(image: str, digest: str, cmd: list[str], devices: list[str], env: list[str]) -> FakeClient:
    """A container's and its image's ``docker inspect`` as the daemon gives them (the fields read)."""
    image_env = ["PATH=/usr/local/sbin:/usr/bin", "LLAMA_ARG_HOST=0.0.0.0"]
    container = {
        "Image": "sha256:" + "c" * 64,
        "Config": {"Image": image, "Entrypoint": ["/app/llama-server"], "Cmd": cmd, "Env": image_env + env},
        "HostConfig": {"Devices": [{"PathOnHost": d, "PathInContainer": d} for d in devices]},
        "Mounts": [
            {"Type": "bind", "Source": "/srv/models", "Destination": "/models"},
            {"Type": "bind", "Source": "/srv/cache", "Destination": "/root/.cache"},
        ],
    }
    img = {"RepoDigests": ["other.io/x@sha256:" + "d" * 64, digest], "Config": {"Env": image_env}}
    return FakeClient(FakeApi(container, img))


def test_a_llama_server_container_gives_its_image_flags_and_file() -> None:
    client = inspect_of(
        "ghcr.io/ggml-org/llama.cpp:server-rocm",
        ROCM_DIGEST,
        FLAGS,
        ["/dev/kfd", "/dev/dri"],
        ["HSA_OVERRIDE_GFX_VERSION=11.5.1"],
    )
    read = read_container(client, "llama-prod")
    base = derive_baseline(read)
    assert read.env == ("HSA_OVERRIDE_GFX_VERSION=11.5.1",)  # the image's own ENV is not production's
    assert base.image_ref == ROCM_DIGEST  # the digest of the reference production runs
    assert base.executable == ("/app/llama-server",)
    assert base.model_on_host == "/srv/models/qwen3-30b-a3b-Q4_K_M.gguf"
    assert base.backend == "rocm"
    assert dict(base.settings) == {
        "context": "65536",
        "slots": "4",
        "cache type K": "q8_0",
        "cache type V": "q8_0",
        "flash attention": "on",
        "GPU layers": "999",
        "batch": "2048",
        "micro-batch": "512",
        "device": "default",
    }
    argv = base.argv("/models/qwen3-30b-a3b-Q4_K_M.gguf", "127.0.0.1", 18080)
    assert argv == ["/app/llama-server", *FLAGS[:-4], "--host", "127.0.0.1", "--port", "18080"]
    assert [c.what for c in base.changes] == ["--host", "--port"]  # the only differences, listed
    assert base.read_digest == read.digest and base.source.startswith("production as deployed (sha256:")


def test_a_vulkan_image_gives_a_vulkan_baseline() -> None:
    client = inspect_of("ghcr.io/ggml-org/llama.cpp:server-vulkan", VULKAN_DIGEST, FLAGS, ["/dev/dri"], [])
    base = derive_baseline(read_container(client, "llama-prod"))
    assert base.backend == "vulkan"
    assert base.image_ref == VULKAN_DIGEST


def test_the_backend_is_read_from_the_flags_the_env_and_the_devices() -> None:
    def backend(**kw: Any) -> str:
        mounts = (Mount("/srv/m", "/m"),)
        read = ProductionRead(
            kind="container", name="p", argv=("llama-server", "-m", "/m/x.gguf"), mounts=mounts, **kw
        )
        return derive_baseline(read).backend

    assert backend(image="local/llama:latest", devices=("/dev/dri:/dev/dri",)) == "vulkan"
    assert backend(image="local/llama:latest", devices=("/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri")) == "rocm"
    assert backend(image="local/llama:latest", env=("GGML_VK_VISIBLE_DEVICES=0",)) == "vulkan"
    argv = ("llama-server", "-m", "/m/x.gguf", "--device", "Vulkan0")
    read = ProductionRead(kind="container", name="p", argv=argv, mounts=(Mount("/srv/m", "/m"),))
    assert derive_baseline(read).backend == "vulkan"


def test_a_listen_address_in_the_environment_is_a_listed_change() -> None:
    read = ProductionRead(
        kind="container",
        name="p",
        argv=("llama-server", "-m", "/models/x.gguf"),
        env=("LLAMA_ARG_PORT=8080", "LLAMA_ARG_CTX_SIZE=8192"),
        mounts=(),
    )
    with pytest.raises(ProductionReadError, match="in no mount"):
        derive_baseline(read)
    read = ProductionRead(kind="unit", name="p", argv=read.argv, env=read.env)
    base = derive_baseline(read)
    assert base.env == ("LLAMA_ARG_CTX_SIZE=8192",)
    assert [(c.what, c.production) for c in base.changes] == [
        ("LLAMA_ARG_PORT", "8080"),
        ("executable", "llama-server"),  # a binary: the matching engine build's own
    ]


SYSTEMCTL = (
    "ExecStart={ path=/opt/llama/llama-server ; argv[]=/opt/llama/llama-server -m /srv/models/gemma.gguf "
    "-c 8192 -np 2 -fa on --port 8080 --host 0.0.0.0 ; ignore_errors=no ; start_time=[n/a] ; "
    "stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n"
    'Environment=GGML_VK_VISIBLE_DEVICES=0 "LLAMA_ARG_ALIAS=gemma 3"\n'
)


def test_a_systemd_exec_start_gives_the_binary_flags_and_file() -> None:
    argv, env = parse_systemctl_show(SYSTEMCTL)
    assert env == ("GGML_VK_VISIBLE_DEVICES=0", "LLAMA_ARG_ALIAS=gemma 3")
    base = derive_baseline(ProductionRead(kind="unit", name="llama.service", argv=argv, env=env))
    assert base.image_ref is None  # a binary: the matching engine build, not an image
    assert base.executable == ("/opt/llama/llama-server",)
    assert base.model_on_host == "/srv/models/gemma.gguf"
    assert base.flags == ("-m", "/srv/models/gemma.gguf", "-c", "8192", "-np", "2", "-fa", "on")
    assert base.backend == "vulkan"  # its environment names Vulkan's device
    assert [c.what for c in base.changes] == ["--port", "--host", "executable"]


def test_flags_keep_the_form_production_wrote_them_in() -> None:
    argv = (
        "llama-server",
        "--model=/srv/m/g.gguf",
        "--ctx-size=4096",
        "--port=8080",
        "--no-mmap",
        "-ngl",
        "-1",
    )
    base = derive_baseline(ProductionRead(kind="unit", name="u", argv=argv))
    assert base.flags == ("--model=/srv/m/g.gguf", "--ctx-size=4096", "--no-mmap", "-ngl", "-1")
    assert dict(base.settings)["context"] == "4096" and dict(base.settings)["GPU layers"] == "-1"
    assert base.argv("/models/g.gguf", "127.0.0.1", 1) == [
        "llama-server", "--model=/models/g.gguf", "--ctx-size=4096", "--no-mmap", "-ngl", "-1",
        "--host", "127.0.0.1", "--port", "1",
    ]  # fmt: skip
    assert [(c.what, c.production) for c in base.changes] == [
        ("--port", "8080"),
        ("executable", "llama-server"),
    ]


def test_the_digest_changes_with_the_flags() -> None:
    one = ProductionRead(kind="unit", name="u", argv=("llama-server", "-m", "/m.gguf", "-c", "4096"))
    two = ProductionRead(kind="unit", name="u", argv=("llama-server", "-m", "/m.gguf", "-c", "8192"))
    assert one.digest != two.digest
    assert ProductionRead.from_json(one.to_json()) == one


def test_the_target_is_productions_image_and_a_vulkan_production_pairs_as_vulkan() -> None:
    """The baseline target pulls production's image by digest; a Vulkan production whose tag names no
    backend is still a Vulkan run (the pairing reads the backend from the run's tag and repository)."""
    config = load_config(None)
    mounts = (Mount("/srv/models", "/models"),)
    argv = ("/app/llama-server", "-m", "/models/g.gguf", "-c", "4096")
    vulkan = ProductionRead(
        kind="container",
        name="p",
        argv=argv,
        image="127.0.0.1:5000/me/llama:latest",
        image_digest="127.0.0.1:5000/me/llama@sha256:" + "e" * 64,
        mounts=mounts,
        devices=("/dev/dri:/dev/dri",),
    )
    target = production_target(config, "local", derive_baseline(vulkan))
    assert target.image is not None and target.production is not None
    assert (target.image.registry, target.image.repository) == ("127.0.0.1:5000", "me/llama")
    assert target.image.digest == "sha256:" + "e" * 64
    assert backend_family(target.image.repository, target.image.tag) == "vulkan"
    assert target.engine == "llamacpp" and target.model == config.decision.baseline_model
    hub_digest = "ggml-org/llama.cpp@sha256:" + "f" * 64
    hub = ProductionRead(
        kind="container",
        name="p",
        argv=argv,
        image_digest=hub_digest,
        image="ggml-org/llama.cpp:server-rocm",
        mounts=mounts,
    )
    image = production_target(config, "local", derive_baseline(hub)).image
    assert image is not None and (image.registry, image.repository, image.tag) == (
        "docker.io",
        "ggml-org/llama.cpp",
        "server-rocm",
    )
    unpushed = ProductionRead(
        kind="container", name="p", argv=argv, image_digest="sha256:" + "f" * 64, mounts=mounts
    )
    with pytest.raises(ProductionReadError, match="no repository digest"):
        production_target(config, "local", derive_baseline(unpushed))


def test_the_decision_names_which_baseline_it_uses() -> None:
    config = load_config(None)
    assert baseline_choice(config).startswith("the configured baseline (model gemma3-270m")
    data = config.model_dump()
    data["decision"]["baseline_model"] = None
    assert baseline_choice(StrixConfig.model_validate(data)) == "production as deployed"

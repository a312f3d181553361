"""A systemd unit as production: its ``docker run`` / ``podman run`` is read as the container it starts
(the image by digest, the image's entrypoint with the unit's arguments, ``-e``, ``-v``, ``--device``),
and a unit running a binary gives the matching engine build -- the image of the same llama.cpp build
and backend (a Vulkan binary pairs as Vulkan) -- with the binary's flags and model file."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from strix_pipeline.config_load import load_config
from strix_pipeline.engines.base import EngineSpec
from strix_pipeline.fingerprint import backend_family, pair_differences
from strix_pipeline.hosts.box import production_read
from strix_pipeline.hosts.box.production_read import read_unit
from strix_pipeline.hosts.docker.as_deployed import as_deployed
from strix_pipeline.planning.container_run import parse_container_run
from strix_pipeline.planning.production_baseline import (
    Mount,
    ProductionRead,
    ProductionReadError,
    derive_baseline,
    differences,
    parse_build,
)
from strix_pipeline.planning.production_target import build_of, matching_build, production_target
from strix_pipeline.records import ImageRecord

DIGEST = "ghcr.io/ggml-org/llama.cpp@sha256:" + "a" * 64
DOCKER_RUN = (
    "/usr/bin/docker", "run", "--rm", "--name", "llama", "-it", "--network=host", "--device", "/dev/dri",
    "-e", "GGML_VK_VISIBLE_DEVICES=0", "-e", "HF_TOKEN", "-v", "/srv/models:/models:ro",
    "--mount", "type=bind,source=/srv/cache,target=/root/.cache", "ghcr.io/ggml-org/llama.cpp:server-vulkan",
    "-m", "/models/gemma.gguf", "-c", "8192", "-np", "2", "--host", "0.0.0.0", "--port", "8080",
)  # fmt: skip


def test_a_docker_run_is_parsed_into_image_arguments_env_mounts_and_devices() -> None:
    run = parse_container_run(DOCKER_RUN)
    assert run is not None and run.cli == "docker"
    assert run.image == "ghcr.io/ggml-org/llama.cpp:server-vulkan"
    assert run.command == DOCKER_RUN[-10:]
    assert run.entrypoint is None
    assert run.env == ("GGML_VK_VISIBLE_DEVICES=0", "HF_TOKEN")
    assert run.mounts == (Mount("/srv/models", "/models"), Mount("/srv/cache", "/root/.cache"))
    assert run.devices == ("/dev/dri:/dev/dri",)
    podman = parse_container_run(
        ("sudo", "podman", "container", "run", "--entrypoint=/app/x", "img", "-c", "1")
    )
    assert podman is not None and podman.cli == "podman" and podman.image == "img"
    assert podman.entrypoint == ("/app/x",) and podman.command == ("-c", "1")
    assert parse_container_run(("/opt/llama/llama-server", "-m", "/m.gguf")) is None
    assert parse_container_run(("docker", "start", "llama")) is None
    assert parse_container_run(("docker", "run", "--rm")) is None  # no image


class FakeApi:
    def __init__(self, images: dict[str, dict[str, Any]]) -> None:
        self.images = images

    def inspect_image(self, ref: str) -> dict[str, Any]:
        if ref not in self.images:
            raise LookupError(f"No such image: {ref}")
        return self.images[ref]


class FakeClient:
    def __init__(self, images: dict[str, dict[str, Any]]) -> None:
        self.api = FakeApi(images)


def systemctl_show(argv: tuple[str, ...], env: str = "") -> str:
    return (
        f"ExecStart={{ path={argv[0]} ; argv[]={' '.join(argv)} ; ignore_errors=no ; pid=0 }}\n"
        f"Environment={env}\n"
    )


@pytest.fixture
def box(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What the Box's commands print: ``systemctl show`` and a binary's ``--version``."""
    said: dict[str, str] = {}

    class Done:
        def __init__(self, stdout: str, stderr: str = "", returncode: int = 0) -> None:
            self.stdout, self.stderr, self.returncode = stdout, stderr, returncode

    def run(argv: list[str], **_: Any) -> Done:
        if argv[0] == "systemctl":
            return Done(said["systemctl"])
        if argv[0] == "cat":  # an --env-file
            path = argv[-1]
            return Done(said[path]) if path in said else Done("", f"cat: {path}: Permission denied", 1)
        assert argv[1:] == ["--version"], argv
        return Done("", said.get("version", ""))

    monkeypatch.setattr(production_read.subprocess, "run", run)
    return said


def test_a_units_docker_run_reads_as_its_container(box: dict[str, str]) -> None:
    box["systemctl"] = systemctl_show(DOCKER_RUN, "HF_TOKEN=secret DOCKER_HOST=unix:///run/docker.sock")
    image = {
        "Id": "sha256:" + "c" * 64,
        "RepoDigests": [DIGEST],
        "Config": {"Entrypoint": ["/app/llama-server"], "Cmd": ["--help"], "Env": ["PATH=/usr/bin"]},
    }
    client = FakeClient({"ghcr.io/ggml-org/llama.cpp:server-vulkan": image})
    read = read_unit(None, "llama.service", client)
    assert read.kind == "unit" and read.image_digest == DIGEST
    assert read.argv == ("/app/llama-server", *DOCKER_RUN[-10:])  # the image's entrypoint, the unit's args
    assert read.env == ("GGML_VK_VISIBLE_DEVICES=0", "HF_TOKEN=secret")  # -e NAME takes the unit's value
    base = derive_baseline(read)
    assert base.image_ref == DIGEST and base.executable == ("/app/llama-server",)
    assert base.model_on_host == "/srv/models/gemma.gguf" and base.model_in_engine == "/models/gemma.gguf"
    assert base.flags == ("-m", "/models/gemma.gguf", "-c", "8192", "-np", "2")
    assert base.backend == "vulkan"
    assert [c.what for c in base.changes] == ["--host", "--port"]  # the only differences, listed
    config = load_config(None)
    target = production_target(config, "local", base)
    assert target.image is not None and target.image.digest == "sha256:" + "a" * 64
    assert backend_family(target.image.repository, target.image.tag) == "vulkan"
    with pytest.raises(ProductionReadError, match="not in the Box's Docker"):
        read_unit(None, "llama.service", FakeClient({}))


def test_a_units_env_files_are_read_on_the_box_and_its_e_flags_override_them(box: dict[str, str]) -> None:
    """``--env-file`` as the Docker CLI reads it: literal values, comments and blank lines skipped, a bare
    name taking the unit's value; ``-e`` after every file, so it wins; a later file wins over an earlier."""
    files = ("--env-file", "/etc/llama/base.env", "--env-file=/etc/llama/box.env")
    box["systemctl"] = systemctl_show((*DOCKER_RUN[:2], *files, *DOCKER_RUN[2:]), "HF_TOKEN=secret LEVEL=3")
    box["/etc/llama/base.env"] = (
        "# the Box's GPU\nHSA_OVERRIDE_GFX_VERSION=11.5.1\n\n"
        'GGML_VK_VISIBLE_DEVICES=1\nLEVEL\nQUOTED="a b"\n'
    )
    box["/etc/llama/box.env"] = "  LLAMA_ARG_THREADS=8\nHSA_OVERRIDE_GFX_VERSION=11.5.0\nUNSET\n"
    image = {
        "Id": "sha256:" + "c" * 64,
        "RepoDigests": [DIGEST],
        "Config": {"Entrypoint": ["/app/llama-server"]},
    }
    client = FakeClient({"ghcr.io/ggml-org/llama.cpp:server-vulkan": image})
    read = read_unit(None, "llama.service", client)
    assert dict(e.split("=", 1) for e in read.env) == {
        "HSA_OVERRIDE_GFX_VERSION": "11.5.0",  # the later file
        "GGML_VK_VISIBLE_DEVICES": "0",  # -e over the file's 1
        "LEVEL": "3",  # a bare name: the unit's value
        "QUOTED": '"a b"',  # literally, quotes and all, as Docker passes it
        "LLAMA_ARG_THREADS": "8",
        "HF_TOKEN": "secret",
    }
    assert read_unit(None, "llama.service", client).digest == read.digest  # the same files: the same read
    box["/etc/llama/box.env"] = "LLAMA_ARG_THREADS=4\n"
    assert read_unit(None, "llama.service", client).digest != read.digest  # a changed file is a change

    del box["/etc/llama/box.env"]  # unreadable to the ssh user (root's 0600 file)
    with pytest.raises(
        ProductionReadError, match=r"--env-file /etc/llama/box.env cannot be read.*Permission"
    ):
        read_unit(None, "llama.service", client)
    box["/etc/llama/box.env"] = "MY VAR=1\n"
    with pytest.raises(ProductionReadError, match=r"--env-file /etc/llama/box.env line 1: variable 'MY VAR'"):
        read_unit(None, "llama.service", client)
    parsed = parse_container_run((*DOCKER_RUN[:2], *files, *DOCKER_RUN[2:]))
    assert parsed is not None and parsed.env_files == ("/etc/llama/base.env", "/etc/llama/box.env")


def test_the_build_is_read_from_a_binarys_version_output() -> None:
    assert parse_build("version: 6123 (a1b2c3d)\nbuilt with cc for x86_64") == ("b6123", None)
    assert parse_build("version: 0.6.0-dev (build 6130, commit unknown)") == ("b6130", None)
    assert parse_build("version: 0.6.0-dev (build 0, commit unknown)") == (None, None)
    vulkan = "ggml_vulkan: Found 1 Vulkan devices:\nload_backend: loaded Vulkan backend\nversion: 7001 (x)"
    assert parse_build(vulkan) == ("b7001", "vulkan")
    assert parse_build("") == (None, None)


def image(tag: str, repository: str = "ggml-org/llama.cpp", **kw: Any) -> ImageRecord:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    fields: dict[str, Any] = dict(
        engine="llamacpp", registry="ghcr.io", repository=repository, tag=tag,
        digest="sha256:" + tag[-1] * 64,
        floating=False, created=None, version=None, revision=None, labels=None, sort_key=tag,
        first_seen=now, last_seen=now,
    )  # fmt: skip
    return ImageRecord(**(fields | kw))


BINARY = ("/opt/llama/llama-server", "-m", "/srv/models/gemma.gguf", "-c", "8192", "--port", "8080")


def test_a_vulkan_binary_pairs_with_its_vulkan_engine_build(box: dict[str, str]) -> None:
    """The binary's build (its --version) and backend (here its environment) pick the image: the same
    build's Vulkan image, not the ROCm one nor another build's; the run keeps the image's executable
    and takes the binary's flags and model file."""
    box["systemctl"] = systemctl_show(BINARY, "GGML_VK_VISIBLE_DEVICES=0")
    box["version"] = "version: 6123 (a1b2c3d)\n"
    read = read_unit(None, "llama.service")
    assert (read.build, read.image) == ("b6123", None)
    base = derive_baseline(read)
    assert base.backend == "vulkan" and base.build == "b6123" and base.image_ref is None
    assert [c.what for c in base.changes] == ["--port", "executable"]
    images = [
        image("server-rocm-b6123"),
        image("server-vulkan-b6122"),
        vulkan := image("server-vulkan-b6123"),
        image("server-b6123"),
    ]
    assert [build_of(i) for i in images] == ["b6123", "b6122", "b6123", "b6123"]
    assert matching_build(images, "llamacpp", base) == vulkan
    config = load_config(None)
    target = production_target(config, "local", base, images=images)
    assert target.image == vulkan and target.production == base
    assert target.image is not None and backend_family(target.image.repository, target.image.tag) == "vulkan"
    with pytest.raises(ProductionReadError, match="no known llamacpp image of that build"):
        production_target(config, "local", base, images=images[:2])

    spec = EngineSpec(
        kind="llamacpp",
        command=["/app/llama-server", "-m", "/models/gemma.gguf", "-c", "512", "--port", "9000"],
        flags=["-m", "/models/gemma.gguf", "-c", "512", "--port", "9000"],
        port=9000,
        model_path="/models/gemma.gguf",
        served_model_name="gemma",
        ready_paths=("/health",),
        metrics_path="/metrics",
        metrics_prefix="llamacpp:",
        version_path=None,
        version_key=None,
    )
    deployed = as_deployed(spec, base, "127.0.0.1")
    assert deployed.command == [
        "/app/llama-server", "-m", "/models/gemma.gguf", "-c", "8192",
        "--host", "127.0.0.1", "--port", "9000",
    ]  # fmt: skip
    assert deployed.env == {"GGML_VK_VISIBLE_DEVICES": "0"}


def test_a_binary_without_a_build_has_no_engine_build_and_a_new_build_is_a_change(
    box: dict[str, str],
) -> None:
    box["systemctl"] = systemctl_show(BINARY)
    box["version"] = "version: 0 (unknown)\n"
    base = derive_baseline(read_unit(None, "llama.service"))
    assert base.build is None and base.backend == "unknown"
    with pytest.raises(ProductionReadError, match="does not say"):
        production_target(load_config(None), "local", base)
    old = ProductionRead(kind="unit", name="u", argv=BINARY, build="b6123")
    new = ProductionRead(kind="unit", name="u", argv=BINARY, build="b6200", build_backend="vulkan")
    assert old.digest != new.digest
    assert differences(old, new) == ["build b6123 (None) -> b6200 (vulkan)"]
    assert ProductionRead.from_json(new.to_json()) == new


def test_a_reads_digest_without_a_build_is_as_before() -> None:
    """Reads stored before binaries had builds keep their digest: doctor does not call it a change."""
    read = ProductionRead(kind="unit", name="u", argv=BINARY)
    assert (
        read.digest
        == "sha256:"
        + hashlib.sha256(
            b'{"argv":["/opt/llama/llama-server","-m","/srv/models/gemma.gguf","-c","8192","--port","8080"],'
            b'"devices":[],"env":[],"image":null,"image_digest":null,"kind":"unit","mounts":[],"name":"u"}'
        ).hexdigest()
    )


@pytest.mark.parametrize("kind", ["container", "binary"])
def test_a_vulkan_production_is_paired_as_vulkan(kind: str, box: dict[str, str]) -> None:
    """The decision pairs runs of one backend family (fingerprint.pair_differences): the baseline run
    of a Vulkan production -- a container whose tag names no backend, or a Vulkan binary -- pairs with a
    Vulkan candidate run and not with a ROCm one."""
    config = load_config(None)
    if kind == "container":
        read = ProductionRead(
            kind="container",
            name="p",
            argv=("/app/llama-server", "-m", "/models/g.gguf"),
            image="127.0.0.1:5000/me/llama:latest",
            image_digest="127.0.0.1:5000/me/llama@sha256:" + "e" * 64,
            mounts=(Mount("/srv/models", "/models"),),
            devices=("/dev/dri:/dev/dri",),
        )
        target = production_target(config, "local", derive_baseline(read))
    else:
        box["systemctl"] = systemctl_show(BINARY)
        box["version"] = "ggml_vulkan: Found 1 Vulkan devices:\nversion: 6123 (a1b2c3d)\n"
        base = derive_baseline(read_unit(None, "llama.service"))
        images = [image("server-rocm-b6123"), image("server-vulkan-b6123")]
        target = production_target(config, "local", base, images=images)
    assert target.image is not None
    baseline = SimpleNamespace(image_repository=target.image.repository, image_tag=target.image.tag)
    vulkan = SimpleNamespace(image_repository="ggml-org/llama.cpp", image_tag="server-vulkan-b7000")
    rocm = SimpleNamespace(image_repository="ggml-org/llama.cpp", image_tag="server-rocm-b7000")
    assert "backend" not in pair_differences(baseline, vulkan)
    assert pair_differences(baseline, rocm)["backend"] == ("vulkan", "rocm")

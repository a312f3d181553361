"""The files a model path needs on a host (hosts/docker/model_files.py): every part of a split GGUF named by
its first part, one file otherwise, and a path llama.cpp would refuse named as a problem."""

from __future__ import annotations

import shlex

import pytest

from strix_pipeline.config import DockerHostConfig
from strix_pipeline.hosts.docker.model_files import copy_hint, on_host, required_files
from strix_pipeline.hosts.docker.ssh import ssh_target

GPT = "/srv/models/gpt-oss-120b-mxfp4-{}-of-00003.gguf"


def test_a_split_ggufs_first_part_needs_every_part_beside_it():
    found = required_files(GPT.format("00001"))
    assert found.files == tuple(GPT.format(f"0000{i}") for i in (1, 2, 3))
    assert found.problem is None and found.split
    assert found.directory == "/srv/models"


@pytest.mark.parametrize(
    "path",
    [
        "/srv/models/Qwen3-30B-A3B-Q4_K_M.gguf",
        "/srv/models/Qwen3-30B-A3B",  # a checkpoint directory (vLLM)
        "/srv/models/x-00001-of-00001.gguf",  # a split of one part is one file
        "/srv/models/x-1-of-3.gguf",  # not llama.cpp's five digits
        "/srv/models/x-00001-of-00003.GGUF",
    ],
)
def test_anything_else_is_the_one_file(path):
    found = required_files(path)
    assert (found.files, found.problem, found.split) == ((path,), None, False)


def test_a_path_naming_a_later_part_is_a_problem_that_names_the_first():
    found = required_files(GPT.format("00002"))
    assert found.files == tuple(GPT.format(f"0000{i}") for i in (1, 2, 3))
    assert found.problem is not None
    assert "part 2 of 3" in found.problem and "gpt-oss-120b-mxfp4-00001-of-00003.gguf" in found.problem


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("x-00004-of-00003.gguf", "part 4 of 3"),
        ("x-00000-of-00003.gguf", "part 0 of 3"),
        ("x-00001-of-00000.gguf", "part 1 of 0"),
    ],
)
def test_counts_no_split_has_are_a_problem(name, said):
    found = required_files(f"/m/{name}")
    assert found.files == (f"/m/{name}",)
    assert found.problem is not None and said in found.problem


def test_on_a_docker_host_a_relative_path_is_under_models_dir():
    found = on_host("gpt-oss-120b-mxfp4-00001-of-00003.gguf", "/srv/models")
    assert found.problem is None
    assert found.files == tuple(GPT.format(f"0000{i}") for i in (1, 2, 3))
    relative = on_host("x.gguf", None)  # no models_dir: in the engine's image (the next test)
    assert relative.problem is None and relative.in_image


def test_a_split_gguf_outside_models_dir_needs_every_part_as_one_inside_does():
    # the engine container mounts each part of it beside the first (test_docker_launcher_units)
    outside = on_host("/data/x-00001-of-00002.gguf", "/srv/models")
    assert outside.problem is None and outside.files == (
        "/data/x-00001-of-00002.gguf",
        "/data/x-00002-of-00002.gguf",
    )
    assert on_host("/data/x-00001-of-00002.gguf", None).problem is None
    assert on_host("/data/x.gguf", "/srv/models").files == ("/data/x.gguf",)
    assert on_host("/srv/models/sub/x-00001-of-00002.gguf", "/srv/models").problem is None


def test_the_copy_hint_scps_the_absent_parts_to_the_directory(monkeypatch):
    files = required_files(GPT.format("00001"))
    hint = copy_hint(files, list(files.files[1:]), '"$STRIX_SSH_USER"@box.lan', port=2222)
    assert hint == (
        "all 3 parts in one directory, the profile's path naming the first: "
        "scp -P 2222 gpt-oss-120b-mxfp4-00002-of-00003.gguf gpt-oss-120b-mxfp4-00003-of-00003.gguf "
        '"$STRIX_SSH_USER"@box.lan:/srv/models/'
    )


def test_the_copy_hint_makes_an_absent_directory_and_copies_a_checkpoint_recursively():
    files = required_files("/srv/my models/Qwen3")
    assert copy_hint(files, ["/srv/my models/Qwen3"], None, make_dir=True) == (
        "mkdir -p '/srv/my models' && cp -r Qwen3 '/srv/my models/'"
    )
    # over ssh: the Box's shell reads the mkdir, scp's remote path takes the space as it is
    make, copy = copy_hint(files, list(files.files), "bench@box", make_dir=True).split(" && ")
    ssh = shlex.split(make)
    assert ssh[:2] == ["ssh", "bench@box"] and shlex.split(ssh[2]) == ["mkdir", "-p", "/srv/my models"]
    assert shlex.split(copy) == ["scp", "-r", "Qwen3", "bench@box:/srv/my models/"]


def test_doctors_scp_destination_names_the_user_variable_not_its_value(monkeypatch):
    from strix_pipeline.doctor.box import _scp_destination

    monkeypatch.setenv("STRIX_SSH_USER", "secret-user")
    host = DockerHostConfig(
        kind="docker", docker_host="ssh://{user}@box.lan:2222", ssh_user_env="STRIX_SSH_USER"
    )
    target = ssh_target(host)
    assert _scp_destination(target) == '"$STRIX_SSH_USER"@box.lan'
    assert target is not None and target.port == 2222
    plain = ssh_target(DockerHostConfig(kind="docker", docker_host="ssh://bench@box.lan"))
    assert _scp_destination(plain) == "bench@box.lan"
    assert _scp_destination(None) is None


def test_a_relative_path_on_a_host_without_models_dir_is_in_the_engines_image() -> None:
    # the container's /models is the image's own then (nothing of the host is mounted there): the
    # model ships in the image, as the vLLM test image's does, and there is nothing to look for
    found = on_host("gemma3-270m-bf16", None)
    assert found.in_image and found.problem is None and found.files == ("gemma3-270m-bf16",)
    assert not on_host("gemma3-270m-bf16", "/srv/models").in_image

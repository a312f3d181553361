"""DockerLauncher pieces that need no daemon: references, groups, URLs, container options."""

from __future__ import annotations

import pytest
from support.paths import FIXTURES

from strix_pipeline.config import DockerHostConfig, EngineConfig, ModelProfile
from strix_pipeline.hosts.docker import engine as docker_engine
from strix_pipeline.hosts.docker import host as docker_host
from strix_pipeline.hosts.docker import launcher as dk
from strix_pipeline.hosts.errors import EngineStartError

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (f"vllm/vllm-openai-rocm@{DIGEST}", ("vllm/vllm-openai-rocm", DIGEST)),
        (f"vllm/vllm-openai-rocm:v0.11.0@{DIGEST}", ("vllm/vllm-openai-rocm", DIGEST)),
        (f"127.0.0.1:5000/x/y:tag@{DIGEST}", ("127.0.0.1:5000/x/y", DIGEST)),
        ("127.0.0.1:5000/x/y:tag", ("127.0.0.1:5000/x/y", "tag")),
        ("127.0.0.1:5000/x/y", ("127.0.0.1:5000/x/y", "latest")),
        ("ghcr.io/ggml-org/llama.cpp:server-rocm-b6000", ("ghcr.io/ggml-org/llama.cpp", "server-rocm-b6000")),
    ],
)
def test_split_image_ref_pulls_by_digest_alone(ref, expected):
    assert docker_host.split_image_ref(ref) == expected


def test_parse_group_file():
    text = "root:x:0:\nvideo:x:44:bench\nrender:x:992:\nbroken:x:notanumber:\n"
    assert docker_host.parse_group_file(text) == {"video": 44, "render": 992}
    assert docker_host.parse_group_file("") == {}


def test_docker_url_fills_the_user_from_the_environment(monkeypatch):
    h = DockerHostConfig(kind="docker", docker_host="ssh://{user}@box", ssh_user_env="STRIX_TEST_BOX_USER")
    monkeypatch.setenv("STRIX_TEST_BOX_USER", "bench")
    assert docker_host.docker_url(h) == "ssh://bench@box"
    monkeypatch.delenv("STRIX_TEST_BOX_USER")
    with pytest.raises(EngineStartError, match="STRIX_TEST_BOX_USER"):
        docker_host.docker_url(h)
    assert not docker_host.is_local_daemon(h)
    assert docker_host.is_local_daemon(
        DockerHostConfig(kind="docker", docker_host="unix:///var/run/docker.sock")
    )


def _launcher(
    host: DockerHostConfig, engine: EngineConfig, path: str = "/srv/models/qwen/q.gguf"
) -> dk.DockerLauncher:
    profile = ModelProfile(model="qwen", family="qwen", quantization="Q4_K_M", path=path)
    return dk.DockerLauncher(
        host, engine, profile, f"ghcr.io/ggml-org/llama.cpp@{DIGEST}", "run 1/x", "/tmp/unused"
    )


def test_container_options_for_the_box():
    box = DockerHostConfig(
        kind="docker", docker_host="ssh://u@box", address="box.lan", models_dir="/srv/models"
    )
    launcher = _launcher(box, EngineConfig(kind="llamacpp", executable=["/app/llama-server"], env={"A": "1"}))
    kw = launcher.run_kwargs([44, 992])
    assert kw["entrypoint"] == ["/app/llama-server"]
    assert kw["command"][:2] == ["-m", "/models/qwen/q.gguf"]
    assert kw["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert kw["group_add"] == [44, 992]
    assert kw["security_opt"] == ["seccomp=unconfined"]
    assert kw["network_mode"] == "host" and kw["ipc_mode"] == "host" and "shm_size" not in kw
    assert kw["volumes"] == {"/srv/models": {"bind": "/models", "mode": "ro"}}
    assert kw["labels"]["strix.managed"] == "true" and kw["labels"]["strix.run_id"] == "run 1/x"
    assert kw["environment"] == {"A": "1"}
    assert kw["name"] == "strix-llamacpp-run-1-x"
    # a remote address: the engine must listen beyond loopback
    assert "--host" in kw["command"] and kw["command"][kw["command"].index("--host") + 1] == "0.0.0.0"
    # an SELinux-enforcing Box: the label option, the mounts left as they are (no :z relabelling)
    launcher.selinux_enforcing = True
    kw = launcher.run_kwargs([44, 992])
    assert kw["security_opt"] == ["seccomp=unconfined", "label=disable"]
    assert kw["volumes"] == {"/srv/models": {"bind": "/models", "mode": "ro"}}


def test_shm_size_instead_of_host_ipc_and_a_model_outside_models_dir():
    local = DockerHostConfig(kind="docker", docker_host="unix:///var/run/docker.sock", devices=[])
    launcher = _launcher(local, EngineConfig(kind="sglang", shm_size="16g"), path="/data/gemma.gguf")
    kw = launcher.run_kwargs([])
    assert kw["shm_size"] == "16g" and "ipc_mode" not in kw
    assert kw["devices"] == [] and kw["group_add"] == []
    assert kw["volumes"] == {"/data/gemma.gguf": {"bind": "/models/gemma.gguf", "mode": "ro"}}
    assert kw["entrypoint"] == ["python3", "-m", "sglang.launch_server"]
    assert kw["command"][kw["command"].index("--host") + 1] == "127.0.0.1"


def test_a_split_gguf_outside_models_dir_is_mounted_part_by_part_beside_the_first():
    box = DockerHostConfig(kind="docker", docker_host="ssh://u@box", models_dir="/srv/models")
    launcher = _launcher(box, EngineConfig(kind="llamacpp"), path="/data/gpt-00001-of-00003.gguf")
    kw = launcher.run_kwargs([])
    assert kw["volumes"] == {
        "/srv/models": {"bind": "/models", "mode": "ro"},
        **{
            f"/data/gpt-0000{i}-of-00003.gguf": {"bind": f"/models/gpt-0000{i}-of-00003.gguf", "mode": "ro"}
            for i in (1, 2, 3)
        },
    }
    assert kw["command"][:2] == ["-m", "/models/gpt-00001-of-00003.gguf"]  # the first, where the others are


def test_a_profile_without_a_path_is_refused():
    profile = ModelProfile(model="m", family="m", quantization="q", source="pypi:x")
    host = DockerHostConfig(kind="docker", docker_host="unix:///var/run/docker.sock")
    with pytest.raises(EngineStartError) as e:
        dk.DockerLauncher(host, EngineConfig(kind="vllm"), profile, "img", "r", "/tmp")
    assert e.value.status == "failed_guard"


class _Exec:
    def __init__(self, exit_code: int, output: bytes) -> None:
        self.exit_code, self.output = exit_code, output


class _Container:
    """exec_run answers from a table of argv[0] -> (code, output); an unknown command is not found."""

    def __init__(self, answers: dict[str, tuple[int, bytes]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def exec_run(self, argv: list[str]) -> _Exec:
        self.calls.append(argv)
        code, out = self.answers.get(argv[0], (127, b"exec: executable file not found in $PATH"))
        return _Exec(code, out)


def _engine(container: _Container, image_attrs: dict | None = None) -> docker_engine.DockerEngine:
    launcher = _launcher(
        DockerHostConfig(kind="docker", docker_host="ssh://u@box"), EngineConfig(kind="llamacpp")
    )
    return docker_engine.DockerEngine(
        base_url="http://127.0.0.1:1",
        model="m",
        metrics_url="",
        log_path=launcher.log_path,
        command=[],
        engine_build=None,
        container_id="c",
        container_name="strix-x",
        image_ref=launcher.image_ref,
        image_id=None,
        repo_digests=[],
        spec=launcher.spec,
        pid=None,
        image_attrs=image_attrs or {},
        _container=container,
    )


def test_engine_rocm_version_from_the_file_in_the_container_then_the_image_env_then_a_label():
    env_and_label = {"Config": {"Env": ["ROCM_VERSION=6.3.1"], "Labels": {"com.amd.rocm.version": "6.2"}}}
    c = _Container({"cat": (0, b"6.4.1-120\n")})
    assert _engine(c, env_and_label).rocm_version() == "6.4.1-120"
    assert c.calls == [["cat", "/opt/rocm/.info/version"]]
    no_file = _Container({"cat": (1, b"cat: /opt/rocm/.info/version: No such file or directory")})
    assert _engine(no_file, env_and_label).rocm_version() == "6.3.1"
    assert (
        _engine(_Container({}), {"Config": {"Labels": {"rocm.version": "7.0.2"}}}).rocm_version() == "7.0.2"
    )
    assert _engine(_Container({}), {"Config": {"Env": ["PATH=/bin"], "Labels": None}}).rocm_version() is None


def test_engine_firmware_from_amd_smi_in_the_container_and_none_without_a_tool():

    fw = (FIXTURES / "smi" / "amd-smi-firmware.json").read_bytes()
    assert _engine(_Container({"amd-smi": (0, fw)})).firmware().startswith("fw CP_ME=35,")
    assert _engine(_Container({})).firmware() is None

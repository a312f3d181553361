"""The Docker host's efficiency probe without a daemon: its thread count and model path, the script it
runs (standalone, outside the project), what it makes of the container's output, and that every
failure is a reason while the container is always removed."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import docker.errors
import pytest
from pydantic import ValidationError

from strix_pipeline.config import DockerHostConfig, LocalHostConfig
from strix_pipeline.hosts.probes import efficiency as ep
from strix_pipeline.memory.bandwidth import BandwidthProbe

IMAGE = "strix-test/python-numpy:1"
BOX = DockerHostConfig(
    kind="docker", docker_host="ssh://u@box", efficiency_probe_image=IMAGE, models_dir="/srv/models"
)
GOOD = {
    "python": "3.12.3",
    "bandwidth": {
        "bytes_per_s": 8.5e10,
        "threads": 16,
        "buffer_bytes": 268435456,
        "repeats": 5,
        "method": "copy",
    },
    "model": {
        "weight_bytes": 246587904,
        "kv_bytes_per_token": 18432,
        "source": "gguf:g.gguf",
        "details": {"file": "/strix-model/g.gguf", "architecture": "gemma3"},
    },
}


# ---------------------------------------------------------------- threads and the model's path


@pytest.mark.parametrize(
    ("kind", "flags", "expected"),
    [
        ("llamacpp", ["-m", "/models/g.gguf", "-t", "2", "--port", "1"], 2),
        ("llamacpp", ["--threads=6"], 6),
        ("llamacpp", ["-t", "2", "--threads", "8"], 8),  # the engine takes the last one
        ("llamacpp", ["-t", "-1"], None),  # llama-server's "its default"
        ("llamacpp", ["-tb", "4", "-c", "512"], None),  # the batch threads are not the decode's
        ("llamacpp", ["-t"], None),
        ("vllm", ["-t", "4"], None),  # a GPU engine: every CPU the container may use
    ],
)
def test_the_thread_count_is_llama_servers_flag_else_left_to_the_probe(kind, flags, expected):
    assert ep.engine_threads(kind, flags) == expected


def test_a_relative_model_path_is_under_models_dir_and_without_one_it_is_a_reason():
    assert ep.model_host_path("qwen/q.gguf", "/srv/models") == ("/srv/models/qwen/q.gguf", None)
    assert ep.model_host_path("/data/g.gguf", "/srv/models") == ("/data/g.gguf", None)
    path, why = ep.model_host_path("qwen/q.gguf", None)
    assert path is None and "relative" in why and "models_dir" in why
    assert ep.model_host_path(None, "/srv/models") == (None, "no model path known for this run")


# ---------------------------------------------------------------- the script, run outside the project


def _checkpoint(root: Path) -> Path:
    """A two-layer checkpoint's headers: tied embedding 10x4 BF16, one 4x4 F32 projection."""
    root.mkdir()
    header = json.dumps(
        {
            "model.embed_tokens.weight": {"dtype": "BF16", "shape": [10, 4], "data_offsets": [0, 80]},
            "model.layers.0.proj.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [80, 144]},
        }
    ).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(144))
    cfg = {"num_hidden_layers": 2, "num_key_value_heads": 1, "head_dim": 4, "num_attention_heads": 2}
    (root / "config.json").write_text(json.dumps(cfg))
    return root


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def test_the_script_reads_the_model_with_the_stdlib_alone_and_says_numpy_is_missing(tmp_path):
    """``-S``: no site-packages, so neither numpy nor the project is importable (cwd is elsewhere)."""
    ckpt = _checkpoint(tmp_path / "ckpt")
    argv = ep.probe_command(sys.executable, 1, str(ckpt), size_mib=8, time_budget_s=0.2)
    done = _run([argv[0], "-S", *argv[1:]], tmp_path)
    assert done.returncode == 0, done.stderr
    probe, model, problems = ep.parse_output(done.stdout, image=IMAGE, host_model_path="/srv/models/ckpt")
    assert probe is None
    assert problems == [f"bandwidth probe in {IMAGE} failed: ModuleNotFoundError: No module named 'numpy'"]
    # 80 B embedding (tied: read whole) + 64 B projection; KV: 2 x 2 layers x 1 head x 4 x 2 B
    assert (model.weight_bytes, model.kv_bytes_per_token) == (144, 32)
    assert model.details["directory"] == "/srv/models/ckpt"  # the host's path, not the mount's


def test_the_script_measures_with_the_threads_asked_or_every_cpu_it_may_use(tmp_path):
    for threads, expected in ((1, 1), (None, len(os.sched_getaffinity(0)))):
        argv = ep.probe_command(sys.executable, threads, None, size_mib=8, time_budget_s=0.2)
        done = _run(argv, tmp_path)
        assert done.returncode == 0, done.stderr
        probe, model, problems = ep.parse_output(done.stdout, image=IMAGE)
        assert problems == [] and model is None
        assert probe.threads == expected and probe.bytes_per_s > 0 and probe.buffer_bytes > 0


def test_the_script_names_a_file_that_is_no_model(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"NOPE" + bytes(60))
    done = _run(ep.probe_command(sys.executable, 1, str(bad), size_mib=8, time_budget_s=0.2), tmp_path)
    probe, model, problems = ep.parse_output(done.stdout, image=IMAGE, host_model_path="/srv/models/x.gguf")
    assert probe is not None and model is None
    assert problems == ["model bytes unknown: x.gguf: not a GGUF file (magic b'NOPE', expected b'GGUF')"]


# ---------------------------------------------------------------- the output


def test_good_output_gives_both_inputs_with_the_hosts_model_path():
    probe, model, problems = ep.parse_output(
        "numpy says hi\n" + json.dumps(GOOD) + "\n", image=IMAGE, host_model_path="/srv/models/g.gguf"
    )
    assert problems == []
    assert probe == BandwidthProbe(8.5e10, 16, 268435456, 5, "copy")
    assert model.weight_bytes == 246587904 and model.kv_bytes_per_token == 18432
    assert model.details == {"file": "/srv/models/g.gguf", "architecture": "gemma3"}


@pytest.mark.parametrize(
    ("stdout", "problem"),
    [
        ("", f"efficiency probe in {IMAGE} printed no JSON object: ''"),
        ("Traceback (most recent call last)", "printed no JSON object: 'Traceback"),
        ("[1, 2]", "printed no JSON object"),
        (
            json.dumps({**GOOD, "bandwidth": {**GOOD["bandwidth"], "bytes_per_s": -1}}),
            "bandwidth_bytes_per_s=-1 is not a positive number",
        ),
        (json.dumps({**GOOD, "bandwidth": {**GOOD["bandwidth"], "threads": 0}}), "are not counts >= 1"),
        (json.dumps({**GOOD, "bandwidth": {"bytes_per_s": 1.0}}), "missing 4 required positional arguments"),
        (json.dumps({**GOOD, "model": {**GOOD["model"], "weight_bytes": "many"}}), "weight_bytes='many'"),
        (
            json.dumps({"bandwidth": GOOD["bandwidth"]}),
            f"efficiency probe in {IMAGE}: no model bytes in its output",
        ),
        (
            json.dumps({"model": GOOD["model"]}),
            f"bandwidth probe in {IMAGE} failed: no bandwidth in its output",
        ),
    ],
)
def test_output_that_does_not_give_an_input_is_a_reason(stdout, problem):
    probe, model, problems = ep.parse_output(stdout, image=IMAGE, host_model_path="/srv/models/g.gguf")
    assert any(problem in p for p in problems), problems
    assert len(problems) == 1


# ---------------------------------------------------------------- the container, with a stand-in daemon


class FakeContainer:
    def __init__(self, client: FakeClient, kwargs: dict) -> None:
        self.client, self.kwargs, self.removed = client, kwargs, False

    def start(self) -> None:
        if self.client.start_error:
            raise docker.errors.APIError("start", explanation=self.client.start_error)

    def wait(self, timeout: float) -> dict:
        if self.client.wait_error:
            raise self.client.wait_error
        return {"StatusCode": self.client.code}

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        assert stdout != stderr  # read apart
        return (self.client.stdout if stdout else self.client.stderr).encode()

    def remove(self, force: bool) -> None:
        self.removed = True


class FakeContainers:
    def __init__(self, client: FakeClient) -> None:
        self.client = client

    def get(self, name: str) -> FakeContainer:
        if self.client.leftover is None:
            raise docker.errors.NotFound(name)
        return self.client.leftover

    def create(self, image: str, command: list[str], **kwargs) -> FakeContainer:
        c = FakeContainer(self.client, {"image": image, "command": command, **kwargs})
        self.client.created.append(c)
        return c


class FakeImages:
    def __init__(self, client: FakeClient) -> None:
        self.client = client

    def get(self, ref: str) -> object:
        if ref not in self.client.present:
            raise docker.errors.ImageNotFound(ref)
        return object()

    def pull(self, repo: str, tag: str) -> None:
        self.client.pulled.append((repo, tag))
        if self.client.pull_error:
            raise docker.errors.APIError("pull", explanation=self.client.pull_error)
        self.client.present.add(f"{repo}:{tag}")


class FakeClient:
    def __init__(self, *, stdout: str = "", stderr: str = "", code: int = 0) -> None:
        self.stdout, self.stderr, self.code = stdout, stderr, code
        self.start_error: str | None = None
        self.wait_error: Exception | None = None
        self.pull_error: str | None = None
        self.leftover: FakeContainer | None = None
        self.created: list[FakeContainer] = []
        self.present: set[str] = set()
        self.pulled: list[tuple[str, str]] = []
        self.containers, self.images = FakeContainers(self), FakeImages(self)


def test_one_container_offline_with_the_model_read_only_gives_both_inputs_and_is_removed():
    client = FakeClient(stdout=json.dumps(GOOD) + "\n", stderr="a warning on stderr\n")
    client.leftover = FakeContainer(client, {})  # a killed run's probe
    probe, model, why = ep.measure_on_host(client, BOX, 2, "gemma/g.gguf")
    assert why is None and probe.bytes_per_s == 8.5e10 and model.details["file"] == "/srv/models/gemma/g.gguf"
    assert client.leftover.removed
    [c] = client.created
    kw = c.kwargs
    assert kw["image"] == IMAGE and kw["name"] == ep.PROBE_NAME and kw["labels"] == {"strix.probe": "true"}
    assert kw["network_disabled"] is True and "network_mode" not in kw
    [mount] = kw["mounts"]
    assert (mount["Source"], mount["Target"], mount["ReadOnly"], mount["Type"]) == (
        "/srv/models/gemma/g.gguf",
        "/strix-model/g.gguf",
        True,
        "bind",
    )
    assert kw["entrypoint"] == ["python3"] and kw["command"][0] == "-c"
    assert (
        json.loads(kw["command"][-1])["threads"] == 2
        and json.loads(kw["command"][-1])["model"] == "/strix-model/g.gguf"
    )
    assert "def measure_copy_bandwidth" in kw["command"][2] and "def read_gguf_header" in kw["command"][3]
    assert "def from_gguf" in kw["command"][4]
    assert c.removed


def test_an_image_without_the_interpreter_is_a_reason_naming_it_and_the_container_goes():
    client = FakeClient()
    client.start_error = 'exec: "python3": executable file not found in $PATH: unknown'
    probe, model, why = ep.measure_on_host(client, BOX, None, "/data/g.gguf")
    assert probe is None and model is None
    assert why == (
        f'efficiency probe in {IMAGE} did not start: exec: "python3": executable file not found in $PATH: '
        "unknown (the image needs python3 with numpy)"
    )
    assert client.created[0].removed


def test_a_non_zero_exit_says_the_code_and_stderr_and_the_container_goes():
    client = FakeClient(stdout="", stderr="Traceback ...\nSyntaxError: invalid syntax\n", code=1)
    _, _, why = ep.measure_on_host(client, BOX, None, "/data/g.gguf")
    assert why == f"efficiency probe in {IMAGE} exited 1: Traceback ... SyntaxError: invalid syntax"
    assert client.created[0].removed


def test_a_probe_that_does_not_finish_is_a_reason_and_the_container_goes():
    client = FakeClient()
    client.wait_error = TimeoutError("read timed out")
    _, _, why = ep.measure_on_host(client, BOX, None, "/data/g.gguf", timeout_s=5)
    assert why == f"efficiency probe in {IMAGE} did not finish within 5 s: read timed out"
    assert client.created[0].removed


def test_a_relative_path_without_models_dir_still_measures_the_bandwidth():
    host = BOX.model_copy(update={"models_dir": None})
    client = FakeClient(stdout=json.dumps({"bandwidth": GOOD["bandwidth"]}))
    probe, model, why = ep.measure_on_host(client, host, None, "gemma/g.gguf")
    assert probe is not None and model is None and client.created[0].kwargs["mounts"] == []
    assert why == "model bytes unknown: model path 'gemma/g.gguf' is relative and the host has no models_dir"


def test_the_image_is_pulled_only_when_missing_and_a_failed_pull_is_a_reason():
    client = FakeClient()
    client.present.add(IMAGE)
    assert ep.prepare_image(client, BOX) is None and client.pulled == []
    client = FakeClient()
    assert ep.prepare_image(client, BOX) is None and client.pulled == [("strix-test/python-numpy", "1")]
    client = FakeClient()
    client.pull_error = "manifest unknown"
    assert (
        ep.prepare_image(client, BOX)
        == f"efficiency probe image {IMAGE} could not be pulled: manifest unknown"
    )


# ---------------------------------------------------------------- the config


def test_the_probe_image_is_a_docker_hosts_setting_and_the_interpreter_a_command_or_path():
    # a local host probes in the pipeline's own process (runner/local.py): it has no such key
    with pytest.raises(ValidationError, match=r"efficiency_probe_image\n  Extra inputs are not permitted"):
        LocalHostConfig(kind="local", efficiency_probe_image=IMAGE)
    assert (
        DockerHostConfig(
            kind="docker", docker_host="unix:///d.sock", efficiency_probe_python="/opt/venv/bin/python3"
        ).efficiency_probe_python
        == "/opt/venv/bin/python3"
    )
    for bad in ("python3 -c x", "../bin/python3", "/usr/../bin/python3", "python3;id"):
        with pytest.raises(ValidationError, match="a command such as python3 or an absolute path"):
            DockerHostConfig(kind="docker", docker_host="unix:///d.sock", efficiency_probe_python=bad)

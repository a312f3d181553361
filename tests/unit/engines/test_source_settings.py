"""An image source's own settings: its `env` and `extra_flags` reach the engine's
container and the run's fingerprint (a changed one starts another series, never a regression); the
image's own ENV is read from its config (docker-py's ``image.attrs``, faked: nothing runs) and recorded."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.warehouse import make_run

from strix_pipeline.config import DockerHostConfig, EngineConfig, ImageSource, ModelProfile
from strix_pipeline.engines import build_spec, comparable_flags
from strix_pipeline.fingerprint import differences, run_fingerprint
from strix_pipeline.hosts.docker import launcher as dk
from strix_pipeline.runner.record import record_engine_env, record_image_env

DIGEST = "sha256:" + "ab" * 32
TOOLBOX = ImageSource(
    registry="docker.io",
    repository="kyuz0/vllm-therock-gfx1151",
    env={"ROCBLAS_USE_HIPBLASLT": "1", "VLLM_USE_TRITON_AWQ": "1"},
    extra_flags=["--attention-backend", "TRITON_ATTN"],
)
ENGINE = EngineConfig(kind="vllm", env={"ROCBLAS_USE_HIPBLASLT": "0", "A": "1"}, extra_flags=["--seed", "1"])
PROFILE = ModelProfile(
    model="qwen", family="qwen", quantization="BF16", path="/srv/models/q", extra_flags={"vllm": ["--x", "2"]}
)


def test_the_sources_env_and_flags_are_in_the_spec_after_the_engines():
    spec = build_spec(ENGINE, PROFILE, "/models/q", source=TOOLBOX)
    # the source's flags after the engine's, before the profile's (the later one wins on repeat)
    assert spec.flags[-6:] == ["--seed", "1", "--attention-backend", "TRITON_ATTN", "--x", "2"]
    # the source knows its images: its value wins over the engine's on a repeated name
    assert spec.env == {"A": "1", "ROCBLAS_USE_HIPBLASLT": "1", "VLLM_USE_TRITON_AWQ": "1"}
    plain = build_spec(ENGINE, PROFILE, "/models/q")
    assert plain.env == {"A": "1", "ROCBLAS_USE_HIPBLASLT": "0"} and "--attention-backend" not in plain.flags


def test_the_container_starts_with_the_sources_env_and_flags():
    box = DockerHostConfig(
        kind="docker", docker_host="ssh://u@box", address="box.lan", models_dir="/srv/models"
    )
    launcher = dk.DockerLauncher(
        box,
        ENGINE,
        PROFILE,
        f"docker.io/kyuz0/vllm-therock-gfx1151@{DIGEST}",
        "r1",
        "/tmp/unused",
        source=TOOLBOX,
    )
    kw = launcher.run_kwargs([])
    assert kw["environment"] == {"A": "1", "ROCBLAS_USE_HIPBLASLT": "1", "VLLM_USE_TRITON_AWQ": "1"}
    i = kw["command"].index("--attention-backend")
    assert kw["command"][i + 1] == "TRITON_ATTN"


def _recorded(source: ImageSource):
    """A run as runner/docker_run.py records it from the launcher's spec."""
    spec = build_spec(ENGINE, PROFILE, "/models/q", source=source)
    run = make_run("r").run
    run.engine_flags = json.dumps(comparable_flags(spec.kind, spec.flags))
    record_engine_env(run, spec.env)
    return run


def test_a_changed_env_or_flag_of_the_source_is_another_series():
    run = _recorded(TOOLBOX)
    assert json.loads(run.engine_env) == {"A": "1", "ROCBLAS_USE_HIPBLASLT": "1", "VLLM_USE_TRITON_AWQ": "1"}
    assert "TRITON_ATTN" in json.loads(run.engine_flags)
    assert run_fingerprint(_recorded(TOOLBOX)) == run_fingerprint(run)
    env = _recorded(TOOLBOX.model_copy(update={"env": {"ROCBLAS_USE_HIPBLASLT": "0"}}))
    assert run_fingerprint(env) != run_fingerprint(run) and set(differences(run, env)) == {"engine_env"}
    flags = _recorded(TOOLBOX.model_copy(update={"extra_flags": ["--attention-backend", "ROCM_ATTN"]}))
    assert run_fingerprint(flags) != run_fingerprint(run) and set(differences(run, flags)) == {"engine_flags"}


def test_the_images_own_env_is_recorded_from_its_attrs_but_not_fingerprinted():
    run = _recorded(TOOLBOX)
    attrs = {"Id": "sha256:1", "Config": {"Env": ["PATH=/usr/bin", "HSA_XNACK=0"], "Labels": {}}}
    record_image_env(run, attrs)  # docker-py's image.attrs, as the launcher's pulled image gives it
    assert json.loads(run.image_env) == ["PATH=/usr/bin", "HSA_XNACK=0"]
    other = dataclasses.replace(run, image_env=json.dumps(["PATH=/usr/bin"]))
    assert run_fingerprint(other) == run_fingerprint(run)  # it moves with every release: the x-axis
    record_image_env(run, {"Config": {"Env": None}})
    assert run.image_env is None  # an image without ENV: nothing recorded


def test_the_override_is_refused_in_a_sources_env_as_in_an_engines():
    with pytest.raises(ValueError, match="HSA_OVERRIDE_GFX_VERSION must not be set"):
        ImageSource(registry="docker.io", repository="a/b", env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})

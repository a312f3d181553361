"""`strix box init`'s configuration from what a Box survey read: production's model as a profile (its
file, context per slot, slots, quantization from the file name), production as the decision's
baseline, the devices and groups found; the file loads."""

from __future__ import annotations

import argparse
from pathlib import Path

from strix_pipeline.cli.box import config_text, model_profile
from strix_pipeline.config_load import load_config
from strix_pipeline.hosts.box.survey import BoxSurvey
from strix_pipeline.planning.production_baseline import Mount, ProductionRead, derive_baseline
from strix_pipeline.planning.production_target import baseline_choice

READ = ProductionRead(
    kind="container",
    name="llama-prod",
    argv=(
        "/app/llama-server",
        "-m",
        "/models/Qwen3-30B-A3B-Q4_K_M.gguf",
        "-c",
        "65536",
        "-np",
        "4",
        "--alias",
        "qwen3",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
    ),  # fmt: skip
    image="ghcr.io/ggml-org/llama.cpp:server-vulkan",
    image_digest="ghcr.io/ggml-org/llama.cpp@sha256:" + "a" * 64,
    mounts=(Mount("/srv/models", "/models"),),
    devices=("/dev/dri:/dev/dri",),
)


def test_productions_model_becomes_the_profile() -> None:
    name, model = model_profile(derive_baseline(READ))
    assert name == "qwen3-30b-a3b-q4_k_m"
    assert model == {
        "model": "qwen3",
        "family": "qwen3-30b-a3b",
        "quantization": "Q4_K_M",
        "path": "/srv/models/Qwen3-30B-A3B-Q4_K_M.gguf",
        "context_length": 16384,
        "parallel": 4,
    }


def test_the_written_configuration_loads_with_production_as_the_baseline(tmp_path: Path) -> None:
    survey = BoxSurvey(
        READ, None, {"video": 44, "render": 992}, ["/dev/dri"], 128 * 10**9, ["/srv/models/other.gguf"]
    )
    args = argparse.Namespace(user_env="STRIX_BOX_USER", key_env=None, known_hosts=None)
    text = config_text("ssh://me@box.lan:2222", "box", survey, derive_baseline(READ), args)
    path = tmp_path / "strix.toml"
    path.write_text(text)
    config = load_config(str(path))
    host = config.docker_config("box")
    assert host.docker_host == "ssh://{user}@box.lan:2222" and host.ssh_user_env == "STRIX_BOX_USER"
    assert (host.video_gid, host.render_gid, host.devices) == (44, 992, ["/dev/dri"])
    assert host.production is not None and host.production.container == "llama-prod"
    assert host.production.health_url == "http://127.0.0.1:8080/health"
    assert baseline_choice(config) == "production as deployed"
    assert [s.repository for s in config.engines["llamacpp"].images] == ["ggml-org/llama.cpp"]
    assert "me@" not in text  # the user is read from the environment, never written
    assert "other.gguf" in text

"""`strix doctor` names what is missing, says how to fix it, and fails only on what is required."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support.doctor_checks import by_name, doctor_config

from strix_pipeline import cli
from strix_pipeline.config_load import load_config
from strix_pipeline.doctor import failed, run_checks


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def test_a_missing_model_is_named_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = tmp_path / "no-such-model.gguf"
    path = doctor_config(tmp_path, model_path=str(missing))
    checks = run_checks(load_config(path), start_engines=False)
    model = by_name(checks, "local", "model gemma3-270m")
    assert not model.ok and model.required and model.state == "missing"
    assert str(missing) in model.detail and "put the model file" in (model.fix or "")
    assert model in failed(checks)
    rc = cli.main(["--config", str(path), "doctor", "--no-start"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 1 and "local/model gemma3-270m" in out


def test_an_unreachable_registry_is_named_required_only_where_images_are_pulled(tmp_path: Path) -> None:
    registry = f"127.0.0.1:{_closed_port()}"
    # the embedded host runs no containers: the registry only feeds discovery, so it is a note
    local_only = run_checks(
        load_config(doctor_config(tmp_path / "a", registry=registry)), start_engines=False
    )
    reg = by_name(local_only, "all", f"registry {registry}")
    assert not reg.ok and not reg.required and reg.state == "not available"
    assert "ConnectError" in reg.detail and reg not in failed(local_only)
    # with a Docker host, images are pulled from it: required, and the unreachable daemon is named too
    with_box = run_checks(
        load_config(doctor_config(tmp_path / "b", registry=registry, box=True)), start_engines=False
    )
    reg = by_name(with_box, "all", f"registry {registry}")
    assert not reg.ok and reg.required and reg in failed(with_box)
    docker = by_name(with_box, "box", "docker reachable")
    assert not docker.ok and "/nonexistent/docker.sock" in docker.detail and docker.fix


def test_a_wrong_llama_build_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from strix_pipeline.provision import llamacpp_build

    monkeypatch.setattr(llamacpp_build, "installed_build", lambda: {"key": "built-for-another-cpu"})
    checks = run_checks(load_config(doctor_config(tmp_path)), start_engines=False)
    build = by_name(checks, "local", "llama-server build")
    assert not build.ok and "other CPU flags" in build.detail and build in failed(checks)

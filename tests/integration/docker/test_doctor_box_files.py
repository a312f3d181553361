"""What a Box needs on its disk, found through this machine's dockerd: every part of a split GGUF (the
busybox probe looks; a missing part is named with its profile, and ``strix doctor``'s line for the
model gives the command that puts it there), and the efficiency probe image (present and able to run
the probe, pullable, or neither).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import need
from support.bench_docker import DOCKER_HOST, HOST, make_config, remove_left_behind
from support.doctor_checks import by_name
from support.infra import free_port, push, remove_image, start_registry
from support.python_image import python_numpy_image, python_parts

from strix_pipeline import doctor
from strix_pipeline.config import DockerHostConfig, StrixConfig
from strix_pipeline.doctor.docker_access import EFFICIENCY
from strix_pipeline.hosts.box import stop_checks

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

PART = "gpt-oss-120b-mxfp4-{}-of-00003.gguf"


@pytest.fixture(autouse=True)
def no_probe_left(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind("strix-doctor-files-")  # the probe containers are the label's
    assert not left, f"containers left behind: {left}"


def split_parts(directory: Path, *numbers: int) -> Path:
    """The parts ``numbers`` of a 3-part split GGUF in ``directory``; returns the first part's path."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        (directory / PART.format(f"{n:05d}")).write_bytes(b"GGUF" + bytes([n]))
    return directory / PART.format("00001")


def box(tmp_path: Path, model: Path, **host: object) -> StrixConfig:
    """This machine's dockerd as a Docker host running one llama-server series on ``model``."""
    engine = SimpleNamespace(binary=Path("/app/llama-server"))  # never started: doctor only looks
    data = make_config(tmp_path, engine, model).model_dump()  # type: ignore[arg-type]
    data["hosts"][HOST].update(host)
    data["runs"] = {HOST: [{"engine": "llamacpp", "model": "gemma", "profile": "tiny"}]}
    return StrixConfig.model_validate(data)


def checks_of(config: StrixConfig) -> list[doctor.Check]:
    return [c for c in doctor.run_checks(config, start_engines=False) if c.host == HOST]


# ---------------------------------------------------------------- split GGUF files


def test_models_present_names_each_absent_part_with_its_profile(client, busybox, tmp_path):
    models = tmp_path / "models"
    first = split_parts(models, 1, 3)
    host = DockerHostConfig(
        kind="docker", docker_host=DOCKER_HOST, probe_image=busybox, models_dir=str(models)
    )
    found = stop_checks.models_present(client, host, {"gpt-oss-120b": str(first)})
    assert not found.ok and found.checked
    assert found.detail == f"absent: gpt-oss-120b ({models}/{PART.format('00002')})"

    split_parts(models, 2)
    found = stop_checks.models_present(client, host, {"gpt-oss-120b": PART.format("00001")})  # relative
    assert found.ok, found.detail
    assert found.detail == f"{first} (+2 parts)"

    later = stop_checks.models_present(client, host, {"gpt-oss-120b": str(models / PART.format("00002"))})
    assert not later.ok and later.checked and "must be given the first" in later.detail

    nowhere = tmp_path / "nowhere"  # Docker refuses the bind mount: every part is absent
    host = host.model_copy(update={"models_dir": str(nowhere)})
    gone = stop_checks.models_present(client, host, {"gpt-oss-120b": str(nowhere / first.name)})
    assert not gone.ok and gone.detail.count(f"no directory {nowhere}") == 3, gone.detail


def test_doctor_says_where_the_model_goes_and_its_fix_puts_the_absent_part_there(busybox, tmp_path):
    models = tmp_path / "models"
    first = split_parts(models, 1, 3)
    config = box(tmp_path, first, probe_image=busybox, models_dir=str(models))
    checks = checks_of(config)
    line = by_name(checks, HOST, "model gemma")
    assert line.state == "missing", line
    names = ", ".join(PART.format(f"0000{i}") for i in (1, 2, 3))
    assert line.detail == (
        f"absent: {PART.format('00002')}; 3 parts in {models}: {names} (the engine opens "
        f"/models/{first.name})"
    )
    assert by_name(checks, HOST, "models on the host").state == "missing"
    assert line.fix and line.fix.startswith("all 3 parts in one directory")

    # the fix, run where the user keeps the parts, is what makes both lines ok
    source = split_parts(tmp_path / "download", 1, 2, 3).parent
    command = line.fix.split(": ", 1)[1]
    subprocess.run(command, shell=True, cwd=source, check=True, timeout=30)
    checks = checks_of(config)
    assert by_name(checks, HOST, "model gemma").state == "ok", by_name(checks, HOST, "model gemma")
    assert by_name(checks, HOST, "models on the host").state == "ok"


def test_doctor_refuses_a_split_gguf_named_by_a_later_part_without_a_probe(tmp_path):
    models = tmp_path / "models"
    split_parts(models, 1, 2, 3)
    config = box(tmp_path, models / PART.format("00003"), models_dir=str(models))  # no probe_image
    checks = checks_of(config)
    line = by_name(checks, HOST, "model gemma")
    assert line.state == "missing" and "part 3 of 3" in line.detail
    assert line.fix == f"set models.gemma.path to {models / PART.format('00001')}"
    assert by_name(checks, HOST, "models on the host").state == "missing"


# ---------------------------------------------------------------- the efficiency probe image


@pytest.fixture(scope="module")
def python_numpy(docker_engine: None) -> Iterator[str]:
    parts = python_parts()
    need(parts is not None, "numpy in the project's environment", "pip install -e .")
    assert parts is not None
    with python_numpy_image(parts, tag="strix-test/doctor-python-numpy:1") as tag:
        yield tag


def efficiency_line(tmp_path: Path, image: str | None) -> doctor.Check:
    model = split_parts(tmp_path / "models", 1, 2, 3)
    return by_name(checks_of(box(tmp_path, model, efficiency_probe_image=image)), HOST, EFFICIENCY)


def test_unset_the_efficiency_image_is_a_note_saying_how_to_set_it(docker_engine, tmp_path):
    line = efficiency_line(tmp_path, None)
    assert (line.ok, line.required) == (False, False)
    assert "no decode efficiency" in line.detail
    assert line.fix and f"hosts.{HOST}.efficiency_probe_image" in line.fix and "numpy" in line.fix


def test_an_image_that_runs_the_probe_is_ok_with_its_size(python_numpy, tmp_path):
    line = efficiency_line(tmp_path, python_numpy)
    assert line.state == "ok", line
    assert " MB on the host)" in line.detail and "python3 with numpy runs the probe" in line.detail


def test_an_image_without_python3_is_missing_with_the_fix(busybox, tmp_path):
    line = efficiency_line(tmp_path, busybox)
    assert line.state == "missing", line
    assert "did not start" in line.detail and "the image needs python3 with numpy" in line.detail
    assert "model bytes unknown" not in line.detail  # no model is given to the doctor's probe
    assert line.fix and f"hosts.{HOST}.efficiency_probe_image" in line.fix


@pytest.mark.registry
def test_an_absent_image_is_ok_when_pullable_and_missing_when_not(registry_binary, busybox, tmp_path):
    with start_registry(tmp_path / "registry", binary=registry_binary) as registry:
        tag = f"{registry.host}/strix-test/doctor-efficiency:1"
        subprocess.run(["docker", "tag", busybox, tag], check=True, capture_output=True, timeout=60)
        push(tag)
        remove_image(tag)  # in the registry only: doctor asks it, never pulls
        line = efficiency_line(tmp_path / "pullable", tag)
        assert line.state == "ok", line
        assert "not on the host yet, pullable" in line.detail
        assert line.fix and line.fix.startswith(f"docker pull {tag} on the host")
        present = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60)
        assert present.returncode != 0, "doctor pulled the image"
    line = efficiency_line(tmp_path / "unreachable", f"127.0.0.1:{free_port()}/strix-test/nothing:1")
    assert line.state == "missing", line
    assert "not pullable" in line.detail and line.fix and "registry login" in line.fix

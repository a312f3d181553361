"""What would fail only after production is stopped, found while it serves, on the Box simulator: this
machine's dockerd behind a real sshd (every Docker call over ``ssh://``), a busybox probe image, a
ROCm probe image whose ``rocminfo`` names the GPU agent, a production container watched throughout.

``strix doctor`` lists each check (production, models, the engine's port, a ROCm container seeing
gfx1151, disk) with ok / missing; a run with any of them broken is ``failed_guard`` naming it, and
production is never stopped -- where today's code stopped it and lost up to ``ready_timeout_s``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import need
from support.bench_docker import BUSYBOX, HOST, make_config, remove_left_behind
from support.box_images import ProductionWatch, rocm_probe_files
from support.box_sim import KEY_ENV  # the env var the simulator's box_key sets
from support.infra import build_image, free_port, remove_image
from support.sshd import Sshd

from strix_pipeline import doctor
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import ImageRecord
from strix_pipeline.runner import BenchmarkTarget, run_benchmark

pytestmark = [pytest.mark.docker, pytest.mark.sshd, pytest.mark.slow, pytest.mark.timeout(300)]

ROCM_PROBE = "strix-test/rocm-probe:{gpu}"
CHECKS = ["production engine", "models on the host", "ROCm container sees gfx1151", "disk for images"]


@pytest.fixture(scope="module")
def rocm_probes(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    scratch = tmp_path_factory.mktemp("rocm-probe")
    tags = {gpu: ROCM_PROBE.format(gpu=gpu) for gpu in ("gfx1151", "gfx1100")}
    for gpu, tag in tags.items():
        build_image(tag, rocm_probe_files(scratch, gpu))
    yield tags
    for tag in tags.values():
        remove_image(tag)


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind("strix-llamacpp-stop-")
    assert not left, f"containers left behind: {left}"


def box_config(
    tmp_path: Path,
    model_path: Path,
    box_sshd: Sshd,
    busybox: str,
    production: tuple[str, str],
    rocm_probe: str,
    engine_port: int | None = None,
    **host,
) -> StrixConfig:
    name, url = production
    data = make_config(tmp_path, _NoImage(), model_path).model_dump()  # type: ignore[arg-type]
    data["hosts"][HOST].update(
        {
            "docker_host": box_sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(box_sshd.known_hosts),
            "probe_image": busybox,
            "rocm_probe_image": rocm_probe,
            "gpu_target": "gfx1151",
            "production": {"container": name, "health_url": url, "health_timeout_s": 30},
            **host,
        }
    )
    if engine_port:
        data["engines"]["llamacpp"]["port"] = engine_port
    data["runs"] = {HOST: [{"engine": "llamacpp", "model": "gemma", "profile": "tiny"}]}
    return StrixConfig.model_validate(data)


class _NoImage:
    """make_config's engine image: never pulled here, every run below is refused before its pull."""

    binary = Path("/app/llama-server")


def image() -> ImageRecord:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return ImageRecord(
        engine="llamacpp",
        registry="127.0.0.1:1",
        repository="strix-test/never-pulled",
        tag="b1",
        digest="sha256:" + "1" * 64,
        floating=False,
        created=None,
        version="b1",
        revision=None,
        labels=None,
        sort_key="b1",
        first_seen=now,
        last_seen=now,
    )


def states_of(checks: list, names: list[str]) -> dict[str, str]:
    return {
        c.name: c.state
        for c in checks
        if c.host == HOST and (c.name in names or c.name.startswith("engine port"))
    }


def test_doctor_lists_every_check_before_the_stop_with_ok_or_missing(
    model_path, box_sshd, box_key, busybox, production, rocm_probes, tmp_path
):
    good = box_config(tmp_path, model_path, box_sshd, busybox, production, rocm_probes["gfx1151"])
    port = good.engines["llamacpp"].port
    checks = doctor.run_checks(good, start_engines=False)
    assert states_of(checks, CHECKS) == {**dict.fromkeys(CHECKS, "ok"), f"engine port {port}": "ok"}, [
        (c.name, c.detail) for c in checks
    ]
    with socket.socket() as holder:  # something else listens on the engine's port
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the doctor's listener just left it
        holder.bind(("127.0.0.1", port))
        holder.listen()
        bad = box_config(
            tmp_path,
            tmp_path / "absent.gguf",
            box_sshd,
            busybox,
            (production[0], f"http://127.0.0.1:{free_port()}/health"),
            rocm_probes["gfx1100"],
            engine_port=port,
            min_free_disk_gb=10**6,
        )
        checks = doctor.run_checks(bad, start_engines=False)
    found = {c.name: c for c in checks if c.host == HOST}
    assert states_of(checks, CHECKS) == {**dict.fromkeys(CHECKS, "missing"), f"engine port {port}": "missing"}
    assert "absent: gemma (" in found["models on the host"].detail
    assert "does not answer 200" in found["production engine"].detail
    assert "rocminfo lists AMD RYZEN" not in found["ROCm container sees gfx1151"].detail
    assert "gfx1100, not gfx1151" in found["ROCm container sees gfx1151"].detail
    assert "already in use" in found[f"engine port {port}"].detail
    assert "GB free on" in found["disk for images"].detail and found["disk for images"].fix


@pytest.mark.parametrize(
    "fault",
    [
        "model absent",
        "health URL wrong",
        "production container absent",
        "port taken",
        "GPU not seen",
        "disk full",
    ],
)
def test_a_run_that_would_fail_after_the_stop_is_refused_with_production_never_stopped(
    fault, model_path, box_sshd, box_key, busybox, production, rocm_probes, tmp_path
):
    name, url = production
    prod = (name, url)
    host: dict = {}
    rocm = rocm_probes["gfx1151"]
    if fault == "health URL wrong":
        prod = (name, f"http://127.0.0.1:{free_port()}/health")
    elif fault == "production container absent":
        prod = ("llama-prod-typo", url)
    elif fault == "GPU not seen":
        rocm = rocm_probes["gfx1100"]
    elif fault == "disk full":
        host["min_free_disk_gb"] = 10**6
    path = tmp_path / "absent.gguf" if fault == "model absent" else model_path
    config = box_config(tmp_path, path, box_sshd, busybox, prod, rocm, **host)
    expect = {
        "model absent": "models on the host: absent: the run's model",
        "health URL wrong": "production engine: " + prod[1] + " does not answer 200",
        "production container absent": "production engine: no container llama-prod-typo",
        "port taken": "is already in use on the host",
        "GPU not seen": "ROCm container sees gfx1151: rocminfo lists",
        "disk full": "disk for images: ",
    }[fault]
    with socket.socket() as holder:
        if fault == "port taken":
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind(("127.0.0.1", config.engines["llamacpp"].port))
            holder.listen()
        with ProductionWatch(name) as watch:
            result = run_benchmark(
                config,
                BenchmarkTarget(HOST, "llamacpp", "gemma", "tiny", image()),
                run_id=f"stop-{fault.replace(' ', '-')}",
                log=lambda _: None,
                force=True,
                scenarios=["smoke"],
            )
    r = result.run
    assert r.status == "failed_guard", (r.status, r.failure_reason)
    assert expect in (r.failure_reason or "") and "production was not stopped" in r.failure_reason, (
        r.failure_reason
    )
    assert watch.states == ["running"], watch.states  # the users kept their engine throughout
    assert r.production_down_at is None

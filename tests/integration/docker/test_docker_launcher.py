"""DockerLauncher, guards, probe and production guard against the real Docker engine.

The "engine" here is busybox httpd behind a tiny script that takes llama-server's flags: it serves
/health and /v1/models from files, exits at once on a bad flag, and checks the model mount. The
image is ``docker import``-ed, pushed to a loopback registry and pulled back by digest. The real
llama-server cycle is in test_docker_launcher_llama.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import need
from support.bench_docker import healthy
from support.box_images import production_httpd
from support.infra import build_image, free_port, push, remove_image, start_registry
from support.paths import FIXTURES

from strix_pipeline.config import DockerHostConfig, EngineConfig, ModelProfile, ProductionEngine
from strix_pipeline.hosts import guards
from strix_pipeline.hosts.box.production import ProductionGuard
from strix_pipeline.hosts.docker.host import resolve_group_ids
from strix_pipeline.hosts.docker.launcher import DockerLauncher
from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.memory import DockerProbe, MemorySampler, summarize

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.timeout(240)]

BUSYBOX = Path("/bin/busybox")

FAKE_ENGINE = """#!/bin/busybox sh
# takes llama-server's flags; serves readiness files with busybox httpd
port=8080; host=127.0.0.1; model=""; www=/www
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift;;
    --host) host="$2"; shift;;
    -m) model="$2"; shift;;
    --never-ready) www=/www-loading;;
    --bad-flag) echo "error: invalid argument: --bad-flag" >&2; exit 1;;
  esac
  shift
done
[ -r "$model" ] || { echo "error: failed to load model '$model'" >&2; exit 2; }
echo "fake llama-server: model $model, listening on $host:$port"
# PID 1 ignores SIGTERM without a handler: stop like a real engine does, at once
/bin/busybox httpd -f -v -p "$host:$port" -h "$www" &
trap 'kill $!; exit 0' TERM INT
wait
"""
MODELS_JSON = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]})


def fake_engine_files() -> dict[str, bytes | Path]:
    return {
        "/bin/busybox": BUSYBOX,
        "/bin/sh": BUSYBOX,
        "/bin/fake-llama-server": FAKE_ENGINE.encode(),
        "/www/health": b'{"status":"ok"}',
        "/www/v1/models": MODELS_JSON.encode(),
        "/www/metrics": b"llamacpp:requests_processing 0\n",
        "/www-loading/index.html": b"loading",
    }


@dataclass
class Images:
    engine_ref: str  # registry/name@sha256:… (not present locally until pulled)
    busybox_tag: str  # local tag: probe and production images


@pytest.fixture(scope="module")
def images(
    registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Images]:
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    tmp = tmp_path_factory.mktemp("launcher-registry")
    reg = start_registry(tmp)
    tag = f"{reg.host}/strix-test/fake-llama:1"
    busy = "strix-test/launcher-busybox:1"
    pushed: list[str] = []
    try:
        # the image helper marks only host files with the x bit executable: write the script out
        script = tmp / "fake-llama-server"
        script.write_text(FAKE_ENGINE)
        script.chmod(0o755)
        files = fake_engine_files()
        files["/bin/fake-llama-server"] = script
        build_image(tag, files)
        digest = push(tag)
        remove_image(tag)
        build_image(busy, {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX})
        pushed.append(f"{reg.host}/strix-test/fake-llama@{digest}")
        yield Images(pushed[-1], busy)
    finally:
        for ref in (tag, *pushed, busy):
            remove_image(ref)
        reg.stop()


@pytest.fixture(scope="module")
def client(docker_engine: None):
    import docker

    c = docker.from_env()
    yield c
    c.close()


@pytest.fixture(autouse=True)
def no_managed_leftovers(client):
    yield
    # whatever a test did, no managed container may survive it
    left = client.containers.list(all=True, filters={"label": "strix.managed=true"})
    for c in left:
        c.remove(force=True)
    assert not left, f"managed containers left behind: {[c.name for c in left]}"


def host(**kw) -> DockerHostConfig:
    base = dict(kind="docker", docker_host="unix:///var/run/docker.sock", devices=[], ready_timeout_s=30)
    base.update(kw)
    return DockerHostConfig(**base)


def engine_cfg(**kw) -> EngineConfig:
    return EngineConfig(kind="llamacpp", executable=["/bin/fake-llama-server"], **kw)


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF fake")
    return path


def profile(model: Path, **kw) -> ModelProfile:
    return ModelProfile(model="tiny", family="tiny", quantization="Q4_K_M", path=str(model), **kw)


def managed(client, run_id: str) -> list:
    return client.containers.list(all=True, filters={"label": f"strix.run_id={run_id}"})


def test_full_cycle_pull_by_digest_start_ready_stop_remove(client, images, model, tmp_path):
    port = free_port()
    h = host(models_dir=str(model.parent))
    launcher = DockerLauncher(
        h,
        engine_cfg(env={"STRIX_TEST": "1"}),
        profile(model),
        images.engine_ref,
        "run-ok",
        tmp_path / "logs",
        client,
        port=port,
    )
    with launcher as engine:
        assert engine.base_url == f"http://127.0.0.1:{port}"
        assert httpx.get(engine.base_url + "/v1/models").json()["data"][0]["id"] == "tiny"
        assert engine.model == "tiny" and engine.metrics_url.endswith("/metrics")
        assert engine.command_line().startswith("/bin/fake-llama-server -m /models/tiny.gguf")
        assert any(d.startswith("sha256:") or "@sha256:" in d for d in engine.repo_digests)
        c = client.containers.get(engine.container_id)
        assert c.labels["strix.managed"] == "true" and c.labels["strix.run_id"] == "run-ok"
        hc = c.attrs["HostConfig"]
        assert hc["NetworkMode"] == "host" and hc["IpcMode"] == "host"
        assert "seccomp=unconfined" in hc["SecurityOpt"]
        mounts = {m["Destination"]: m for m in c.attrs["Mounts"]}
        assert mounts["/models"]["RW"] is False  # models are read-only
        assert "STRIX_TEST=1" in c.attrs["Config"]["Env"]
        assert engine.pid and engine.pid > 1
    assert managed(client, "run-ok") == []
    log = engine.log_path.read_text()
    assert f"pulling {images.engine_ref.split('@')[0]}@sha256:" in log  # pulled by digest, logged
    assert "listening on 127.0.0.1" in log  # the container's own output was streamed to the file
    assert "stopped and removed" in log


def test_bad_flag_fails_with_log_tail_and_the_next_run_still_works(client, images, model, tmp_path):
    bad = engine_cfg(extra_flags=["--bad-flag"])
    start = time.monotonic()
    with pytest.raises(EngineStartError) as e:
        with DockerLauncher(
            host(), bad, profile(model), images.engine_ref, "run-bad", tmp_path, client, port=free_port()
        ):
            pytest.fail("must not get here")
    assert time.monotonic() - start < 20  # an exit is noticed at once, not at the readiness timeout
    err = e.value
    assert err.status == "failed_start" and "exited with code 1" in err.reason
    assert err.reason.endswith("invalid argument: --bad-flag")  # the cause is in the reason itself
    assert "invalid argument: --bad-flag" in err.log_tail
    assert managed(client, "run-bad") == []
    with DockerLauncher(
        host(),
        engine_cfg(),
        profile(model),
        images.engine_ref,
        "run-next",
        tmp_path,
        client,
        port=free_port(),
    ) as engine:
        assert httpx.get(engine.base_url + "/health").status_code == 200


def test_readiness_timeout_and_missing_model_are_results(client, images, model, tmp_path):
    slow = engine_cfg(extra_flags=["--never-ready"])
    with pytest.raises(EngineStartError) as e:
        with DockerLauncher(
            host(ready_timeout_s=2),
            slow,
            profile(model),
            images.engine_ref,
            "run-slow",
            tmp_path,
            client,
            port=free_port(),
        ):
            pass
    assert e.value.status == "failed_start" and "not ready within 2 s" in e.value.reason
    assert "/health -> 404" in e.value.reason
    missing = profile(model.parent / "absent.gguf")
    with pytest.raises(EngineStartError) as e:
        with DockerLauncher(
            host(models_dir=str(model.parent)),
            engine_cfg(),
            missing,
            images.engine_ref,
            "run-nomodel",
            tmp_path,
            client,
            port=free_port(),
        ):
            pass
    assert "failed to load model '/models/absent.gguf'" in e.value.log_tail
    assert managed(client, "run-slow") == [] and managed(client, "run-nomodel") == []


def test_an_exception_inside_the_block_still_removes_the_container(client, images, model, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with DockerLauncher(
            host(),
            engine_cfg(),
            profile(model),
            images.engine_ref,
            "run-cancel",
            tmp_path,
            client,
            port=free_port(),
        ):
            assert len(managed(client, "run-cancel")) == 1
            raise KeyboardInterrupt  # a cancelled Dagster run
    assert managed(client, "run-cancel") == []


def test_leftover_managed_container_is_cleaned_before_the_next_start_and_recorded(
    client, images, model, tmp_path
):
    leftover = client.containers.run(
        images.busybox_tag,
        ["sh", "-c", "trap 'exit 0' TERM; sleep 300 & wait"],
        detach=True,
        network_mode="host",
        name="strix-llamacpp-crashed-run",
        labels={"strix.managed": "true", "strix.run_id": "crashed-run"},
    )
    port = free_port()
    launcher = DockerLauncher(
        host(),
        engine_cfg(),
        profile(model),
        images.engine_ref,
        "run-after-crash",
        tmp_path,
        client,
        port=port,
    )
    pre = guards.preflight(host(), launcher.spec, client=client, read_in_use=lambda: 1)
    assert [x.run_id for x in pre.leftovers] == ["crashed-run"]
    assert pre.leftovers[0].status == "running" and "strix-llamacpp-crashed-run" in pre.leftovers_note()
    assert managed(client, "crashed-run") == []
    with launcher as engine:
        assert httpx.get(engine.base_url + "/health").status_code == 200
    import docker.errors

    with pytest.raises(docker.errors.NotFound):
        leftover.reload()


def test_devices_and_numeric_groups_read_from_the_host_through_the_probe(client, images, model, tmp_path):
    h = host(devices=["/dev/null"], probe_image=images.busybox_tag)
    expected = sorted(g for g in (_gid("video"), _gid("render")) if g is not None)
    assert sorted(resolve_group_ids(h, client)) == expected
    with DockerLauncher(
        h, engine_cfg(), profile(model), images.engine_ref, "run-dev", tmp_path, client, port=free_port()
    ) as engine:
        hc = client.containers.get(engine.container_id).attrs["HostConfig"]
        assert [d["PathOnHost"] for d in hc["Devices"]] == ["/dev/null"]
        assert sorted(int(g) for g in hc["GroupAdd"]) == expected
    configured = host(devices=["/dev/null"], video_gid=4444, render_gid=5555)
    assert resolve_group_ids(configured, client) == [4444, 5555]


def _gid(name: str) -> int | None:
    for line in Path("/etc/group").read_text().splitlines():
        parts = line.split(":")
        if parts[0] == name:
            return int(parts[2])
    return None


def test_probe_container_reads_a_sysfs_tree_mounted_read_only(client, images):
    root = FIXTURES / "sysroot"
    probe = DockerProbe(client, images.busybox_tag, sys_path=str(root / "sys"), proc_path=str(root / "proc"))
    try:
        got = {(r.source, r.metric): r.value_bytes for r in probe.read()}
        assert got[("sysfs:card1", "gtt_total")] == 38654705664
        assert got[("sysfs:card2", "vram_used")] == 524288000
        assert got[("meminfo", "mem_total")] == 97416908 * 1024
        facts = probe.host_facts()
        assert facts.ttm_pages_limit == 9437184 and "ttm.pages_limit=9437184" in facts.kernel_cmdline
        sampler = MemorySampler(probe, "probe-run", interval_s=0.2)
        with sampler:
            time.sleep(0.5)
            sampler.set_phase("idle")
        s = summarize(sampler.samples)
        assert s.basis == "gpu" and s.held_bytes == 0
        assert s.baseline_bytes == 1073741824 + 268435456 + 524288000 + 33554432
    finally:
        probe.close()
    assert client.containers.list(all=True, filters={"label": "strix.probe=true"}) == []


def test_probe_container_reads_the_real_host(client, images):
    DockerProbe(client, images.busybox_tag)  # a killed run's probe, never closed
    probe = DockerProbe(client, images.busybox_tag)
    try:
        assert len(client.containers.list(all=True, filters={"label": "strix.probe=true"})) == 1
        got = {(r.source, r.metric): r.value_bytes for r in probe.read()}
        local = Path("/proc/meminfo").read_text().split()
        assert got[("meminfo", "mem_total")] == int(local[local.index("MemTotal:") + 1]) * 1024
    finally:
        probe.close()
    assert client.containers.list(all=True, filters={"label": "strix.probe=true"}) == []


@pytest.fixture
def production(client, images, tmp_path) -> Iterator[tuple[str, str]]:
    with production_httpd(client, images.busybox_tag, "strix-test-production") as found:
        yield found


@pytest.mark.parametrize("fail_mid_run", [False, True])
def test_production_container_stopped_for_the_run_and_healthy_after(
    client, images, model, tmp_path, production, fail_mid_run
):
    name, url = production
    prod_cfg = ProductionEngine(container=name, health_url=url, health_timeout_s=20)
    guard = ProductionGuard(
        "test-box",
        prod_cfg,
        state_dir=tmp_path / "state",
        client=client,
        run_id="run-prod",
        poll_interval_s=0.2,
    )
    with pytest.raises(RuntimeError) if fail_mid_run else _nothing():
        with guard:
            assert client.containers.get(name).status != "running" and not healthy(url)
            with DockerLauncher(
                host(),
                engine_cfg(),
                profile(model),
                images.engine_ref,
                "run-prod",
                tmp_path,
                client,
                port=free_port(),
            ) as engine:
                assert httpx.get(engine.base_url + "/health").status_code == 200
                if fail_mid_run:
                    raise RuntimeError("benchmark crashed in the middle")
    assert guard.restored is True
    assert client.containers.get(name).status == "running" and healthy(url)
    assert managed(client, "run-prod") == []


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

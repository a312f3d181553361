"""Memory measured on the Box simulator over the real ``ssh://`` path: this machine's dockerd behind a
real sshd, the probe container reading a simulated Strix Halo (tests/support/box_sim.py: sysfs, ttm and
amdttm, the KFD topology, meminfo, stand-in amd-smi / rocm-smi), a production container watched for
the whole run (support/box_images.py ``ProductionWatch``).

1. a foreign engine holding 51 GB is refused before production stops, named; memory that stays above
   the idle ceiling after the stop is refused (production restored), production's own process not
   taken for a foreign one;
2. a BF16 model whose weights do not fit the pool HIP's device total makes is refused before the stop;
3. SGLang's HiCache on a unified-memory host is refused before the stop (and at config load);
8. a blind GTT counter (the host lost 51 GB, sysfs saw nothing) marks the run's memory unreliable;
   a libdrm warning on the tools' stderr no longer hides their JSON, a broken stdout is a note.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.bench_docker import HOST, image_record, managed, remove_left_behind
from support.box_images import ProductionWatch
from support.box_sim import BoxSim, GpuProcess, box_config, run_gpu_container
from support.infra import free_port
from support.llama_image import LlamaImage
from support.sshd import Sshd

from strix_pipeline.config import StrixConfig
from strix_pipeline.records import RunResult
from strix_pipeline.runner import BenchmarkTarget, run_benchmark
from strix_pipeline.units import GB, GIB

pytestmark = [
    pytest.mark.docker,
    pytest.mark.registry,
    pytest.mark.llama,
    pytest.mark.sshd,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

RUN_PREFIX = "boxsim-"


@pytest.fixture(autouse=True)
def nothing_left_behind(docker_engine: None) -> Iterator[None]:
    yield
    left = remove_left_behind(RUN_PREFIX)
    assert not left, f"containers left behind: {left}"


def pid_of(name: str) -> int:
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Pid}}", name], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def config_for(
    tmp_path: Path,
    llama: LlamaImage,
    model_path: Path,
    sshd: Sshd,
    production: tuple[str, str],
    *,
    engines: dict | None = None,
    models: dict | None = None,
    **host: object,
) -> StrixConfig:
    name, url = production
    base = box_config(
        tmp_path,
        llama,
        model_path,
        sshd,
        production={"container": name, "health_url": url, "health_timeout_s": 30},
        idle_ceiling_gb=1.5,
        **host,
    )
    data = base.model_dump()
    data["engines"].update(engines or {})
    data["models"].update(models or {})
    return StrixConfig.model_validate(data)


def bench(
    config: StrixConfig,
    llama: LlamaImage,
    run_id: str,
    *,
    engine: str = "llamacpp",
    model: str = "gemma",
    log=None,
) -> RunResult:
    target = BenchmarkTarget(HOST, engine, model, "tiny", image_record(llama))
    lines: list[str] = []
    result = run_benchmark(
        config, target, run_id=RUN_PREFIX + run_id, log=log or lines.append, force=True, scenarios=["smoke"]
    )
    assert managed(RUN_PREFIX + run_id) == [], "the run left its engine container"
    return result


def engine_as(kind: str, llama: LlamaImage, *flags: str) -> dict:
    """An engine of ``kind`` whose image is the test's llama-server image: it is never started, the
    refusal comes first (its executable exists in the image, so the image checks pass)."""
    return {
        kind: {
            "kind": kind,
            "executable": [str(llama.binary)],
            "port": free_port(),
            "extra_flags": list(flags),
        }
    }


# -------------------------------------------------------------- 1. the idle baseline is not whatever is there


def test_a_foreign_engine_holding_51_gb_is_refused_before_production_stops_and_named(
    llama, model_path, box_sshd, box_key, box_probe_image, busybox, client, production, tmp_path, monkeypatch
):
    sim = BoxSim.build(tmp_path / "box")
    sim.install(monkeypatch, box_probe_image)
    foreign = run_gpu_container(
        client, busybox, f"someones-llama-{free_port()}", {"com.example.owner": "alice"}
    )
    try:
        # what the field report saw: 51 GB held by an engine the pipeline did not start
        sim.update(
            gtt_used=51 * GB, processes=(GpuProcess(pid_of(foreign.name), "llama-server", 0, 51 * GB),)
        )
        config = config_for(tmp_path, llama, model_path, box_sshd, production)
        with ProductionWatch(production[0]) as watch:
            result = bench(config, llama, "foreign")
    finally:
        foreign.remove(force=True)
    r = result.run
    reason = r.failure_reason or ""
    assert r.status == "failed_guard", (r.status, reason)
    assert "production was not stopped" in reason, reason
    assert f"container {foreign.name}" in reason and "com.example.owner=alice" in reason, reason
    assert "listed by amd-smi" in reason and "47.50 GiB" in reason, reason  # the SMI process, its memory
    assert watch.states == ["running"], watch.states  # production served throughout
    assert r.production_down_at is None and result.requests == []


def test_memory_above_the_idle_ceiling_after_the_stop_is_refused_and_production_comes_back(
    llama, model_path, box_sshd, box_key, box_probe_image, production, tmp_path, monkeypatch
):
    sim = BoxSim.build(tmp_path / "box")
    sim.install(monkeypatch, box_probe_image)
    # production's own llama-server holds 40 GB: not a foreign holder. After its stop the memory stays
    # (freed late, or held by what no tool lists): whatever is there then is no idle baseline.
    prod_pid = pid_of(production[0])
    sim.update(gtt_used=40 * GB, processes=(GpuProcess(prod_pid, "llama-server", 0, 40 * GB),))
    config = config_for(tmp_path, llama, model_path, box_sshd, production, baseline_wait_s=3)
    with ProductionWatch(production[0]) as watch:
        result = bench(config, llama, "ceiling")
    r = result.run
    reason = r.failure_reason or ""
    assert r.status == "failed_guard", (r.status, reason)
    assert "above the host's idle ceiling idle_ceiling_gb 1.5 GB" in reason and "40.30 GB" in reason, reason
    assert f"held by llama-server pid {prod_pid}" in reason, reason  # named by what the tools list
    assert watch.states == ["running", "exited", "running"], watch.states  # stopped, then restored
    assert result.production_restored is True and result.requests == []


# ------------------------------------------------------------------ 2. the pool against HIP's device total


def test_a_bf16_model_that_does_not_fit_hips_device_total_is_refused_before_production_stops(
    llama, model_path, box_sshd, box_key, box_probe_image, production, tmp_path, monkeypatch
):
    sim = BoxSim.build(tmp_path / "box")  # default TTM limit: HIP sees 62.9 GiB
    sim.install(monkeypatch, box_probe_image)
    weights = tmp_path / "Qwen3-30B-A3B"
    weights.mkdir()
    for i in range(2):  # ~57 GiB of BF16 shards, sparse: no disk is used
        with (weights / f"model-0000{i + 1}-of-00002.safetensors").open("wb") as f:
            f.truncate(int(28.45 * GIB))
    (weights / "config.json").write_text("{}")
    os.chmod(tmp_path, 0o755)
    models = {
        "qwen-bf16": {
            "model": "Qwen3-30B-A3B",
            "family": "qwen3-30b-a3b",
            "quantization": "BF16",
            "path": str(weights),
            "context_length": 512,
            "parallel": 2,
            "memory_fraction": 0.85,
        }
    }
    config = config_for(
        tmp_path,
        llama,
        model_path,
        box_sshd,
        production,
        engines=engine_as("vllm", llama),
        models=models,
        memory_budget_gb=120,
    )
    lines: list[str] = []
    with ProductionWatch(production[0]) as watch:
        result = bench(config, llama, "bf16", engine="vllm", model="qwen-bf16", log=lines.append)
    r = result.run
    reason = r.failure_reason or ""
    assert r.status == "failed_guard", (r.status, reason, lines[-5:])
    assert "weights 56.9 GiB exceed the pool --gpu-memory-utilization 0.85 x device total 62.9 GiB" in reason
    assert "= 53.5 GiB" in reason, reason
    assert watch.states == ["running"], watch.states
    # the host fact is in the run's log: what HIP sees beside the TTM limit
    assert any("device total as HIP sees it 62.90 GiB (KFD topology)" in ln for ln in lines), lines


# ------------------------------------------------------------------ 3. HiCache on unified memory


def test_hicache_on_the_unified_memory_box_is_refused_before_production_stops(
    llama, model_path, box_sshd, box_key, box_probe_image, production, tmp_path, monkeypatch
):
    BoxSim.build(tmp_path / "box").install(monkeypatch, box_probe_image)
    # the field report's setting: within budget 120 (0.55 x 62.9 GiB + 20 GB), and it killed the host
    engines = engine_as("sglang", llama, "--mem-fraction-static", "0.55", "--hicache-size", "20")
    config = config_for(
        tmp_path, llama, model_path, box_sshd, production, engines=engines, memory_budget_gb=120
    )
    with ProductionWatch(production[0]) as watch:
        result = bench(config, llama, "hicache", engine="sglang")
    r = result.run
    reason = r.failure_reason or ""
    assert r.status == "failed_guard", (r.status, reason)
    assert "SGLang HiCache (--hicache-size) on a unified-memory host" in reason and "never enable" in reason
    assert watch.states == ["running"], watch.states


# ------------------------------------------------------------------ 8. a blind counter


def test_a_blind_gtt_counter_marks_the_runs_memory_unreliable_and_the_tools_stderr_is_kept_apart(
    llama, model_path, box_sshd, box_key, box_probe_image, production, tmp_path, monkeypatch
):
    sim = BoxSim.build(tmp_path / "box")
    sim.install(monkeypatch, box_probe_image)
    config = config_for(tmp_path, llama, model_path, box_sshd, production)
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if " ready at " in line:  # loaded: the host lost 51 GB, sysfs gtt_used did not move
            sim.update(host_only_used=51 * GB, amd_smi_stdout_noise="WARNING: amdgpu.ids not found\n")

    result = bench(config, llama, "blind", log=log)
    r = result.run
    reason = r.failure_reason or ""
    assert r.status == "ok", (r.status, reason, r.log_tail)
    assert "memory unreliable: the GPU counters missed memory the host lost" in reason, reason
    assert r.held_bytes is None  # not a figure C5 may compare
    assert r.ttm_pages_limit == int(62.9 * GIB) // 4096
    # stored with the run (schema v10): what HIP saw, and no DKMS amdttm on this Box
    assert r.hip_device_total_bytes == int(62.9 * GIB) // 4096 * 4096 and r.amdttm_pages_limit is None
    # rocm-smi's JSON was read despite the libdrm warning on its stderr, at every SMI phase
    phases = {m.phase for m in result.memory if m.source == "rocm-smi:card0"}
    assert {"baseline", "idle", "after_stop"} <= phases, phases
    # amd-smi's stdout broke after load: a note on the run, not a debug line
    assert "SMI output not read: amd-smi printed no readable JSON on stdout" in reason, reason
    assert "amdgpu_get_auth" in reason  # its stderr's last line, said with it


# ------------------------------------------------------------------ strix doctor says the same


def test_doctor_lines_for_the_idle_ceiling_holders_hip_device_total_and_both_ttm_limits(
    llama, model_path, box_sshd, box_key, box_probe_image, busybox, client, production, tmp_path, monkeypatch
):
    from strix_pipeline import doctor

    prod_pid = pid_of(production[0])
    # a DKMS driver whose amdttm limit (31 GiB) is below the budget; production holds 4 GB itself
    sim = BoxSim.build(tmp_path / "box")
    sim.update(
        amdttm_pages_limit=31 * 262144,
        gtt_used=4 * GB,
        processes=(GpuProcess(prod_pid, "llama-server", 0, 4 * GB),),
    )
    sim.install(monkeypatch, box_probe_image)
    config = config_for(tmp_path, llama, model_path, box_sshd, production, memory_budget_gb=120)
    config = StrixConfig.model_validate(
        {**config.model_dump(), "runs": {HOST: [{"engine": "llamacpp", "model": "gemma", "profile": "tiny"}]}}
    )

    def checks() -> dict:
        return {c.name: c for c in doctor.run_checks(config, start_engines=False) if c.host == HOST}

    got = checks()
    ceiling = got["idle ceiling"]
    assert ceiling.ok, ceiling  # 4.30 GB held, of which production's own 4 GB
    assert "VRAM + GTT held now 4.30 GB, production's own 4.00 GB" in ceiling.detail, ceiling
    assert got["foreign GPU holders"].ok and got["foreign GPU holders"].detail.startswith("none"), got
    # every /proc/<pid>/fd read over ssh:// by the probe: this machine has no /dev/kfd, so no opener;
    # a daemon that denies the probe some fd tables (a user namespace) says how many, never in silence
    openers = got["GPU device openers"]
    assert openers.ok and (
        openers.detail.startswith("none besides production")
        or "processes could not be read (permission denied" in openers.detail
    ), openers
    hip = got["device total (HIP)"]
    assert hip.ok and hip.detail.startswith(
        "31.00 GiB as HIP sees it (KFD topology) vs memory_budget_gb 120 GB"
    )
    ttm = got["GTT/TTM limit"]
    assert not ttm.ok and ttm.state == "not available", ttm  # below the budget: said, not a failure
    assert (
        f"ttm.pages_limit {int(62.9 * GIB) // 4096}" in ttm.detail
        and "amdttm.pages_limit 8126464 (31.00 GiB)" in ttm.detail
    )
    assert "in force: amdttm (DKMS driver)" in ttm.detail

    # a foreign engine and 51 GB held: what a run would refuse, doctor says missing
    foreign = run_gpu_container(client, busybox, f"someones-vllm-{free_port()}", {"owner": "bob"})
    try:
        sim.update(
            gtt_used=55 * GB,
            processes=(
                GpuProcess(prod_pid, "llama-server", 0, 4 * GB),
                GpuProcess(pid_of(foreign.name), "python3", 0, 51 * GB),
            ),
        )
        got = checks()
    finally:
        foreign.remove(force=True)
    assert not got["idle ceiling"].ok and got["idle ceiling"].required, got["idle ceiling"]
    holders = got["foreign GPU holders"]
    assert not holders.ok and f"container {foreign.name}" in holders.detail, holders
    assert "python3 pid" in holders.detail and "47.50 GiB, listed by amd-smi" in holders.detail, holders

"""The Box simulator's outputs (the real tools' formats, tests/support/box_sim.py) read by the pipeline's
own readers: the host facts (ttm beside amdttm, HIP's device total from the KFD topology), the SMI
tools' JSON with stderr apart, their process lists, and the meminfo cross-check of a blind counter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from support.box_sim import BoxScenario, BoxSim, GpuProcess, smi_files

from strix_pipeline.hosts.box.gpu_holders import parse_amd_smi_process, parse_rocm_smi_pids
from strix_pipeline.memory import (
    meminfo_disagreement,
    parse_amd_smi_json,
    parse_rocm_smi_json,
    read_host_facts,
    read_smi,
    read_tree,
)
from strix_pipeline.records import MemorySample
from strix_pipeline.units import GB, GIB


def test_host_facts_read_ttm_beside_amdttm_and_the_hip_device_total(tmp_path):
    sim = BoxSim.build(tmp_path / "box")
    facts = read_host_facts(sim.root)
    assert facts.hip_device_total_bytes == int(62.9 * GIB) // 4096 * 4096
    assert facts.ttm_pages_limit == facts.ttm_module_pages_limit == int(62.9 * GIB) // 4096
    assert facts.amdttm_pages_limit is None
    # a DKMS driver: its amdttm limit is the one in force, read beside ttm's
    sim.update(amdttm_pages_limit=31 * 262144)  # 31 GiB
    facts = read_host_facts(sim.root)
    assert facts.amdttm_pages_limit == facts.ttm_pages_limit == 31 * 262144
    assert facts.ttm_module_pages_limit == int(62.9 * GIB) // 4096
    assert facts.hip_device_total_bytes == 31 * GIB
    sim.update(amdttm_pages_limit=None)  # unloaded: its files are gone again
    assert read_host_facts(sim.root).amdttm_pages_limit is None


@pytest.mark.parametrize("wrapped", [False, True], ids=["list", "gpu_data"])
def test_the_tools_json_parses_and_agrees_with_sysfs(tmp_path, wrapped):
    s = BoxScenario(gtt_used=20 * GB, amd_smi_gpu_data=wrapped)
    files = smi_files(s)
    amd = {r.metric: r.value_bytes for r in parse_amd_smi_json(files["smi/amd-smi-metric.json"])}
    rocm = {r.metric: r.value_bytes for r in parse_rocm_smi_json(files["smi/rocm-smi-meminfo.json"])}
    sysfs = {
        r.metric: r.value_bytes
        for r in read_tree(BoxSim.build(tmp_path / "b", s).root)
        if r.source.startswith("sysfs")
    }
    assert rocm["gtt_used"] == sysfs["gtt_used"] == 20 * GB
    assert abs(amd["gtt_used"] - sysfs["gtt_used"]) < 2**20  # amd-smi's "MB" is MiB, rounded down
    na = {
        r.metric
        for r in parse_amd_smi_json(smi_files(BoxScenario(amd_smi_na=True))["smi/amd-smi-metric.json"])
    }
    assert na == set()  # "N/A" everywhere: no reading, never 0


def test_a_libdrm_warning_on_stderr_no_longer_breaks_the_json_and_bad_stdout_is_a_note():
    s = BoxScenario()
    files = smi_files(s)
    warning = files["smi/stderr.txt"]
    assert "amdgpu_get_auth" in warning

    def tool(argv):
        out = (
            files["smi/rocm-smi-meminfo.json"] if argv[0] == "rocm-smi" else files["smi/amd-smi-metric.json"]
        )
        return 0, out, warning

    got = read_smi(tool)
    assert {r.source for r in got.readings} == {"rocm-smi:card0", "amd-smi:0"} and got.notes == []
    # merged as exec_run gave them before: the warning line ahead of the JSON makes it unreadable
    merged = read_smi(lambda argv: (0, warning + files["smi/rocm-smi-meminfo.json"], ""))
    assert merged.readings == [] and len(merged.notes) == 2
    assert merged.notes[0].startswith("rocm-smi printed no readable JSON on stdout")


def test_process_lists_of_both_tools():
    s = BoxScenario(processes=(GpuProcess(4242, "llama-server", 40 * GB, 11 * GB),))
    files = smi_files(s)
    (p,) = parse_amd_smi_process(files["smi/amd-smi-process.json"])
    assert (p.pid, p.name, p.bytes) == (4242, "llama-server", 51 * GB)
    (q,) = parse_rocm_smi_pids(files["smi/rocm-smi-pids.json"])
    assert (q.pid, q.bytes) == (4242, 51 * GB)
    idle = smi_files(BoxScenario())
    assert parse_amd_smi_process(idle["smi/amd-smi-process.json"]) == []  # "No running processes detected"
    assert parse_rocm_smi_pids(idle["smi/rocm-smi-pids.json"]) == []  # nothing on stdout


def samples(tmp_path, before: BoxScenario, after: BoxScenario) -> list[MemorySample]:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    out = []
    for i, (phase, s) in enumerate((("baseline", before), ("idle", after))):
        for r in read_tree(BoxSim.build(tmp_path / phase, s).root):
            out.append(MemorySample("r", t0 + timedelta(seconds=i), phase, r.source, r.metric, r.value_bytes))
    return out


def test_a_blind_gtt_counter_is_caught_by_meminfo(tmp_path):
    idle = BoxScenario()
    # the engine loaded 51 GB; sysfs gtt_used stayed near 0 (ROCm issue 5444), the host lost it all
    blind = BoxScenario(host_only_used=51 * GB)
    why = meminfo_disagreement(samples(tmp_path, idle, blind), tolerance_bytes=int(1.5 * GB))
    assert why is not None and why.startswith("the GPU counters missed memory the host lost")
    assert "MemTotal-MemAvailable 47.50 GiB" in why
    # counters that agree: GTT grew by what the host lost
    fine = BoxScenario(gtt_used=51 * GB)
    assert meminfo_disagreement(samples(tmp_path / "ok", idle, fine), tolerance_bytes=int(1.5 * GB)) is None


def test_the_probe_container_gets_the_gpu_devices_so_the_kfd_gpu_node_is_readable():
    """kfd_topology.c answers EPERM for the GPU node's properties unless the reader's device cgroup
    allows the GPU's render node: the probe is started with the host's devices."""
    from strix_pipeline.config import DockerHostConfig
    from strix_pipeline.hosts.docker.host import probe_for_host

    seen: dict = {}

    class Containers:
        def get(self, name):
            raise LookupError(name)  # no probe left by an earlier run

        def run(self, image, **kw):
            seen.update(kw, image=image)
            return object()

    class Client:
        containers = Containers()

    host = DockerHostConfig(kind="docker", docker_host="ssh://b@box", probe_image="busybox:1.36")
    probe_for_host(host, Client())
    assert seen["image"] == "busybox:1.36"
    assert seen["devices"] == ["/dev/kfd:/dev/kfd:rw", "/dev/dri:/dev/dri:rw"]
    assert seen["volumes"]["/sys"] == {"bind": "/host/sys", "mode": "ro"}

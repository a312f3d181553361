"""The Box simulator: a scenario-driven fake ROCm host behind the real ``ssh://`` path.

The Docker side is the loopback dockerd behind a real sshd (support/sshd.py): every Docker call of a
run goes through ``ssh … docker system dial-stdio``. This module is the host side: a directory laid
out as a Strix Halo's ``/sys`` and ``/proc`` (amdgpu's ``mem_info_*`` per card, ``/sys/module/ttm``
and, with DKMS drivers, ``/sys/module/amdttm``, the KFD topology under
``/sys/class/kfd/kfd/topology/nodes/*``, ``/proc/meminfo``), and stand-in ``amd-smi`` / ``rocm-smi``
scripts that print what the real tools print -- JSON on stdout, libdrm's warnings on stderr, ``N/A``
where the real tool has no value -- all mounted into the probe container the run starts (its
``/host/sys``, ``/host/proc``, its ``PATH``). Each output format is built by one function below, with
the upstream source it follows named beside it.

Use (the fixtures ``box_sshd``, ``box_key``, ``box_probe_image`` are registered in tests/conftest.py)::

    from support.box_images import ProductionWatch
    from support.box_sim import BoxScenario, BoxSim, GpuProcess, box_config

    def test_x(llama, model_path, box_sshd, box_key, box_probe_image, production, tmp_path, monkeypatch):
        sim = BoxSim.build(tmp_path / "box", BoxScenario(gtt_used=51 * GB))
        sim.install(monkeypatch, box_probe_image)  # every probe the run starts reads the simulated Box
        config = box_config(tmp_path, llama, model_path, box_sshd, production=...)
        with ProductionWatch(production_name) as watch:
            result = run_benchmark(config, target(llama), run_id=..., force=True)
        assert watch.states == ["running"]  # production never stopped
        sim.update(gtt_used=...)  # the Box changes mid-run: its files are rewritten in place

``BoxScenario`` fields are bytes; ``processes`` are what the SMI tools list as KFD processes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from strix_pipeline.config import StrixConfig
from strix_pipeline.units import GIB, MIB
from support.bench_docker import BUSYBOX, HOST, make_config
from support.infra import build_image, remove_image
from support.llama_image import LlamaImage
from support.sshd import Sshd, sshd_available, start_sshd

PAGE = 4096
KEY_ENV = "STRIX_TEST_SSH_KEY"
SIM_SMI_DIR = "/opt/box-sim/smi"  # where the stand-in tools read the scenario's outputs in the probe
SIM_BIN_DIR = "/usr/local/bin"  # on the probe's PATH (Docker's default PATH has it first)
PROBE_TAG = "strix-test/box-sim-probe:1"
# the libdrm warning amd-smi and rocm-smi print on stderr on many hosts, Strix Halo among them
LIBDRM_WARNING = "amdgpu_device_initialize: amdgpu_get_auth (1) failed (-1)"


@dataclass(frozen=True)
class GpuProcess:
    """A KFD process as the SMI tools list it."""

    pid: int
    name: str
    vram_bytes: int = 0
    gtt_bytes: int = 0


@dataclass(frozen=True)
class BoxScenario:
    """One state of a Strix Halo, 128 GB, 512 MiB BIOS carve-out, ROCm 7 (defaults: idle, default TTM
    limit: the GTT and HIP's device total are 62.9 GiB, as PyTorch reports on such a box)."""

    vram_total: int = 512 * MIB
    vram_used: int = 300 * 10**6  # the field report's idle Box: ~0.6 GB of VRAM + GTT
    gtt_used: int = 300 * 10**6
    ttm_pages_limit: int | None = int(62.9 * GIB) // PAGE
    amdttm_pages_limit: int | None = None  # set: a DKMS driver (amdgpu-dkms) with its own amdttm
    hip_device_total: int | None = None  # the KFD GPU node's frame buffer; None: the TTM limit in force
    mem_total: int = 130_560_000 * 1024  # MemTotal (kB in the file): 128 GB less the carve-out
    os_used: int = 3 * GIB  # what the OS holds besides the GPU's GTT
    host_only_used: int = 0  # memory the host lost that no GPU counter shows (a blind gtt_used)
    processes: tuple[GpuProcess, ...] = ()
    smi_stderr: tuple[str, ...] = (LIBDRM_WARNING,)
    amd_smi_gpu_data: bool = False  # newer amd-smi builds wrap the GPUs as {"gpu_data": [...]}
    amd_smi_na: bool = False  # amd-smi cannot read the memory: its fields are "N/A"
    amd_smi_stdout_noise: str = ""  # a line a broken amd-smi prints on stdout ahead of its JSON
    kernel_release: str = "6.18.4-200.fc43.x86_64"
    cmdline: str = "BOOT_IMAGE=/vmlinuz root=UUID=1 ro amd_iommu=off ttm.pages_limit=16488038"

    @property
    def ttm_in_force(self) -> int | None:
        return self.amdttm_pages_limit if self.amdttm_pages_limit is not None else self.ttm_pages_limit

    @property
    def gtt_total(self) -> int:
        return (self.ttm_in_force or 0) * PAGE

    @property
    def device_total(self) -> int:
        return self.hip_device_total if self.hip_device_total is not None else self.gtt_total

    @property
    def mem_available(self) -> int:
        return self.mem_total - self.os_used - self.gtt_used - self.host_only_used


# ---------------------------------------------------------------------------------------- formats


def sysfs_files(s: BoxScenario) -> dict[str, str]:
    """amdgpu's per-card counters: one decimal number of bytes per file (Documentation/gpu/amdgpu:
    mem_info_vram_total …, drivers/gpu/drm/amd/amdgpu/amdgpu_vram_mgr.c / amdgpu_gtt_mgr.c); the
    TTM modules' pages_limit in 4 KiB pages (ttm_tt.c ``pages_limit``; amdttm with amdgpu-dkms,
    ROCm issue 5595)."""
    dev = "sys/class/drm/card1/device"
    out = {
        f"{dev}/mem_info_vram_total": s.vram_total,
        f"{dev}/mem_info_vram_used": s.vram_used,
        f"{dev}/mem_info_vis_vram_total": s.vram_total,
        f"{dev}/mem_info_vis_vram_used": s.vram_used,
        f"{dev}/mem_info_gtt_total": s.gtt_total,
        f"{dev}/mem_info_gtt_used": s.gtt_used,
    }
    text = {k: f"{v}\n" for k, v in out.items()}
    text[f"{dev}/vbios_version"] = "113-STRXLGEN-001\n"
    if s.ttm_pages_limit is not None:
        text["sys/module/ttm/parameters/pages_limit"] = f"{s.ttm_pages_limit}\n"
    if s.amdttm_pages_limit is not None:
        text["sys/module/amdttm/parameters/pages_limit"] = f"{s.amdttm_pages_limit}\n"
    return text


def kfd_files(s: BoxScenario) -> dict[str, str]:
    """The KFD topology: node 0 the CPU, node 1 the GPU (``simd_count`` > 0), each ``properties`` file
    ``name value`` lines as the kernel prints them (linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c,
    ``node_show`` / ``mem_show``: heap_type, size_in_bytes, flags, width, mem_clk_max; heap type 1 is
    HSA_MEM_HEAP_TYPE_FB_PUBLIC, kfd_crat.h). The GPU's frame-buffer bank is what the HIP runtime
    sizes device memory from (ROCR-Runtime's topology reader)."""
    base = "sys/class/kfd/kfd/topology/nodes"

    def props(pairs: list[tuple[str, int]]) -> str:
        return "".join(f"{k} {v}\n" for k, v in pairs)

    cpu = [("cpu_cores_count", 32), ("simd_count", 0), ("mem_banks_count", 1), ("gfx_target_version", 0)]
    gpu = [
        ("cpu_cores_count", 0),
        ("simd_count", 80),
        ("mem_banks_count", 1),
        ("gfx_target_version", 110501),  # gfx1151
        ("simd_per_cu", 2),
        ("array_count", 4),
    ]
    return {
        f"{base}/0/properties": props(cpu),
        f"{base}/0/mem_banks/0/properties": props(
            [
                ("heap_type", 0),
                ("size_in_bytes", s.mem_total),
                ("flags", 0),
                ("width", 256),
                ("mem_clk_max", 8000),
            ]
        ),
        f"{base}/1/properties": props(gpu),
        f"{base}/1/mem_banks/0/properties": props(
            [
                ("heap_type", 1),
                ("size_in_bytes", s.device_total),
                ("flags", 0),
                ("width", 256),
                ("mem_clk_max", 8000),
            ]
        ),
    }


def proc_files(s: BoxScenario) -> dict[str, str]:
    """/proc/meminfo in kB (fs/proc/meminfo.c), the kernel command line and release."""
    return {
        "proc/meminfo": (
            f"MemTotal:       {s.mem_total // 1024} kB\n"
            f"MemFree:        {s.mem_available // 1024 - 2048} kB\n"
            f"MemAvailable:   {s.mem_available // 1024} kB\n"
            "Buffers:           2048 kB\n"
        ),
        "proc/cmdline": s.cmdline + "\n",
        "proc/sys/kernel/osrelease": s.kernel_release + "\n",
    }


def _amd_mb(value: int) -> dict[str, Any]:
    return {"value": value // MIB, "unit": "MB"}  # amd-smi's "MB" is bytes // (1024*1024)


def amd_smi_mem_usage(s: BoxScenario) -> str:
    """``amd-smi metric --mem-usage --json``: per GPU ``{"gpu": N, "mem_usage": {...}}``, each value
    ``{"value": bytes // 2**20, "unit": "MB"}``, a field it cannot read left as the bare string "N/A"
    (ROCm/amdsmi amdsmi_cli/amdsmi_commands.py ``metric``; the list of GPUs printed by
    amdsmi_logger.py ``_print_json_output``, indent 4; newer builds wrap it as {"gpu_data": [...]})."""
    keys = {
        "total_vram": s.vram_total,
        "used_vram": s.vram_used,
        "free_vram": s.vram_total - s.vram_used,
        "total_visible_vram": s.vram_total,
        "used_visible_vram": s.vram_used,
        "free_visible_vram": s.vram_total - s.vram_used,
        "total_gtt": s.gtt_total,
        "used_gtt": s.gtt_used,
        "free_gtt": s.gtt_total - s.gtt_used,
    }
    usage = {k: ("N/A" if s.amd_smi_na else _amd_mb(v)) for k, v in keys.items()}
    gpus = [{"gpu": 0, "mem_usage": usage}]
    return json.dumps({"gpu_data": gpus} if s.amd_smi_gpu_data else gpus, indent=4)


def amd_smi_process(s: BoxScenario) -> str:
    """``amd-smi process --json``: per GPU a ``process_list`` of ``{"process_info": {name, pid,
    memory_usage {gtt_mem, cpu_mem, vram_mem}, mem_usage, usage {gfx, enc}}}`` in bytes ("B") and ns,
    or ``{"process_info": "No running processes detected"}`` (ROCm/amdsmi amdsmi_commands.py
    ``process``; the keys from py-interface/amdsmi_interface.py ``amdsmi_get_gpu_process_list``)."""

    def unit(v: int, u: str) -> dict[str, Any]:
        return {"value": v, "unit": u}

    listed: list[dict[str, Any]] = [
        {
            "process_info": {
                "name": p.name,
                "pid": p.pid,
                "memory_usage": {
                    "gtt_mem": unit(p.gtt_bytes, "B"),
                    "cpu_mem": unit(0, "B"),
                    "vram_mem": unit(p.vram_bytes, "B"),
                },
                "mem_usage": unit(p.vram_bytes + p.gtt_bytes, "B"),
                "usage": {"gfx": unit(0, "ns"), "enc": unit(0, "ns")},
            }
        }
        for p in s.processes
    ] or [{"process_info": "No running processes detected"}]
    gpus = [{"gpu": 0, "process_list": listed}]
    return json.dumps({"gpu_data": gpus} if s.amd_smi_gpu_data else gpus, indent=4)


def amd_smi_static(s: BoxScenario) -> str:
    """``amd-smi static --asic --vram --json`` (ROCm/amdsmi amdsmi_commands.py ``static``: the asic
    block's keys, vram ``size`` as {"value": MB, "unit": "MB"})."""
    asic = {
        "market_name": "AMD Radeon 8060S Graphics",
        "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": "0x1002",
        "device_id": "0x1586",
        "subsystem_id": "0x8d32",
        "rev_id": "0xc1",
        "asic_serial": "N/A",
        "oam_id": "N/A",
        "num_compute_units": 40,
        "target_graphics_version": "gfx1151",
    }
    vram = {"type": "LPDDR5", "vendor": "N/A", "size": _amd_mb(s.vram_total), "bit_width": 256}
    return json.dumps([{"gpu": 0, "asic": asic, "vram": vram}], indent=4)


def rocm_smi_meminfo(s: BoxScenario) -> str:
    """``rocm-smi --showmeminfo vram gtt --json``: ``{"card0": {"VRAM Total Memory (B)": "…", "VRAM
    Total Used Memory (B)": "…", "GTT …"}}``, values strings of bytes, read from the same sysfs files
    (ROCm/rocm_smi_lib python_smi_tools/rocm_smi.py ``showMemInfo`` / ``formatJson``)."""
    card = {
        "VRAM Total Memory (B)": str(s.vram_total),
        "VRAM Total Used Memory (B)": str(s.vram_used),
        "GTT Total Memory (B)": str(s.gtt_total),
        "GTT Total Used Memory (B)": str(s.gtt_used),
    }
    return json.dumps({"card0": card})


def rocm_smi_pids(s: BoxScenario) -> str:
    """``rocm-smi --showpids --json``: ``{"system": {"PID<pid>": "<name>, <gpus>, <vram>, <sdma>,
    <cu>"}}`` (rocm_smi.py ``showPids`` -> ``print2DArray`` -> ``printSysLog``); no KFD process:
    nothing on stdout (main: "No JSON data to report", a warning on stderr)."""
    if not s.processes:
        return ""
    rows = {f"PID{p.pid}": f"{p.name.lower()}, 1, {p.vram_bytes + p.gtt_bytes}, 0, 0" for p in s.processes}
    return json.dumps({"system": rows})


AMD_SMI = f"""#!/bin/sh
# stand-in amd-smi: prints what the scenario wrote (formats: tests/support/box_sim.py)
D={SIM_SMI_DIR}
[ -s $D/stderr.txt ] && cat $D/stderr.txt >&2
case "$1" in
  metric) exec cat $D/amd-smi-metric.json ;;
  process) exec cat $D/amd-smi-process.json ;;
  static) exec cat $D/amd-smi-static.json ;;
esac
echo "amd-smi: invalid choice: '$1'" >&2
exit 2
"""

ROCM_SMI = f"""#!/bin/sh
# stand-in rocm-smi: prints what the scenario wrote (formats: tests/support/box_sim.py)
D={SIM_SMI_DIR}
[ -s $D/stderr.txt ] && cat $D/stderr.txt >&2
for a in "$@"; do
  case "$a" in
    --showmeminfo) exec cat $D/rocm-smi-meminfo.json ;;
    --showpids) [ -s $D/rocm-smi-pids.json ] || echo "WARNING: No JSON data to report" >&2
                exec cat $D/rocm-smi-pids.json ;;
  esac
done
echo "rocm-smi: unsupported arguments: $*" >&2
exit 2
"""


def smi_files(s: BoxScenario) -> dict[str, str]:
    return {
        "smi/amd-smi-metric.json": s.amd_smi_stdout_noise + amd_smi_mem_usage(s),
        "smi/amd-smi-process.json": amd_smi_process(s),
        "smi/amd-smi-static.json": amd_smi_static(s),
        "smi/rocm-smi-meminfo.json": rocm_smi_meminfo(s),
        "smi/rocm-smi-pids.json": rocm_smi_pids(s),
        "smi/stderr.txt": "".join(line + "\n" for line in s.smi_stderr),
    }


# ---------------------------------------------------------------------------------------- the Box


@dataclass
class BoxSim:
    root: Path
    scenario: BoxScenario
    _written: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, root: Path, scenario: BoxScenario | None = None) -> BoxSim:
        sim = cls(Path(root), scenario or BoxScenario())
        (sim.root / "bin").mkdir(parents=True, exist_ok=True)
        for name, text in (("amd-smi", AMD_SMI), ("rocm-smi", ROCM_SMI)):
            tool = sim.root / "bin" / name
            tool.write_text(text)
            tool.chmod(0o755)
        sim.write()
        # the probe runs as root in its container; the directories stay readable for the Box's user too
        for p in [sim.root, *sim.root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() or p.parent.name == "bin" else 0o644)
        return sim

    def files(self) -> dict[str, str]:
        s = self.scenario
        return {**sysfs_files(s), **kfd_files(s), **proc_files(s), **smi_files(s)}

    def write(self) -> None:
        """Lay the scenario out; files a previous scenario had and this one lacks are removed (a DKMS
        driver unloaded: no amdttm), so readers see exactly this state. Written in place, so a mounted
        probe sees the change at its next read."""
        files = self.files()
        for rel in self._written - set(files):
            (self.root / rel).unlink(missing_ok=True)
        for rel, text in files.items():
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self._written = set(files)

    def update(self, **changes: Any) -> BoxScenario:
        """Change the Box (mid-run too): ``sim.update(gtt_used=51 * GB)``."""
        self.scenario = replace(self.scenario, **changes)
        self.write()
        return self.scenario

    def volumes(self) -> dict[str, dict[str, str]]:
        """The stand-in tools and their outputs, for the probe container (beside /host/sys, /host/proc)."""
        return {
            str(self.root / "bin"): {"bind": SIM_BIN_DIR, "mode": "ro"},
            str(self.root / "smi"): {"bind": SIM_SMI_DIR, "mode": "ro"},
        }

    def probe(self, client: Any, image: str) -> Any:
        from strix_pipeline.memory import DockerProbe

        return DockerProbe(
            client,
            image,
            sys_path=str(self.root / "sys"),
            proc_path=str(self.root / "proc"),
            extra_volumes=self.volumes(),
        )

    def install(self, monkeypatch: pytest.MonkeyPatch, image: str) -> None:
        """Every probe a run (or ``strix doctor``) starts on a Docker host reads this Box: the probe
        container mounts the simulated /sys, /proc and SMI tools (through the host's client, so over
        ssh on an ``ssh://`` host)."""
        from strix_pipeline.hosts.docker import host as docker_host

        monkeypatch.setattr(
            docker_host, "probe_for_host", lambda host, client, pid=None: self.probe(client, image)
        )


class HeldWhileRunning:
    """While one of the pipeline's engine containers runs an image whose reference contains a key of
    ``held``, the simulated Box's GTT in use is that many bytes above idle -- what loading that engine
    takes on a real Box, which this machine's unified memory does not show -- and idle again once it
    is gone. A thread polls the daemon every 0.2 s (a Box run settles memory for seconds before each
    reading)."""

    def __init__(self, sim: BoxSim, client: Any, held: dict[str, int]) -> None:
        self.sim, self.client, self.held = sim, client, held
        self.idle = sim.scenario.gtt_used
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def __enter__(self) -> HeldWhileRunning:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.sim.update(gtt_used=self.idle)

    def _follow(self) -> None:
        while not self._stop.wait(0.2):
            extra = 0
            try:
                running = self.client.containers.list(filters={"label": "strix.managed=true"})
                for c in running:
                    ref = c.attrs["Config"]["Image"]
                    extra = max([extra, *(n for key, n in self.held.items() if key in ref)])
            except Exception:  # noqa: BLE001 - a container gone between list and read: next poll
                continue
            if self.sim.scenario.gtt_used != self.idle + extra:
                self.sim.update(gtt_used=self.idle + extra)


def run_gpu_container(client: Any, image: str, name: str, labels: dict[str, str]) -> Any:
    """A container "holding the GPU" as a foreign engine would: ``/dev/kfd`` mapped in (from /dev/null:
    this machine has no GPU), labels of its own, not the pipeline's."""
    return client.containers.run(
        image,
        ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
        detach=True,
        name=name,
        network_mode="host",
        devices=["/dev/null:/dev/kfd:rwm"],
        labels=labels,
    )


def box_config(
    tmp_path: Path, llama: LlamaImage, model_path: Path, sshd: Sshd, **host: object
) -> StrixConfig:
    """The Docker-host test config (support/bench_docker.py) with its host the Box: behind the sshd,
    unified memory, the probe image that the simulator mounts into. ``host`` overrides host keys."""
    production = host.pop("production", None)
    data = make_config(tmp_path, llama, model_path, production=production).model_dump()  # type: ignore[arg-type]
    data["hosts"][HOST].update(
        {
            "docker_host": sshd.url,
            "ssh_key_path_env": KEY_ENV,
            "ssh_known_hosts": str(sshd.known_hosts),
            "probe_image": PROBE_TAG,
            "unified_memory": True,
            # the simulated Box's memory moves only when a test says so: the Box's own tolerance
            "baseline_tolerance_gb": 1.5,
            **host,
        }
    )
    return StrixConfig.model_validate(data)


# ---------------------------------------------------------------------------------------- fixtures
# Registered in tests/conftest.py (imported there), so every test module may ask for them.


def need(condition: bool, what: str, how: str) -> None:
    from conftest import need as conftest_need  # conftest imports this module: not at import time

    conftest_need(condition, what, how)


@pytest.fixture(scope="module")
def box_sshd(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real sshd on loopback in front of this machine's dockerd: the Box's ssh:// Docker."""
    need(
        sshd_available(),
        "the OpenSSH server and client (/usr/sbin/sshd, ssh, ssh-keygen)",
        "apt-get install openssh-server openssh-client",
    )
    with start_sshd(tmp_path_factory.mktemp("box-sim-sshd")) as server:
        yield server


@pytest.fixture
def box_key(box_sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(KEY_ENV, str(box_sshd.key))
    return box_sshd.key


@pytest.fixture(scope="module")
def box_probe_image(docker_engine: None) -> Iterator[str]:
    """The probe image (busybox: sh, cat, sleep, find, stat) that the simulator's tools run in."""
    need(BUSYBOX.is_file(), "a static busybox at /bin/busybox", "apt-get install busybox-static")
    applets = ("sh", "cat", "sleep", "find", "stat", "ls", "echo")
    build_image(PROBE_TAG, {"/bin/busybox": BUSYBOX, **{f"/bin/{a}": BUSYBOX for a in applets}})
    yield PROBE_TAG
    remove_image(PROBE_TAG)


def wait_healthy(url: str, timeout_s: float = 15) -> None:
    from support.bench_docker import healthy

    deadline = time.monotonic() + timeout_s
    while not healthy(url):
        assert time.monotonic() < deadline, f"{url} never healthy"
        time.sleep(0.1)

"""Memory counters read from a root tree: amdgpu sysfs per card, /proc/meminfo, process RSS, host facts.

Readers take a ``root`` so a fixture tree stands in for ``/``; the Box's counters arrive as such a tree
from the probe container (probes.py). Why every source is kept apart: docs/architecture.md (memory).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.units import GIB, KIB, MIB

SYSFS_FILES = (
    "mem_info_vram_total",
    "mem_info_vram_used",
    "mem_info_vis_vram_total",
    "mem_info_vis_vram_used",
    "mem_info_gtt_total",
    "mem_info_gtt_used",
)
CARD_NAME = re.compile(r"^card(\d+)$")  # card1-eDP-1 and renderD128 are not cards
UNIT_BYTES = {"B": 1, "KB": KIB, "KIB": KIB, "MB": MIB, "MIB": MIB, "GB": GIB, "GIB": GIB}
PAGE_SIZE = 4096  # ttm.pages_limit counts 4 KiB pages


@dataclass(frozen=True)
class Reading:
    """One counter value at one instant, before it is stamped with a run id and phase."""

    source: str  # "sysfs:card1", "meminfo", "process", "rocm-smi:card0", "amd-smi:0"
    metric: str  # "vram_used", "gtt_total", "vis_vram_used", "mem_used", "mem_total", "rss", ...
    value_bytes: int


@dataclass(frozen=True)
class HostMemoryFacts:
    """Recorded with every run: what decides how much memory the engines may take."""

    kernel_cmdline: str | None
    ttm_pages_limit: int | None
    kernel_release: str | None
    vbios: str | None = None  # amdgpu VBIOS version(s), "card1=113-…"; None: no amdgpu card
    # the in-tree ttm module's and the DKMS driver's amdttm module's pages_limit, each None when absent;
    # ``ttm_pages_limit`` above is the one in force (amdttm's when the DKMS driver is loaded)
    ttm_module_pages_limit: int | None = None
    amdttm_pages_limit: int | None = None
    # device memory as the HIP runtime sizes it (the KFD topology's GPU node): what vLLM's and SGLang's
    # fraction flags take their share of; None where the host has no KFD GPU node
    hip_device_total_bytes: int | None = None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_amdgpu_sysfs(root: Path = Path("/")) -> list[Reading]:
    """Every card's ``mem_info_*`` counters (bytes, one decimal value per file)."""
    out: list[Reading] = []
    drm = Path(root) / "sys/class/drm"
    if not drm.is_dir():
        return out
    cards = sorted((p for p in drm.iterdir() if CARD_NAME.match(p.name)), key=lambda p: int(p.name[4:]))
    for card in cards:
        for name in SYSFS_FILES:
            value = _read_int(card / "device" / name)
            if value is not None:
                out.append(Reading(f"sysfs:{card.name}", name.removeprefix("mem_info_"), value))
    return out


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes by key (``MemTotal: 131072000 kB``)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        unit = parts[1].upper() if len(parts) > 1 else "B"
        out[key.strip()] = value * UNIT_BYTES.get(unit, 1)
    return out


def read_meminfo(root: Path = Path("/")) -> list[Reading]:
    try:
        info = parse_meminfo((Path(root) / "proc/meminfo").read_text())
    except OSError:
        return []
    out = []
    if "MemTotal" in info:
        out.append(Reading("meminfo", "mem_total", info["MemTotal"]))
    if "MemAvailable" in info:
        out.append(Reading("meminfo", "mem_available", info["MemAvailable"]))
        if "MemTotal" in info:
            # what vLLM and SGLang see on integrated GPUs (psutil's available)
            out.append(Reading("meminfo", "mem_used", info["MemTotal"] - info["MemAvailable"]))
    return out


def read_process_rss(pid: int, root: Path = Path("/")) -> int | None:
    """VmRSS of a process in bytes (psutil is not a dependency)."""
    try:
        text = (Path(root) / f"proc/{pid}/status").read_text()
    except OSError:
        return None
    value = parse_meminfo(text).get("VmRSS")
    return value


def session_members(pid: int, root: Path = Path("/")) -> list[int]:
    """Every process of the session ``pid`` leads: an engine and every process it started.

    Engines are started as session leaders (a local process with ``start_new_session``, a
    container's init), so this is vLLM's API server, engine core and workers together. Empty when
    the tree has no stat files (a fixture) or the process leads no session.
    """
    proc = Path(root) / "proc"
    try:
        entries = [e for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return []
    members = []
    for entry in entries:
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and fields[3] == str(pid):
            members.append(int(entry.name))
    return members


def session_total(pid: int, read: Callable[[int, Path], int | None], root: Path = Path("/")) -> int | None:
    """``read`` (a per-process figure: RSS, CPU ticks) summed over an engine and every process it
    started (:func:`session_members`); the one process's figure when it leads no session."""
    values = [v for m in session_members(pid, root) if (v := read(m, root)) is not None]
    return sum(values) if values else read(pid, root)


def read_engine_rss(pid: int, root: Path = Path("/")) -> int | None:
    """RSS of an engine and every process it started, in bytes."""
    return session_total(pid, read_process_rss, root)


def read_kernel_cmdline(root: Path = Path("/")) -> str | None:
    try:
        return (Path(root) / "proc/cmdline").read_text().strip() or None
    except OSError:
        return None


TTM_LIMIT_FILES = {
    "ttm": "sys/module/ttm/parameters/pages_limit",
    # DKMS drivers (amdgpu-dkms) bring their own TTM as the module amdttm (ROCm issue 5595)
    "amdttm": "sys/module/amdttm/parameters/pages_limit",
}


def read_ttm_limits(root: Path = Path("/")) -> dict[str, int | None]:
    """Both TTM modules' ``pages_limit`` (4 KiB pages): {"ttm": …, "amdttm": …}, None where absent."""
    return {name: _read_int(Path(root) / rel) for name, rel in TTM_LIMIT_FILES.items()}


def read_ttm_pages_limit(root: Path = Path("/")) -> int | None:
    """The TTM limit in force: amdttm's when the DKMS driver's module is loaded, else ttm's."""
    limits = read_ttm_limits(root)
    return limits["amdttm"] if limits["amdttm"] is not None else limits["ttm"]


KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
# HSA heap types of a KFD memory bank (kfd_crat.h): 1 and 2 are the GPU's frame buffer, public and
# private; on an APU that is the share of system memory the driver gives the GPU
FRAME_BUFFER_HEAPS = (1, 2)


def parse_properties(text: str) -> dict[str, int]:
    """A KFD topology ``properties`` file: ``name value`` per line (kfd_topology.c, sysfs_show_*_prop)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def read_kfd_device_total(root: Path = Path("/")) -> int | None:
    """The first GPU node's (``simd_count`` > 0) frame-buffer banks, summed: the device total the HIP
    runtime reports (hipDeviceProp totalGlobalMem, PyTorch's total_memory). None without a GPU node."""
    nodes = Path(root) / KFD_NODES
    if not nodes.is_dir():
        return None
    for node in sorted((n for n in nodes.iterdir() if n.name.isdigit()), key=lambda n: int(n.name)):
        try:
            props = parse_properties((node / "properties").read_text())
        except OSError:
            continue
        if props.get("simd_count", 0) <= 0:
            continue  # a CPU node
        total = 0
        banks = node / "mem_banks"
        for bank in sorted(banks.iterdir()) if banks.is_dir() else []:
            try:
                mem = parse_properties((bank / "properties").read_text())
            except OSError:
                continue
            if mem.get("heap_type") in FRAME_BUFFER_HEAPS:
                total += mem.get("size_in_bytes", 0)
        return total or None
    return None


def read_vbios(root: Path = Path("/")) -> str | None:
    """Each amdgpu card's ``device/vbios_version`` ("card1=113-STRXLGEN-001"), or None without one."""
    drm = Path(root) / "sys/class/drm"
    if not drm.is_dir():
        return None
    found = []
    for card in sorted((p for p in drm.iterdir() if CARD_NAME.match(p.name)), key=lambda p: int(p.name[4:])):
        try:
            version = (card / "device" / "vbios_version").read_text().strip()
        except OSError:
            continue
        if version:
            found.append(f"{card.name}={version}")
    return ", ".join(found) or None


def read_host_facts(root: Path = Path("/")) -> HostMemoryFacts:
    try:
        release = (Path(root) / "proc/sys/kernel/osrelease").read_text().strip() or None
    except OSError:
        release = None
    limits = read_ttm_limits(root)
    return HostMemoryFacts(
        read_kernel_cmdline(root),
        read_ttm_pages_limit(root),
        release,
        read_vbios(root),
        ttm_module_pages_limit=limits["ttm"],
        amdttm_pages_limit=limits["amdttm"],
        hip_device_total_bytes=read_kfd_device_total(root),
    )


def read_tree(root: Path = Path("/"), pid: int | None = None) -> list[Reading]:
    """All counters a root tree offers: sysfs cards, meminfo, and an engine's RSS (its whole session)
    when ``pid`` is given."""
    out = read_amdgpu_sysfs(root) + read_meminfo(root)
    if pid is not None:
        rss = read_engine_rss(pid, root)
        if rss is not None:
            out.append(Reading("process", "rss", rss))
    return out

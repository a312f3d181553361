"""Memory counters read from a root tree: amdgpu sysfs per card, /proc/meminfo, process RSS, host facts.

Readers take a ``root`` so a fixture tree stands in for ``/``; the Box's counters arrive as such a tree
from the probe container (probes.py). Why every source is kept apart: docs/architecture.md (memory).
"""

from __future__ import annotations

import re
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
class HostFacts:
    """Recorded with every run: what decides how much memory the engines may take."""

    kernel_cmdline: str | None
    ttm_pages_limit: int | None
    kernel_release: str | None
    vbios: str | None = None  # amdgpu VBIOS version(s), "card1=113-…"; None: no amdgpu card


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


def read_engine_rss(pid: int, root: Path = Path("/")) -> int | None:
    """RSS of an engine and every process it started, in bytes.

    Engines are started as session leaders (a local process with ``start_new_session``, a
    container's init), so "all of the engine's processes" is every process of the session ``pid``
    leads: vLLM's API server, engine core and workers together. Falls back to the one process when the
    tree has no stat files (a fixture) or the process is not a session leader.
    """
    total, found = 0, False
    proc = Path(root) / "proc"
    try:
        entries = [e for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        entries = []
    for entry in entries:
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and fields[3] == str(pid):
            rss = read_process_rss(int(entry.name), root)
            if rss is not None:
                total, found = total + rss, True
    return total if found else read_process_rss(pid, root)


def read_kernel_cmdline(root: Path = Path("/")) -> str | None:
    try:
        return (Path(root) / "proc/cmdline").read_text().strip() or None
    except OSError:
        return None


def read_ttm_pages_limit(root: Path = Path("/")) -> int | None:
    return _read_int(Path(root) / "sys/module/ttm/parameters/pages_limit")


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


def read_host_facts(root: Path = Path("/")) -> HostFacts:
    try:
        release = (Path(root) / "proc/sys/kernel/osrelease").read_text().strip() or None
    except OSError:
        release = None
    return HostFacts(read_kernel_cmdline(root), read_ttm_pages_limit(root), release, read_vbios(root))


def read_tree(root: Path = Path("/"), pid: int | None = None) -> list[Reading]:
    """All counters a root tree offers: sysfs cards, meminfo, and an engine's RSS (its whole session)
    when ``pid`` is given."""
    out = read_amdgpu_sysfs(root) + read_meminfo(root)
    if pid is not None:
        rss = read_engine_rss(pid, root)
        if rss is not None:
            out.append(Reading("process", "rss", rss))
    return out

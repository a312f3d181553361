"""The GPU's power, shader clock, temperature and load, read in every memory sample beside the memory.

On a Strix Halo APU ``amd-smi`` reports power, clocks and load as N/A while amdgpu exposes them in
sysfs, so the files are read directly, per card (``/sys/class/drm/card*/device``):

- ``hwmon/hwmon*/power1_average`` (older kernels) or ``power1_input``: microwatts; on an APU the
  package (PPT) figure, so it includes the CPU cores the engine keeps busy;
- ``hwmon/hwmon*/freq1_input``: the shader clock in Hz; ``pp_dpm_sclk``: its DPM levels
  (``1: 2900Mhz *``), whose top one is the clock a throttle is measured against;
- ``hwmon/hwmon*/temp1_input`` and ``temp1_crit``: millidegrees Celsius;
- ``gpu_busy_percent``: the GPU's load, 0-100.

Where no card has a power counter (host local is usually a VM), the RAPL energy counters are read
instead where readable (``/sys/class/powercap/intel-rapl:N/energy_uj``, microjoules, the CPU package).

Each figure is a :class:`Reading` whose source names the file that gave it (``gpu:card1:power1_average``,
``rapl:intel-rapl:0``) and whose metric names the unit (``power_uw``, ``sclk_hz``, ``sclk_max_hz``,
``temp_mdegc``, ``temp_crit_mdegc``, ``busy_pct``, ``energy_uj``). Stored as memory samples, the
memory summaries leave them out (they read ``sysfs:``, ``meminfo`` and ``process`` sources only).
"""

from __future__ import annotations

import re
from pathlib import Path

from strix_pipeline.memory.tree import CARD_NAME, Reading

GPU_SOURCE = "gpu:"
RAPL_SOURCE = "rapl:"
_DPM_LEVEL = re.compile(r"^\s*\d+:\s*(\d+)\s*mhz", re.IGNORECASE)
# the power file first found wins: power1_average where the kernel still has it, else power1_input
POWER_FILES = ("power1_average", "power1_input")
_HWMON_FILES = (("freq1_input", "sclk_hz"), ("temp1_input", "temp_mdegc"), ("temp1_crit", "temp_crit_mdegc"))
# the package zones only (intel-rapl:0), not their sub-zones (intel-rapl:0:0): those are inside them
_RAPL_ZONE = re.compile(r"intel-rapl:\d+$")
# the paths the Box's probe container prints (memory/probes.py), under its /host mount
PROBE_PATHS = (
    "/host/sys/class/drm/card*/device/hwmon/hwmon*/power1_average",
    "/host/sys/class/drm/card*/device/hwmon/hwmon*/power1_input",
    "/host/sys/class/drm/card*/device/hwmon/hwmon*/freq1_input",
    "/host/sys/class/drm/card*/device/hwmon/hwmon*/temp1_input",
    "/host/sys/class/drm/card*/device/hwmon/hwmon*/temp1_crit",
    "/host/sys/class/drm/card*/device/gpu_busy_percent",
    "/host/sys/class/drm/card*/device/pp_dpm_sclk",
    "/host/sys/class/powercap/intel-rapl:*/energy_uj",
)


def _read_int(path: Path) -> int | None:
    try:
        parts = path.read_text().split()
        return int(float(parts[0])) if parts else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def hwmon_dir(device: Path) -> Path | None:
    """A card's hwmon directory (``device/hwmon/hwmon<N>``; N moves between boots), None: it has none."""
    base = device / "hwmon"
    found = sorted(base.glob("hwmon*")) if base.is_dir() else []
    return found[0] if found else None


def dpm_max_hz(text: str) -> int | None:
    """The top level of a ``pp_dpm_sclk`` listing (``0: 600Mhz``, ``1: 2900Mhz *``) in Hz."""
    levels = [int(m.group(1)) for line in text.splitlines() if (m := _DPM_LEVEL.match(line))]
    return max(levels) * 1_000_000 if levels else None


def cards(root: Path) -> list[Path]:
    """The DRM cards under ``root`` (``card1``, never a connector like ``card1-eDP-1``), in number order."""
    drm = Path(root) / "sys/class/drm"
    if not drm.is_dir():
        return []
    return sorted((p for p in drm.iterdir() if CARD_NAME.match(p.name)), key=lambda p: int(p.name[4:]))


def read_card(card: Path) -> list[Reading]:
    """One card's figures; none for a card without the files (a framebuffer)."""
    dev, out = card / "device", []
    hw = hwmon_dir(dev)
    if hw is not None:
        for name in POWER_FILES:
            if (v := _read_int(hw / name)) is not None:
                out.append(Reading(f"{GPU_SOURCE}{card.name}:{name}", "power_uw", v))
                break
        for name, metric in _HWMON_FILES:
            if (v := _read_int(hw / name)) is not None:
                out.append(Reading(f"{GPU_SOURCE}{card.name}:{name}", metric, v))
    if (v := _read_int(dev / "gpu_busy_percent")) is not None:
        out.append(Reading(f"{GPU_SOURCE}{card.name}:gpu_busy_percent", "busy_pct", v))
    try:
        top = dpm_max_hz((dev / "pp_dpm_sclk").read_text())
    except (OSError, UnicodeDecodeError):
        top = None
    if top is not None:
        out.append(Reading(f"{GPU_SOURCE}{card.name}:pp_dpm_sclk", "sclk_max_hz", top))
    return out


def read_rapl(root: Path) -> list[Reading]:
    """The RAPL package energy counters where readable (often root-only, absent in most VMs)."""
    base = Path(root) / "sys/class/powercap"
    if not base.is_dir():
        return []
    zones = sorted(p for p in base.iterdir() if _RAPL_ZONE.match(p.name))
    return [
        Reading(f"{RAPL_SOURCE}{z.name}", "energy_uj", v)
        for z in zones
        if (v := _read_int(z / "energy_uj")) is not None
    ]


def read_gpu_counters(root: Path = Path("/")) -> list[Reading]:
    """Every card's power, clocks, temperature and load; RAPL's energy where no card gives power."""
    out = [r for card in cards(root) for r in read_card(card)]
    if not any(r.metric == "power_uw" for r in out):
        out += read_rapl(root)
    return out

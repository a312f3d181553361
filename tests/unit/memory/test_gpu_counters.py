"""The GPU's power, clock, temperature and load read beside the memory counters: from the Box's fixture
sysfs tree (strix-halo facts: power1_* in microwatts, temp*_input in millidegrees, freq*_input in Hz,
gpu_busy_percent, pp_dpm_sclk), the file that gave each figure named, RAPL only where no card gives
power, and the probe container's script finding the same files through its /host mount."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from support.paths import FIXTURES

from strix_pipeline import memory
from strix_pipeline.memory import gpu_counters
from strix_pipeline.memory.probes import _PROBE_SCRIPT
from strix_pipeline.memory.tree import Reading

ROOT = FIXTURES / "sysroot"
CARD1 = "sys/devices/pci0000:00/0000:00:08.1/0000:c5:00.0"


def by_key(readings: list[Reading]) -> dict[tuple[str, str], int]:
    return {(r.source, r.metric): r.value_bytes for r in readings}


BOX = {
    # power1_average wins over power1_input where the kernel has both
    ("gpu:card1:power1_average", "power_uw"): 118_000_000,
    ("gpu:card1:freq1_input", "sclk_hz"): 2_900_000_000,
    ("gpu:card1:temp1_input", "temp_mdegc"): 61_000,
    ("gpu:card1:temp1_crit", "temp_crit_mdegc"): 100_000,
    ("gpu:card1:gpu_busy_percent", "busy_pct"): 97,
    ("gpu:card1:pp_dpm_sclk", "sclk_max_hz"): 2_900_000_000,
}


def test_the_boxs_tree_gives_power_clock_temperature_and_load_with_their_files() -> None:
    # card0 (a framebuffer) and card2 (no hwmon, no load file) give nothing; no RAPL beside a GPU's power
    assert by_key(gpu_counters.read_gpu_counters(ROOT)) == BOX


def test_power1_input_where_the_kernel_has_no_average(tmp_path: Path) -> None:
    root = tmp_path / "r"
    shutil.copytree(ROOT, root, symlinks=True)
    (root / CARD1 / "hwmon/hwmon4/power1_average").unlink()
    got = by_key(gpu_counters.read_gpu_counters(root))
    assert got[("gpu:card1:power1_input", "power_uw")] == 117_500_000
    assert not any(src.endswith("power1_average") for src, _ in got)


def test_rapl_only_where_no_card_gives_power(tmp_path: Path) -> None:
    for zone, uj in (("intel-rapl:0", "123456789"), ("intel-rapl:0:0", "5"), ("intel-rapl:1", "oops")):
        (tmp_path / "sys/class/powercap" / zone).mkdir(parents=True)
        (tmp_path / "sys/class/powercap" / zone / "energy_uj").write_text(uj + "\n")
    # the package zone only (its sub-zones are inside it), and an unreadable value is no reading
    assert gpu_counters.read_gpu_counters(tmp_path) == [Reading("rapl:intel-rapl:0", "energy_uj", 123456789)]
    assert gpu_counters.read_gpu_counters(tmp_path / "nothing") == []


def test_dpm_listing_top_level() -> None:
    assert gpu_counters.dpm_max_hz("0: 600Mhz \n1: 1800Mhz\n2: 2900Mhz *\n") == 2_900_000_000
    assert gpu_counters.dpm_max_hz("S: 19Mhz *\n") is None  # a sleep state is no DPM level
    assert gpu_counters.dpm_max_hz("") is None


def test_the_tree_probe_samples_them_beside_memory_and_the_summary_leaves_them_out() -> None:
    sampler = memory.MemorySampler(memory.TreeProbe(ROOT), "r1", interval_s=60)
    sampler.start()
    sampler.set_phase("idle")
    sampler.stop()
    got = {(s.phase, s.source, s.metric) for s in sampler.samples}
    assert ("baseline", "gpu:card1:power1_average", "power_uw") in got
    assert ("idle", "gpu:card1:gpu_busy_percent", "busy_pct") in got
    s = memory.summarize(sampler.samples)
    assert s.basis == "gpu" and s.held_bytes == 0
    assert s.baseline_bytes == 1073741824 + 268435456 + 524288000 + 33554432  # memory only


def test_the_probe_containers_script_finds_the_same_files(tmp_path: Path) -> None:
    """The script the Box's probe container runs, with its /host mount played by the fixture tree: the
    GPU files ride in the same exec as the memory ones and read back the same."""
    host = tmp_path / "host"
    shutil.copytree(ROOT, host, symlinks=True)
    out = subprocess.run(
        ["sh", "-c", _PROBE_SCRIPT.replace("/host/", f"{host}/")], capture_output=True, text=True, check=True
    ).stdout.replace(f"{host}/", "/host/")
    files = memory.parse_probe_output(out)
    assert "sys/class/drm/card1/device/pp_dpm_sclk" in files
    laid = memory.lay_out_tree(files, tmp_path / "laid")
    assert by_key(gpu_counters.read_gpu_counters(laid)) == BOX

"""The host's share of a pass's noise: what else the machine did while it measured.

Two snapshots, one before a pass and one after, and the difference between them:

- **steal**: CPU time the hypervisor gave to other guests (``/proc/stat``'s ``steal`` column), as a
  share of all CPU time in the pass; a neighbour on shared hardware shows here first;
- **outside**: CPU used by anything other than the engine and the client -- ``/proc/stat``'s busy
  time minus the utime + stime of the engine's processes (``/proc/<pid>/stat`` of every process of
  its session: vLLM's engine core and worker too) and the client's own (this process: the load
  generator runs in it), as a share of all CPU time;
- **CPU frequency** where ``cpufreq`` is readable (a 2-core cloud guest usually has none);
- **the probe's slowdown**: a fixed job timed before and after the pass (hosts/probes/cpu.py) against
  the fastest of the session: a neighbour on the same cores or memory, which no counter shows;
- on a Box, each amdgpu card's clocks, temperature and power (hwmon) and its power profile
  (``power_dpm_force_performance_level``), read from the same tree: ``/`` here, or a fixture tree, or
  the files a Box's probe laid out (memory/probes.py ``lay_out_tree``).

A pass is *busy* when steal, outside or the probe's slowdown exceeds the thresholds of ``[analysis]``
(``busy_steal_pct``, ``busy_outside_pct``, ``busy_probe_pct``): the runner marks it, keeps it out of
the verdicts and runs its pair again.
Pure readers over a root path; nothing here starts or stops a process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from strix_pipeline.memory.gpu_counters import POWER_FILES, cards, hwmon_dir
from strix_pipeline.memory.tree import session_total


@dataclass(frozen=True)
class CpuTimes:
    """The ``cpu`` line of /proc/stat in clock ticks: all of it, the idle part, the stolen part."""

    total: int
    idle: int  # idle + iowait: time no one used
    steal: int


@dataclass(frozen=True)
class GpuState:
    """One amdgpu card at one moment; None where the file is missing."""

    card: str
    sclk_mhz: float | None = None
    mclk_mhz: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    performance_level: str | None = None  # power_dpm_force_performance_level: auto, high, manual, ...


@dataclass(frozen=True)
class Snapshot:
    """What :func:`snapshot` read at one moment."""

    cpu: CpuTimes | None
    engine_ticks: int | None  # utime + stime of the engine's processes (its session)
    client_ticks: int | None  # utime + stime of this process (the load generator)
    cpu_khz: tuple[int, ...] = ()
    gpus: tuple[GpuState, ...] = ()


@dataclass(frozen=True)
class HostNoise:
    """A pass's host noise: between its two snapshots."""

    steal_pct: float | None
    outside_pct: float | None  # CPU used outside the engine and the client, % of all CPU time
    engine_pct: float | None  # the engine's share, for scale
    cpu_mhz: float | None  # the mean of the cores' frequencies at both ends; None: not readable
    gpus: tuple[GpuState, ...] = field(default=())  # at the end of the pass
    busy: str | None = None  # why the pass counts as busy; None: a quiet host
    # the slower of the pass's probes against the session's fastest, in %; None: not probed
    probe_slowdown_pct: float | None = None

    def as_dict(self) -> dict:
        return {
            "steal_pct": self.steal_pct,
            "outside_pct": self.outside_pct,
            "engine_pct": self.engine_pct,
            "cpu_mhz": self.cpu_mhz,
            "gpus": [g.__dict__ for g in self.gpus],
            "busy": self.busy,
            "probe_slowdown_pct": self.probe_slowdown_pct,
        }

    def describe(self) -> str:
        def pct(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1f} %"

        parts = [f"steal {pct(self.steal_pct)}", f"outside {pct(self.outside_pct)}"]
        if self.probe_slowdown_pct is not None:
            parts.append(f"probe +{self.probe_slowdown_pct:.1f} %")
        if self.cpu_mhz is not None:
            parts.append(f"CPU {self.cpu_mhz:.0f} MHz")
        for g in self.gpus:
            bits = [
                f"{label} {v:.0f}{unit}"
                for label, v, unit in (
                    ("sclk", g.sclk_mhz, " MHz"),
                    ("", g.temp_c, " °C"),
                    ("", g.power_w, " W"),
                )
                if v is not None
            ]
            if g.performance_level:
                bits.append(g.performance_level)
            parts.append(f"{g.card} " + " ".join(b.strip() for b in bits))
        return ", ".join(parts) + (f" -- BUSY: {self.busy}" if self.busy else "")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_number(path: Path) -> float | None:
    text = _read(path)
    try:
        return float(text.split()[0]) if text and text.split() else None
    except ValueError:
        return None


def parse_proc_stat(text: str) -> CpuTimes:
    """The aggregate ``cpu`` line: user nice system idle iowait irq softirq steal [guest guest_nice].
    guest time is already inside user (the kernel counts it twice), so it is left out of the total."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            try:
                v = [int(x) for x in parts[1:9]] + [0] * (8 - len(parts[1:9]))
            except ValueError as e:
                raise ValueError(f"/proc/stat: the cpu line is not numbers: {line!r}") from e
            return CpuTimes(total=sum(v), idle=v[3] + v[4], steal=v[7])
    raise ValueError("/proc/stat: no aggregate 'cpu' line")


def read_cpu_times(root: Path = Path("/")) -> CpuTimes | None:
    text = _read(Path(root) / "proc/stat")
    return parse_proc_stat(text) if text is not None else None


def parse_pid_stat(text: str) -> int:
    """utime + stime (ticks) of a /proc/<pid>/stat line; the command name in parentheses may hold
    spaces, so the fields are counted after its closing parenthesis (utime is field 14)."""
    rest = text.rpartition(")")[2].split()
    try:
        return int(rest[11]) + int(rest[12])
    except (IndexError, ValueError) as e:
        raise ValueError(f"/proc/<pid>/stat: no utime/stime in {text[:80]!r}") from e


def read_process_ticks(pid: int | None, root: Path = Path("/")) -> int | None:
    """The CPU ticks a process used so far; None when it is gone or unreadable."""
    if pid is None:
        return None
    text = _read(Path(root) / f"proc/{pid}/stat")
    return parse_pid_stat(text) if text else None


def read_engine_ticks(pid: int | None, root: Path = Path("/")) -> int | None:
    """The CPU ticks an engine and every process it started used so far (memory/tree.session_members:
    vLLM's engine core and worker do its work, not the API server that was started); the one process
    when it leads no session."""
    return None if pid is None else session_total(pid, read_process_ticks, root)


def read_cpu_khz(root: Path = Path("/")) -> tuple[int, ...]:
    """Each core's current frequency (kHz) where cpufreq is readable; () where it is not."""
    base = Path(root) / "sys/devices/system/cpu"
    if not base.is_dir():
        return ()
    out = []
    for f in sorted(base.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        v = _read_number(f)
        if v is not None and v > 0:
            out.append(int(v))
    return tuple(out)


def read_gpus(root: Path = Path("/")) -> tuple[GpuState, ...]:
    """Every amdgpu card's clocks, temperature, power and power profile from sysfs.

    hwmon's ``freq1_input`` is the shader clock and ``freq2_input`` the memory clock, in Hz;
    ``temp1_input`` is millidegrees; ``power1_average`` (older kernels) or ``power1_input`` is
    microwatts. A card with none of them (a framebuffer) is left out.
    """
    out = []
    for card in cards(root):
        dev = card / "device"
        hw = hwmon_dir(dev)

        def num(name: str, scale: float, hw: Path | None = hw) -> float | None:
            v = _read_number(hw / name) if hw is not None else None
            return None if v is None else v * scale

        power = next((v for name in POWER_FILES if (v := num(name, 1e-6)) is not None), None)
        level = _read(dev / "power_dpm_force_performance_level")
        state = GpuState(
            card=card.name,
            sclk_mhz=num("freq1_input", 1e-6),
            mclk_mhz=num("freq2_input", 1e-6),
            temp_c=num("temp1_input", 1e-3),
            power_w=power,
            performance_level=level.strip() if level else None,
        )
        if any(v is not None for v in (state.sclk_mhz, state.temp_c, state.power_w, state.performance_level)):
            out.append(state)
    return tuple(out)


def snapshot(engine_pid: int | None, root: Path = Path("/"), *, client_pid: int | None = None) -> Snapshot:
    """The host at one moment; ``client_pid`` defaults to this process (the load generator's)."""
    return Snapshot(
        cpu=read_cpu_times(root),
        engine_ticks=read_engine_ticks(engine_pid, root),
        client_ticks=read_process_ticks(client_pid or os.getpid(), root),
        cpu_khz=read_cpu_khz(root),
        gpus=read_gpus(root),
    )


def noise_between(
    before: Snapshot,
    after: Snapshot,
    *,
    busy_steal_pct: float,
    busy_outside_pct: float,
    probe_slowdown_pct: float | None = None,
    busy_probe_pct: float = 10.0,
) -> HostNoise:
    """The pass's noise from its two snapshots (and its probes' slowdown, hosts/probes/cpu.py, when
    it was probed), and whether it counts as busy.

    The engine's ticks before the pass may be missing (the snapshot was taken before it started):
    then all its ticks so far are the pass's, which is what a fresh server per run means.
    """
    steal = outside = engine = None
    if before.cpu and after.cpu and after.cpu.total > before.cpu.total:
        total = after.cpu.total - before.cpu.total
        busy_ticks = total - (after.cpu.idle - before.cpu.idle) - (after.cpu.steal - before.cpu.steal)
        steal = 100.0 * (after.cpu.steal - before.cpu.steal) / total
        eng = (
            (after.engine_ticks or 0) - (before.engine_ticks or 0) if after.engine_ticks is not None else None
        )
        cli = (
            after.client_ticks - before.client_ticks
            if after.client_ticks is not None and before.client_ticks is not None
            else None
        )
        if eng is not None and cli is not None:
            engine = 100.0 * eng / total
            # ticks are counted per CPU and per process at different moments: a few ticks' skew
            # can make the rest slightly negative on an idle host
            outside = max(0.0, 100.0 * (busy_ticks - eng - cli) / total)
    freqs = [*before.cpu_khz, *after.cpu_khz]
    mhz = sum(freqs) / len(freqs) / 1000 if freqs else None
    reasons = []
    if steal is not None and steal > busy_steal_pct:
        reasons.append(f"{steal:.1f} % CPU stolen (threshold {busy_steal_pct:g} %)")
    if outside is not None and outside > busy_outside_pct:
        reasons.append(
            f"{outside:.1f} % CPU used outside the engine and client (threshold {busy_outside_pct:g} %)"
        )
    if probe_slowdown_pct is not None and probe_slowdown_pct > busy_probe_pct:
        reasons.append(
            f"the CPU probe ran {probe_slowdown_pct:.1f} % slower than the session's fastest "
            f"(threshold {busy_probe_pct:g} %)"
        )
    return HostNoise(steal, outside, engine, mhz, after.gpus, "; ".join(reasons) or None, probe_slowdown_pct)

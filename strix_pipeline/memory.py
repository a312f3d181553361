"""Memory counters of a host, sampled in the background during a run, and the run's memory summary.

On unified memory no single counter is trusted (one setup showed `mem_info_gtt_used` near 0 after
loading 51 GiB), so every source is kept as its own sample: amdgpu sysfs per card, /proc/meminfo,
the engine process's RSS on the local host, and rocm-smi / amd-smi JSON when a caller has it.

Readers take a ``root`` so a fixture tree stands in for ``/``; the Box is read through a tiny probe
container with the host's /sys and /proc mounted read-only (works over ``ssh://`` Docker hosts),
whose output is laid out as such a tree and read by the same code.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from strix_pipeline.records import MemorySample

log = logging.getLogger(__name__)

SYSFS_FILES = (
    "mem_info_vram_total",
    "mem_info_vram_used",
    "mem_info_vis_vram_total",
    "mem_info_vis_vram_used",
    "mem_info_gtt_total",
    "mem_info_gtt_used",
)
_CARD = re.compile(r"^card(\d+)$")  # card1-eDP-1 and renderD128 are not cards
_UNITS = {"B": 1, "KB": 1024, "KIB": 1024, "MB": 1024**2, "MIB": 1024**2, "GB": 1024**3, "GIB": 1024**3}
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


# ---------------------------------------------------------------- readers of a root tree


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
    cards = sorted((p for p in drm.iterdir() if _CARD.match(p.name)), key=lambda p: int(p.name[4:]))
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
        out[key.strip()] = value * _UNITS.get(unit, 1)
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
    for card in sorted((p for p in drm.iterdir() if _CARD.match(p.name)), key=lambda p: int(p.name[4:])):
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


# ---------------------------------------------------------------- rocm-smi / amd-smi JSON

# Each metric as the two tools name it: (rocm-smi's key, amd-smi's key), None where the tool has no
# such field. One table, so that the cross-check compares the same quantity under both names.
_SMI_KEYS: dict[str, tuple[str | None, str]] = {
    "vram_total": ("VRAM Total Memory (B)", "total_vram"),
    "vram_used": ("VRAM Total Used Memory (B)", "used_vram"),
    "vram_free": (None, "free_vram"),
    "vis_vram_total": ("Visible VRAM Total Memory (B)", "total_visible_vram"),
    "vis_vram_used": ("Visible VRAM Total Used Memory (B)", "used_visible_vram"),
    "vis_vram_free": (None, "free_visible_vram"),
    "gtt_total": ("GTT Total Memory (B)", "total_gtt"),
    "gtt_used": ("GTT Total Used Memory (B)", "used_gtt"),
    "gtt_free": (None, "free_gtt"),
}
_ROCM_SMI_KEYS = {rocm: metric for metric, (rocm, _) in _SMI_KEYS.items() if rocm is not None}
_AMD_SMI_KEYS = {amd: metric for metric, (_, amd) in _SMI_KEYS.items()}


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value.strip()))
        except ValueError:
            return None  # "N/A"
    return None


def _smi_readings(
    source: str, fields: dict[str, Any], keys: dict[str, str], to_bytes: Callable[[Any], int | None]
) -> list[Reading]:
    """One device's block of an SMI tool's JSON as readings; a field that is not a number is left out."""
    return [
        Reading(source, metric, v)
        for key, metric in keys.items()
        if (v := to_bytes(fields.get(key))) is not None
    ]


def parse_rocm_smi_json(text: str) -> list[Reading]:
    """``rocm-smi --showmeminfo vram gtt --json``: {"card0": {"VRAM Total Memory (B)": "…", …}}.

    Values are strings of bytes; other keys (Card SKU, GFX Version, a "system" block) are ignored.
    """
    data = json.loads(text)
    out: list[Reading] = []
    if not isinstance(data, dict):
        return out
    for card, fields in data.items():
        if not _CARD.match(str(card)) or not isinstance(fields, dict):
            continue
        out += _smi_readings(f"rocm-smi:{card}", fields, _ROCM_SMI_KEYS, _int_or_none)
    return out


def _amd_smi_bytes(field: Any) -> int | None:
    if isinstance(field, dict):
        value = _int_or_none(field.get("value"))
        if value is None:
            return None
        # amd-smi's "MB" is 2**20 bytes (it divides bytes by 1024*1024)
        return value * _UNITS.get(str(field.get("unit", "B")).upper(), 1)
    return None  # "N/A" or a bare number without a unit: not trusted


def parse_amd_smi_json(text: str) -> list[Reading]:
    """``amd-smi metric --mem-usage --json``: older builds give a list of GPUs, newer ones
    ``{"gpu_data": [...]}``; a field may be ``"N/A"`` (as a value or as the whole field)."""
    data = json.loads(text)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    out: list[Reading] = []
    if not isinstance(gpus, list):
        return out
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            continue
        index = gpu.get("gpu", i)
        usage = gpu.get("mem_usage")
        if not isinstance(usage, dict):
            continue
        out += _smi_readings(f"amd-smi:{index}", usage, _AMD_SMI_KEYS, _amd_smi_bytes)
    return out


# The tools that read the GPU's memory themselves: the cross-check of the sysfs counters, since one
# counter alone is not to be trusted on unified memory (DESIGN.md, strix-halo-facts.md).
SMI_COMMANDS: dict[str, tuple[list[str], Callable[[str], list[Reading]]]] = {
    "rocm-smi": (["rocm-smi", "--showmeminfo", "vram", "gtt", "--json"], parse_rocm_smi_json),
    "amd-smi": (["amd-smi", "metric", "--mem-usage", "--json"], parse_amd_smi_json),
}
SMI_PHASES = ("baseline", "idle", "after_stop")  # read once at each: before start, after load, after stop


def read_smi(run: Callable[[list[str]], tuple[int, str]]) -> list[Reading]:
    """Every SMI tool ``run`` (argv -> exit code, output) can execute; a missing or failing tool
    gives nothing (it is "not available" there, not zero)."""
    out: list[Reading] = []
    for argv, parse in SMI_COMMANDS.values():
        try:
            code, text = run(argv)
            if code == 0:
                out += parse(text)
        except Exception as e:  # noqa: BLE001 - no tool, no device, bad JSON: nothing to compare
            log.debug("%s: %s", argv[0], e)
    return out


def run_here(argv: list[str]) -> tuple[int, str]:
    """Run an SMI tool on this machine (the `local` host), if it is installed."""
    import shutil
    import subprocess

    if not shutil.which(argv[0]):
        return 127, ""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return proc.returncode, proc.stdout


def counter_disagreements(
    samples: Iterable[MemorySample], *, tolerance_bytes: int = 2**29, tolerance_frac: float = 0.05
) -> list[str]:
    """Where the SMI tools and the sysfs counters disagree about VRAM + GTT in use, per phase
    (median of each); beyond max(tolerance_bytes, tolerance_frac of the larger) it is flagged."""
    per: dict[tuple[str, str], dict[datetime, int]] = {}
    for m in samples:
        if m.phase in SMI_PHASES and m.metric in ("vram_used", "gtt_used"):
            tool = m.source.split(":", 1)[0]  # "sysfs", "rocm-smi", "amd-smi"
            at = per.setdefault((m.phase, tool), {})
            at[m.sampled_at] = at.get(m.sampled_at, 0) + m.value_bytes
    out = []
    for phase in SMI_PHASES:
        sysfs = per.get((phase, "sysfs"))
        if not sysfs:
            continue
        ref = statistics.median(sysfs.values())
        for tool in ("rocm-smi", "amd-smi"):
            seen = per.get((phase, tool))
            if not seen:
                continue
            other = statistics.median(seen.values())
            if abs(other - ref) > max(tolerance_bytes, tolerance_frac * max(other, ref)):
                out.append(f"at {phase}: sysfs {ref / 2**30:.2f} GiB vs {tool} {other / 2**30:.2f} GiB")
    return out


# ---------------------------------------------------------------- probes


class MemoryProbe(Protocol):
    def read(self) -> list[Reading]: ...

    def host_facts(self) -> HostFacts: ...

    def close(self) -> None: ...


class TreeProbe:
    """Reads a root tree directly: ``/`` on the machine running the pipeline, or a fixture tree."""

    def __init__(self, root: Path = Path("/"), pid: int | None = None) -> None:
        self.root = Path(root)
        self.pid = pid

    def read(self) -> list[Reading]:
        return read_tree(self.root, self.pid)

    def host_facts(self) -> HostFacts:
        return read_host_facts(self.root)

    def close(self) -> None:
        pass


class CombinedProbe:
    """Several probes as one: e.g. the host probe plus rocm-smi inside the engine container.

    A failing member is logged and skipped, so one broken counter does not cost the others.
    """

    def __init__(self, *probes: MemoryProbe, extra: Callable[[], list[Reading]] | None = None) -> None:
        self.probes = list(probes)
        self.extra = extra  # e.g. DockerEngine.smi_readings, set once the engine runs

    def read(self) -> list[Reading]:
        out: list[Reading] = []
        for p in self.probes:
            try:
                out += p.read()
            except Exception as e:
                log.warning("memory probe %s failed: %s", type(p).__name__, e)
        if self.extra is not None:
            try:
                out += self.extra()
            except Exception as e:
                log.warning("extra memory reading failed: %s", e)
        if not out and self.probes:
            raise RuntimeError("every memory probe failed")
        return out

    def host_facts(self) -> HostFacts:
        return self.probes[0].host_facts() if self.probes else HostFacts(None, None, None)

    def close(self) -> None:
        for p in self.probes:
            p.close()


PROBE_NAME = "strix-memory-probe"

# What the probe container prints: each readable file under a "@@@ <path>" header.
_PROBE_SCRIPT = (
    "for f in /host/sys/class/drm/card*/device/mem_info_* /host/sys/class/drm/card*/device/vbios_version "
    "/host/proc/meminfo /host/proc/cmdline "
    "/host/proc/sys/kernel/osrelease /host/sys/module/ttm/parameters/pages_limit; do "
    '[ -r "$f" ] && { echo "@@@ $f"; cat "$f"; }; done; true'
)


def parse_probe_output(text: str) -> dict[str, str]:
    """``@@@ /host/<path>`` headers followed by the file's content -> {"<path>": content}."""
    files: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("@@@ "):
            if current is not None:
                files[current] = "\n".join(lines) + "\n"
            current = line[4:].strip().removeprefix("/host/")
            lines = []
        elif current is not None:
            lines.append(line)
    if current is not None:
        files[current] = "\n".join(lines) + "\n"
    return files


def materialize(files: dict[str, str], root: Path) -> Path:
    """Lay files out under ``root`` so the tree readers can read them."""
    for rel, content in files.items():
        if ".." in Path(rel).parts:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


class DockerProbe:
    """Reads a Docker host's counters through a long-lived tiny container (/sys, /proc read-only).

    ``image`` needs ``sh`` and ``cat`` (busybox is enough). The container is labelled
    ``strix.probe=true`` and never ``strix.managed``: the leftover guard leaves it alone. It is
    removed by :meth:`close` (call it when the run ends); a probe of the same name left by a killed
    run is removed when the next one starts. ``sys_path``/``proc_path`` exist so tests can mount a fixture tree.
    """

    def __init__(
        self,
        client: Any,
        image: str,
        *,
        sys_path: str = "/sys",
        proc_path: str = "/proc",
        extra_volumes: dict[str, dict[str, str]] | None = None,
        name: str | None = PROBE_NAME,
    ) -> None:
        if name:
            # one probe per host: a probe left by a killed run is replaced, never duplicated
            try:
                client.containers.get(name).remove(force=True)
            except Exception:
                pass
        volumes = {
            sys_path: {"bind": "/host/sys", "mode": "ro"},
            proc_path: {"bind": "/host/proc", "mode": "ro"},
        }
        volumes.update(extra_volumes or {})
        self.container = client.containers.run(
            image,
            command=["sh", "-c", "while true; do sleep 3600; done"],
            detach=True,
            name=name,
            network_mode="host",
            volumes=volumes,
            labels={"strix.probe": "true"},
            auto_remove=False,
        )
        self._lock = threading.Lock()

    def exec(self, argv: list[str]) -> tuple[int, str]:
        with self._lock:
            result = self.container.exec_run(argv, demux=False)
        output = result.output.decode("utf-8", "replace") if result.output else ""
        return result.exit_code, output

    def files(self) -> dict[str, str]:
        code, output = self.exec(["sh", "-c", _PROBE_SCRIPT])
        if code != 0:
            raise RuntimeError(f"memory probe exited {code}: {output[-500:]}")
        return parse_probe_output(output)

    def read(self) -> list[Reading]:
        with tempfile.TemporaryDirectory(prefix="strix-probe-") as tmp:
            return read_tree(materialize(self.files(), Path(tmp)))

    def host_facts(self) -> HostFacts:
        with tempfile.TemporaryDirectory(prefix="strix-probe-") as tmp:
            return read_host_facts(materialize(self.files(), Path(tmp)))

    def close(self) -> None:
        try:
            self.container.remove(force=True)
        except Exception as e:  # a probe that is already gone is fine
            log.debug("probe container removal: %s", e)


# ---------------------------------------------------------------- background sampler


class MemorySampler:
    """Samples a probe every ``interval_s`` in a thread, stamped with the current phase.

    Switching phase takes a sample at once, so every phase has at least one reading even when it
    is shorter than the interval. A failing probe is logged and counted, never fatal to the run.
    """

    def __init__(
        self,
        probe: MemoryProbe,
        run_id: str,
        interval_s: float = 1.0,
        phase: str = "baseline",
        *,
        max_samples: int = 500_000,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        smi: Callable[[], list[Reading]] | None = None,
    ) -> None:
        self.probe = probe
        self.smi = smi  # read at each of SMI_PHASES beside the probe (replaceable, like the probe)
        self.run_id = run_id
        self.interval_s = interval_s
        self.phase = phase
        self.max_samples = max_samples
        self.errors = 0
        self._clock = clock
        self._samples: list[MemorySample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_now(self, *, with_smi: bool = False) -> list[MemorySample]:
        try:
            readings = self.probe.read()
        except Exception as e:
            self.errors += 1
            log.warning("memory probe failed (%d so far): %s", self.errors, e)
            return []
        if with_smi and self.smi is not None:
            readings = readings + self.smi()
        at = self._clock()
        with self._lock:
            phase = self.phase
            batch = [
                MemorySample(self.run_id, at, phase, r.source, r.metric, r.value_bytes) for r in readings
            ]
            room = self.max_samples - len(self._samples)
            self._samples.extend(batch[: max(room, 0)])
        return batch

    def set_phase(self, phase: str, *, sample: bool = True) -> None:
        with self._lock:
            self.phase = phase
        if sample:
            self.sample_now(with_smi=phase in SMI_PHASES)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_now()

    def start(self) -> MemorySampler:
        if self._thread is None:
            self.sample_now(with_smi=self.phase in SMI_PHASES)
            self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.interval_s * 2))
            self._thread = None

    @property
    def samples(self) -> list[MemorySample]:
        with self._lock:
            return list(self._samples)

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------- summary


def in_use(readings: Iterable[Reading | MemorySample], basis: str) -> int | None:
    """One number for 'memory in use' from one instant's readings.

    ``gpu``: VRAM + GTT used summed over sysfs cards (DESIGN's C5 measure); ``process``: the
    engine's RSS; ``meminfo``: MemTotal - MemAvailable. None when the basis has no reading.
    """
    items = list(readings)
    if basis == "gpu":
        vals = [
            r.value_bytes
            for r in items
            if r.source.startswith("sysfs:") and r.metric in ("vram_used", "gtt_used")
        ]
    elif basis == "process":
        vals = [r.value_bytes for r in items if r.source == "process" and r.metric == "rss"]
    elif basis == "meminfo":
        vals = [r.value_bytes for r in items if r.source == "meminfo" and r.metric == "mem_used"]
    else:
        raise ValueError(f"unknown memory basis {basis!r}")
    return sum(vals) if vals else None


def choose_basis(samples: Iterable[Reading | MemorySample]) -> str:
    """sysfs cards when the host has them, else the engine process (local host), else meminfo."""
    sources = {s.source for s in samples}
    if any(s.startswith("sysfs:") for s in sources):
        return "gpu"
    if "process" in sources:
        return "process"
    return "meminfo"


@dataclass(frozen=True)
class MemorySummary:
    basis: str
    baseline_bytes: int | None
    loaded_idle_bytes: int | None
    held_bytes: int | None  # the engine's memory above the idle baseline
    peak_bytes: int | None
    after_stop_bytes: int | None
    memory_returned: bool | None  # after stop within tolerance of baseline


def _series(samples: list[MemorySample], basis: str) -> list[tuple[datetime, str, int]]:
    """(instant, phase, in-use value) per sampling instant, in time order."""
    by_instant: dict[tuple[datetime, str], list[MemorySample]] = {}
    for s in samples:
        by_instant.setdefault((s.sampled_at, s.phase), []).append(s)
    out = []
    for (at, phase), group in sorted(by_instant.items(), key=lambda kv: kv[0][0]):
        value = in_use(group, basis)
        if value is not None:
            out.append((at, phase, value))
    return out


def summarize(
    samples: list[MemorySample],
    *,
    tolerance_bytes: int = 1024**3,
    basis: str | None = None,
) -> MemorySummary:
    """Baseline (median of 'baseline'), loaded idle (median of 'idle'), held, peak, after stop (last).

    Baseline, loaded idle and after stop are always the *host's* memory in use: sysfs VRAM + GTT on
    a GPU host, else ``MemTotal - MemAvailable``. Held is the engine's memory above that baseline: on
    a GPU host loaded idle - baseline; with the ``process`` basis (no GPU counters) the engine's own
    RSS, all its processes, idle. A phase without a reading is None ("unknown"), never 0, so
    ``memory_returned`` is True only when both readings exist and after stop is back within the
    tolerance of the baseline.
    """
    basis = basis or choose_basis(samples)
    host_basis = "gpu" if basis == "gpu" else "meminfo"
    host = _series(samples, host_basis)
    engine = _series(samples, basis)

    def median(series: list[tuple[datetime, str, int]], phase: str) -> int | None:
        vals = [v for _, p, v in series if p == phase]
        return int(statistics.median(vals)) if vals else None

    baseline = median(host, "baseline")
    idle = median(host, "idle")
    after = [v for _, p, v in host if p == "after_stop"]
    after_stop = after[-1] if after else None
    running = [v for _, p, v in engine if p in ("loading", "idle", "bench")]
    peak = max(running) if running else None
    if basis == "process":
        held = median(engine, "idle")
    else:
        held = idle - baseline if idle is not None and baseline is not None else None
    returned = (
        after_stop - baseline <= tolerance_bytes if after_stop is not None and baseline is not None else None
    )
    return MemorySummary(basis, baseline, idle, held, peak, after_stop, returned)


def current_in_use(probe: MemoryProbe, basis: str | None = None) -> int | None:
    """One fresh reading of 'memory in use' (for the guards)."""
    readings = probe.read()
    return in_use(readings, basis or choose_basis(readings))


def wait_until(
    read: Callable[[], int | None],
    ok: Callable[[int], bool],
    timeout_s: float,
    interval_s: float = 1.0,
) -> tuple[bool, int | None]:
    """Poll ``read`` until ``ok`` holds or ``timeout_s`` passes; returns (held, last value)."""
    deadline = time.monotonic() + timeout_s
    value = None
    for _ in range(1_000_000):
        value = read()
        if value is not None and ok(value):
            return True, value
        if time.monotonic() >= deadline:
            break
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))
    return False, value

"""A run's memory summary from its samples: the basis, held after load, peak, return to baseline.

Figures are bytes; the return-to-baseline tolerance is in the config's unit, GB (10^9 bytes: 1 GB is
``baseline_tolerance_gb``'s default), as the guards count it (strix_pipeline/units.py)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from strix_pipeline.memory.probes import MemoryProbe
from strix_pipeline.memory.tree import Reading
from strix_pipeline.records import MemorySample
from strix_pipeline.units import GB, gib_text


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
    tolerance_bytes: int = 1 * GB,
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


# The words a run's reason starts its memory verdict with when the counters contradict each other: C5
# reads them (analysis/decision/criteria/memory.py) to say why a run's held memory is unknown.
MEMORY_UNRELIABLE = "memory unreliable"
UNRELIABLE_FRACTION = 0.15  # of the larger figure: an engine's own CPU-side memory stays within it


def meminfo_disagreement(
    samples: list[MemorySample], *, tolerance_bytes: int = 1 * GB, fraction: float = UNRELIABLE_FRACTION
) -> str | None:
    """Why the GPU counters of a unified-memory host cannot be trusted for this run, or None.

    What the engine took after load (idle - baseline) by sysfs (VRAM + GTT used) is set against what
    the host lost by ``MemTotal - MemAvailable``, an independent counter (rocm-smi reads the same sysfs
    files). GTT is system memory, so the host cannot lose less than GTT grew; and the GPU counters
    cannot miss what the host lost (a blind ``gtt_used`` stayed near 0 after 51.75 GiB were loaded,
    ROCm issue 5444). Beyond max(``tolerance_bytes``, ``fraction`` of the larger) either way is a
    disagreement. No sysfs or no meminfo readings at both phases: nothing to compare (None)."""
    gpu, host = _series(samples, "gpu"), _series(samples, "meminfo")
    gtt = [
        (s.sampled_at, s.phase, s.value_bytes)
        for s in samples
        if s.source.startswith("sysfs:") and s.metric == "gtt_used"
    ]

    def held(series: list[tuple[datetime, str, int]]) -> int | None:
        base = [v for _, p, v in series if p == "baseline"]
        idle = [v for _, p, v in series if p == "idle"]
        if not base or not idle:
            return None
        return int(statistics.median(idle) - statistics.median(base))

    g, h, t = held(gpu), held(host), held(gtt)
    if g is None or h is None:
        return None
    tol = max(tolerance_bytes, fraction * max(abs(g), abs(h)))
    said = f"sysfs VRAM+GTT {gib_text(g)} vs MemTotal-MemAvailable {gib_text(h)} taken after load"
    if h - g > tol:
        return f"the GPU counters missed memory the host lost: {said} (tolerance {gib_text(tol)})"
    if t is not None and t - h > tol:
        return (
            f"GTT grew {gib_text(t)} but the host lost only {gib_text(h)}: {said} (tolerance {gib_text(tol)})"
        )
    return None


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

"""A run's energy and throttling, from the GPU samples taken beside its memory (memory/gpu_counters.py).

**Energy of a window**: the package power (every card's ``power1_*`` summed at each sample) integrated
by trapezoid over the client's own window of a level -- from its first measured request's send to
its last one's end -- with the power interpolated at both edges. The figure is refused (None, the
problem said) when a sample gap inside the window exceeds :data:`MAX_GAP_S` or the samples do not
bracket the window: a ``power1_average`` read once a second is the SMU's own average, a hole of
several seconds is a guess. Where no card gives power, a RAPL energy counter's increase over the
window is used instead (the CPU package only: the source says so).

**Idle power**, the median package power of the samples taken before the engine started (phase
``baseline``, production already stopped), is stored apart and never subtracted: the energy per
request is what the Box drew while serving, the figure owners compare, and the idle power beside it
says how much of that a server idling all day would draw anyway.

**Throttled** (the rule, :func:`throttle`): while the GPU is busy (``gpu_busy_percent`` >=
:data:`BUSY_PCT`, phase ``bench``), the shader clock is below :data:`SCLK_SHARE` of its top DPM level
(``pp_dpm_sclk``; the highest clock seen in the run where that file is missing) in more than
:data:`THROTTLED_SHARE` of the samples; or any sample's temperature is at or above the card's
critical temperature (``temp1_crit``). Such a run is marked: its speed may be the chassis's, not
the engine's.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from strix_pipeline.memory.gpu_counters import GPU_SOURCE, RAPL_SOURCE
from strix_pipeline.records import MemorySample, RequestRecord

MAX_GAP_S = 3.0
BUSY_PCT = 50
SCLK_SHARE = 0.8
THROTTLED_SHARE = 0.25
# why a run has no energy figures when its host has no counter at all (host local in a VM)
NO_POWER_COUNTER = (
    "no power counter on the host: no amdgpu hwmon power1_average/power1_input and no readable RAPL "
    "energy_uj (/sys/class/powercap/intel-rapl:*)"
)


@dataclass(frozen=True)
class PowerSeries:
    """A counter over time: seconds since the epoch, and its value (W for power, J for energy)."""

    times: tuple[float, ...]
    values: tuple[float, ...]
    source: str  # the files that gave it, e.g. "card1:power1_average"
    cumulative: bool  # an energy counter (J so far) rather than a power (W)

    def at(self, t: float) -> float:
        """The value at ``t``, linear between the two samples around it (``t`` inside the series)."""
        i = bisect.bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return self.values[i]
        t0, t1, v0, v1 = self.times[i - 1], self.times[i], self.values[i - 1], self.values[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


@dataclass(frozen=True)
class WindowEnergy:
    """The energy drawn over one level's window, or why there is no figure."""

    joules: float | None
    seconds: float
    problem: str | None = None

    @property
    def mean_w(self) -> float | None:
        return self.joules / self.seconds if self.joules is not None and self.seconds > 0 else None


def _ts(at: datetime) -> float:
    return at.timestamp()


def _summed(samples: Iterable[MemorySample], metric: str, prefix: str) -> tuple[dict[float, float], set]:
    by_time: dict[float, float] = {}
    files: set[str] = set()
    for s in samples:
        if s.metric == metric and s.source.startswith(prefix):
            t = _ts(s.sampled_at)
            by_time[t] = by_time.get(t, 0.0) + s.value_bytes
            files.add(s.source.removeprefix(prefix))
    return by_time, files


def power_series(samples: Sequence[MemorySample]) -> PowerSeries | None:
    """The package power (W) summed over the cards at each sample; else RAPL's energy (J); None: neither."""
    power, files = _summed(samples, "power_uw", GPU_SOURCE)
    if power:
        ts = tuple(sorted(power))
        return PowerSeries(ts, tuple(power[t] / 1e6 for t in ts), " + ".join(sorted(files)), cumulative=False)
    energy, files = _summed(samples, "energy_uj", RAPL_SOURCE)
    if energy:
        ts = tuple(sorted(energy))
        source = " + ".join(sorted(files)) + " (RAPL: CPU package)"
        return PowerSeries(ts, tuple(energy[t] / 1e6 for t in ts), source, cumulative=True)
    return None


def window_energy(series: PowerSeries, start: float, end: float) -> WindowEnergy:
    """The energy over [start, end] (seconds since the epoch), or why not."""
    seconds = max(0.0, end - start)
    ts = series.times
    if end <= start:
        return WindowEnergy(None, seconds, "the window is empty")
    if not ts or ts[0] > start or ts[-1] < end:
        return WindowEnergy(None, seconds, "the power samples do not bracket the window")
    # the samples that bracket the window and those inside it: no two of them too far apart
    i0, i1 = bisect.bisect_right(ts, start) - 1, bisect.bisect_left(ts, end)
    widest = max((ts[i + 1] - ts[i] for i in range(i0, i1)), default=0.0)
    if widest > MAX_GAP_S:
        return WindowEnergy(None, seconds, f"a {widest:.1f} s gap between power samples (> {MAX_GAP_S:g} s)")
    if series.cumulative:
        joules = series.at(end) - series.at(start)
        if joules < 0:
            return WindowEnergy(None, seconds, "the energy counter wrapped inside the window")
        return WindowEnergy(joules, seconds)
    edges = [start, *(t for t in ts[i0 + 1 : i1] if start < t < end), end]
    values = [series.at(t) for t in edges]
    joules = sum(
        (b - a) * (va + vb) / 2 for a, b, va, vb in zip(edges, edges[1:], values, values[1:], strict=False)
    )
    return WindowEnergy(joules, seconds)


def idle_power_w(samples: Sequence[MemorySample], series: PowerSeries | None) -> float | None:
    """The median package power of the samples before the engine started (phase ``baseline``)."""
    if series is None:
        return None
    if series.cumulative:  # a counter's rate between the baseline samples
        base = sorted(
            {_ts(s.sampled_at) for s in samples if s.phase == "baseline" and s.metric == "energy_uj"}
        )
        if len(base) < 2:
            return None
        return (series.at(base[-1]) - series.at(base[0])) / (base[-1] - base[0])
    base_times = {_ts(s.sampled_at) for s in samples if s.phase == "baseline" and s.metric == "power_uw"}
    vals = [v for t, v in zip(series.times, series.values, strict=True) if t in base_times]
    return statistics.median(vals) if vals else None


def level_window(requests: Iterable[RequestRecord], scenario: str, level: int) -> tuple[float, float] | None:
    """The client's window of a level: its first measured request's send to its last one's end."""
    starts, ends = [], []
    for q in requests:
        if q.scenario != scenario or q.level != level or q.warmup:
            continue
        sent = _ts(q.sent_at)
        starts.append(sent)
        if q.e2e_ms is not None:
            ends.append(sent + q.e2e_ms / 1000)
    if not starts or not ends:
        return None
    return min(starts), max(ends)


@dataclass(frozen=True)
class Throttle:
    throttled: bool | None  # None: no clock or temperature read while busy
    reason: str | None


def throttle(samples: Sequence[MemorySample]) -> Throttle:
    """Whether the GPU throttled during the suite (the rule in the module's docstring)."""
    at: dict[tuple[float, str], dict[str, float]] = {}
    for s in samples:
        if s.source.startswith(GPU_SOURCE):
            card = s.source.removeprefix(GPU_SOURCE).split(":", 1)[0]
            at.setdefault((_ts(s.sampled_at), card), {})[s.metric] = s.value_bytes
            at[_ts(s.sampled_at), card]["bench"] = s.phase == "bench"
    if not at:
        return Throttle(None, None)
    reasons = []
    hot = [
        (card, r["temp_mdegc"], r["temp_crit_mdegc"])
        for (_, card), r in at.items()
        if "temp_mdegc" in r and "temp_crit_mdegc" in r and r["temp_mdegc"] >= r["temp_crit_mdegc"]
    ]
    if hot:
        card, temp, crit = max(hot, key=lambda h: h[1])
        reasons.append(f"{card} at {temp / 1000:.0f} °C, at or above its critical {crit / 1000:.0f} °C")
    checked = False
    for card in sorted({c for _, c in at}):
        rows = [r for (_, c), r in at.items() if c == card]
        top = max((r["sclk_max_hz"] for r in rows if "sclk_max_hz" in r), default=None)
        top = top or max((r["sclk_hz"] for r in rows if "sclk_hz" in r), default=None)
        busy = [r for r in rows if r["bench"] and r.get("busy_pct", 0) >= BUSY_PCT and "sclk_hz" in r]
        if not top or not busy:
            continue
        checked = True
        low = sum(1 for r in busy if r["sclk_hz"] < SCLK_SHARE * top)
        if low / len(busy) > THROTTLED_SHARE:
            reasons.append(
                f"{card} shader clock below {SCLK_SHARE:.0%} of {top / 1e6:.0f} MHz in {low} of {len(busy)} "
                f"busy samples (> {THROTTLED_SHARE:.0%})"
            )
    if not reasons and not checked and not any("temp_mdegc" in r for r in at.values()):
        return Throttle(None, None)
    return Throttle(bool(reasons), "; ".join(reasons) or None)

"""A fixed piece of work timed before and after each pass: the host's speed as the engine met it.

On the project's 2-core cloud guests a decode ran 15-25 % slower for a minute and more while
``/proc/stat`` showed no steal and nothing else running: a neighbour on the same
physical cores or memory shows in no counter the guest can read. What it does show in is the time
of a fixed job. The probe hashes a buffer larger than a core's cache (a single thread, CPU and memory
both, like one decode thread) three times and keeps the fastest, so a one-off hiccup is not a slow
host; a pass whose probe is slower than the fastest probe of its session by more than
``[analysis] busy_probe_pct`` counts as busy (hosts/probes/host_noise.py).
"""

from __future__ import annotations

import hashlib
import time

PROBE_BYTES = 64 << 20  # larger than the L3 share a 2-core guest gets: the hash streams memory
PROBE_REPEATS = 3

_buffer: bytes | None = None


def probe_ms() -> float:
    """Milliseconds of the fastest of PROBE_REPEATS SHA-256 passes over PROBE_BYTES (~40 ms each)."""
    global _buffer
    if _buffer is None:
        _buffer = bytes(range(256)) * (PROBE_BYTES // 256)
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        t0 = time.perf_counter()
        hashlib.sha256(_buffer).digest()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def slowdown_pct(probes_ms: tuple[float, ...], fastest_ms: float) -> float:
    """How much slower the slower of a pass's probes ran than the session's fastest, in %."""
    return 100.0 * (max(probes_ms) / fastest_ms - 1.0) if probes_ms and fastest_ms > 0 else 0.0

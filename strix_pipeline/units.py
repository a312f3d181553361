"""Units of memory, and how a number of bytes is written for people. Imports nothing of the project.

Two units, each with one job:
- GB (10^9 bytes) is what the config and the guards speak: every ``*_gb`` key (``memory_budget_gb``,
  ``baseline_tolerance_gb``, ``idle_baseline_gb``, ``reserve_gb``) and an engine flag's size
  (``--cpu-offload-gb``); the memory summary's tolerance is in GB too, so "returned to baseline"
  means the same in the summary and in the guard.
- GiB (2^30 bytes) is what the warehouse shows: the ``*_gib`` columns of its views, the charts, the
  decision report and the run checks (stored values are bytes; 120 GB is 111.8 GiB).
KIB/MIB/GIB also read the kernel's and the SMI tools' counters, whose "kB"/"MB"/"GB" are binary.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
KB = 10**3
MB = 10**6
GB = 10**9


def gib(n_bytes: float) -> float:
    return n_bytes / GIB


def gib_text(n_bytes: float | None, digits: int = 2, *, unknown: str = "unknown") -> str:
    """``12.35 GiB``; ``unknown`` when there is no reading."""
    return unknown if n_bytes is None else f"{n_bytes / GIB:.{digits}f} GiB"

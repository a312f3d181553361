"""What the benchmarks print about the machine they ran on (the same release is 9x faster on another CPU).

Not a benchmark itself: `make bench` runs benchmarks/[!_]*.py, which leaves this file out; the scripts
import it (their own directory is first on sys.path when run as `python benchmarks/x.py`).
"""

from __future__ import annotations

from pathlib import Path


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"

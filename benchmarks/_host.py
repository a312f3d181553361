"""What the benchmarks print about the machine they ran on (the same release is 9x faster on another CPU).

Not a benchmark itself: `make bench` runs benchmarks/*.py, and this file's name starts with an underscore
so that glob's scripts import it (their directory is first on sys.path) rather than run it.
"""

from __future__ import annotations

from pathlib import Path


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"

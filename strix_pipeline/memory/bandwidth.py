"""A short memory copy-bandwidth probe: the denominator of decode efficiency.

``threads`` Python threads each copy their own pair of buffers with ``numpy.copyto`` (a contiguous
float64 copy releases the GIL, so the threads copy in parallel, each on memory it touched first). The
buffers together are ``size_mib`` MiB (default 256, far beyond any L3), so the copy streams through
DRAM. Like STREAM's ``Copy``: every pass counts **read + write** bytes, 2 x the bytes copied (a store's
read-for-ownership is not counted; glibc's memmove uses non-temporal stores at these sizes anyway), and
the result is the best of ``repeats`` passes after one untimed warm-up pass that faults the pages in,
stopped early when ``time_budget_s`` is spent.

Stdlib + numpy only and no project import, so the same file runs where only python and numpy are
(a probe container on a Box): ``python bandwidth.py --threads 16`` or
``python -m strix_pipeline.memory.bandwidth --threads 16`` print the probe as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["BYTES_COUNTED", "BandwidthProbe", "measure_copy_bandwidth"]

MIB = 1024 * 1024
# What bytes_per_s counts, stored with every probe so a reader never has to guess the convention.
BYTES_COUNTED = "read+write (2 x bytes copied)"


@dataclass(frozen=True)
class BandwidthProbe:
    """One probe: ``bytes_per_s`` counts read + write (2 x ``buffer_bytes`` per pass, see ``method``).

    ``buffer_bytes`` is the bytes copied per pass by all threads together (the source buffers' total);
    ``repeats`` the timed passes actually run (fewer than asked when the time budget ran out).
    """

    bytes_per_s: float
    threads: int
    buffer_bytes: int
    repeats: int
    method: str

    def as_dict(self) -> dict:
        return asdict(self)


class _Copiers:
    """``threads`` workers, each with its own source and destination, copying in lock-step passes."""

    def __init__(self, threads: int, elements: int) -> None:
        self.start = threading.Barrier(threads + 1)
        self.done = threading.Barrier(threads + 1)
        self.ready = threading.Barrier(threads + 1)
        self.stop = False
        self.errors: list[BaseException] = []
        self.spans: list[tuple[float, float]] = []
        self.workers = [
            threading.Thread(target=self._work, args=(elements,), name=f"copy-bandwidth-{i}", daemon=True)
            for i in range(threads)
        ]
        for w in self.workers:
            w.start()
        self.ready.wait()
        if self.errors:
            self.close()
            raise self.errors[0]

    def _work(self, elements: int) -> None:
        try:
            # Allocated and first touched here: the pages sit near the core that copies them.
            src = np.ones(elements, dtype=np.float64)
            dst = np.zeros(elements, dtype=np.float64)
        except BaseException as e:  # noqa: BLE001 - reported by the constructor, not lost in a thread
            self.errors.append(e)
            src = dst = None
        self.ready.wait()
        while True:
            self.start.wait()
            if self.stop or src is None:
                return
            try:
                began = time.perf_counter()
                np.copyto(dst, src)
                self.spans.append((began, time.perf_counter()))
            except BaseException as e:  # noqa: BLE001 - the pass still ends; one_pass raises it
                self.errors.append(e)
            self.done.wait()

    def one_pass(self) -> float:
        """Seconds from the first thread's start of its copy until the last thread's end.

        The workers stamp their own copies: with as many copiers as cores, this (timing) thread may
        not be scheduled again until a copy ends, so its own clock would miss most of the pass.
        """
        self.spans = []
        self.start.wait()
        self.done.wait()
        if self.errors:
            raise self.errors[0]
        return max(e for _, e in self.spans) - min(b for b, _ in self.spans)

    def close(self) -> None:
        self.stop = True
        try:
            self.start.wait(timeout=30)
        except threading.BrokenBarrierError:
            pass
        for w in self.workers:
            w.join(timeout=30)


def measure_copy_bandwidth(
    threads: int, size_mib: int = 256, repeats: int = 5, time_budget_s: float = 3.0
) -> BandwidthProbe:
    """Copy bandwidth with ``threads`` threads over ``size_mib`` MiB of source buffers in total.

    Bytes counted per pass = read + write = 2 x ``size_mib`` MiB; the best of ``repeats`` timed passes
    (after one warm-up pass), fewer when ``time_budget_s`` is spent (at least one timed pass is run).
    Memory held meanwhile: 2 x ``size_mib`` MiB (source and destination).
    """
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads={threads!r}: a whole number of threads >= 1")
    if not isinstance(size_mib, int) or isinstance(size_mib, bool) or size_mib < 1:
        raise ValueError(f"size_mib={size_mib!r}: a whole number of MiB >= 1")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats={repeats!r}: a whole number of passes >= 1")
    if not time_budget_s > 0:
        raise ValueError(f"time_budget_s={time_budget_s!r}: a positive number of seconds")
    elements = size_mib * MIB // threads // 8
    if elements < 1:
        raise ValueError(f"size_mib={size_mib} is less than 8 bytes for each of {threads} threads")
    copied = elements * 8 * threads
    copiers = _Copiers(threads, elements)
    try:
        began = time.perf_counter()
        copiers.one_pass()  # warm-up: page faults and first-touch stay out of the timed passes
        best, timed = float("inf"), 0
        while timed < repeats:
            best = min(best, copiers.one_pass())
            timed += 1
            if time.perf_counter() - began >= time_budget_s:
                break
    finally:
        copiers.close()
    return BandwidthProbe(
        bytes_per_s=2 * copied / best,
        threads=threads,
        buffer_bytes=copied,
        repeats=timed,
        method=(
            f"numpy.copyto float64, {threads} thread(s) on disjoint buffers, best of {timed} pass(es) "
            f"after a warm-up; bytes counted: {BYTES_COUNTED}"
        ),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--time-budget-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    try:
        probe = measure_copy_bandwidth(args.threads, args.size_mib, args.repeats, args.time_budget_s)
    except (ValueError, MemoryError) as e:
        print(f"bandwidth probe: {e}", file=sys.stderr)
        return 2
    print(json.dumps(probe.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

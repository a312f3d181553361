"""The background sampler: a probe read every interval in a thread, each sample stamped with the phase."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from strix_pipeline.memory.probes import MemoryProbe
from strix_pipeline.memory.smi import SMI_PHASES
from strix_pipeline.memory.tree import Reading
from strix_pipeline.records import MemorySample

log = logging.getLogger(__name__)


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
        except Exception as e:  # noqa: BLE001 - a failed reading is counted and the sampling goes on
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

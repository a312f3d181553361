"""An engine stand-in whose speed depends on its release: for the bisection and canary tests.

It replaces ``assets.benchmark.run_benchmark`` in the test's process; everything around it is real
(the benchmark asset, bisect_job, the spool, the warehouse, the regressions asset, the sensor). A
release ``b<N>`` answers with TTFT p95 ``fast_ms`` below ``first_slow`` and ``slow_ms`` from it on,
with a small jitter per run and an interval of +-``ci_pct`` %; releases in ``murky`` answer halfway with
an interval wide enough to overlap both sides (the case a bisection must call inconclusive). With
``host_slow_from`` set, every run started after that moment is ``host_factor`` times slower,
whatever the release: a host change, as the canary must see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from strix_pipeline.records import RunResult
from support.decision_seed import run_record, run_result


def build_number(tag: str) -> int:
    return int(tag.removeprefix("b"))


@dataclass
class VersionedStandIn:
    first_slow: int
    fast_ms: float = 100.0
    slow_ms: float = 200.0
    ci_pct: float = 5.0
    murky: set[int] = field(default_factory=set)
    host_slow_from: datetime | None = None
    host_factor: float = 1.5
    clock: datetime | None = None  # the runs' started_at (advanced by the test); None: now
    calls: list[str] = field(default_factory=list)

    def figure(self, n: int, at: datetime) -> tuple[float, float, float]:
        jitter = 1.0 + 0.004 * ((len(self.calls) % 3) - 1)
        if n in self.murky:
            mid = (self.fast_ms + self.slow_ms) / 2
            value, half = mid, (self.slow_ms - self.fast_ms)
        else:
            value = (self.slow_ms if n >= self.first_slow else self.fast_ms) * jitter
            half = value * self.ci_pct / 100
        if self.host_slow_from is not None and at >= self.host_slow_from:
            value, half = value * self.host_factor, half * self.host_factor
        return value, value - half, value + half

    def __call__(self, config, target, *, run_id=None, dagster_run_id=None, log=print, **_) -> RunResult:
        image = target.image
        at = self.clock or datetime.now(UTC)
        self.calls.append(image.tag)
        p95, low, high = self.figure(build_number(image.tag), at)
        log(f"stand-in {image.tag}: TTFT p95 {p95:.1f} ms")
        rec = run_record(
            run_id,
            target.engine,
            host=target.host,
            repo=None,
            tag=image.tag,
            digest=image.digest,
            version=image.version or image.tag,
            sort_key=image.sort_key,
            profile=target.model,
            quant="Q4_K_M",
            started_at=at,
        )
        rec.dagster_run_id, rec.profile = dagster_run_id, target.profile
        rec.ended_at = at + timedelta(seconds=1)
        return run_result(rec, ttft5=(p95, low, high), n5=20, sweep={5: (p95, 100.0)})

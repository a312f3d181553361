"""The engine stand-in of the pool tests: replaces ``assets.benchmark.run_benchmark`` in a run's process.

Everything around it is real -- the benchmark asset, its pool, the executor, the instance's slot
accounting, the warehouse load -- only the engine is not started: the stand-in records when it held
the host (CLOCK_MONOTONIC, shared by every process on Linux) and returns a failed_start run, which the
warehouse stores like any other result.

Files it writes in ``out``: ``inside-<host>__<dagster run id>`` when it starts holding the host and
``interval-<host>__<dagster run id>.json`` ([start, end]) when it lets go.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from strix_pipeline.records import RunRecord, RunResult

# every wait of the stand-in is bounded: a test that went wrong fails on its own timeouts, not here
MAX_WAIT_S = 180.0


@dataclass
class EngineStandIn:
    """Holds the host for ``hold_s``. Two optional waits make overlap observable, both bounded:

    ``rendezvous``: before holding, wait until ``rendezvous`` stand-ins (this one included) are inside
    -- for a control where nothing should stop several being inside at once.
    ``release``: after ``hold_s``, keep holding until this file exists -- the test decides when the
    first run lets go, after it has seen what the others did meanwhile."""

    out: Path
    hold_s: float = 1.5
    rendezvous: int = 0
    release: Path | None = None

    def inside(self) -> list[Path]:
        return list(self.out.glob("inside-*"))

    def __call__(self, config, target, *, run_id=None, dagster_run_id=None, log=print, **_):
        start = time.monotonic()
        (self.out / f"inside-{target.host}__{dagster_run_id}").touch()
        deadline = start + MAX_WAIT_S
        while self.rendezvous and len(self.inside()) < self.rendezvous and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(self.hold_s)
        while self.release is not None and not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        end = time.monotonic()
        (self.out / f"interval-{target.host}__{dagster_run_id}.json").write_text(json.dumps([start, end]))
        now = datetime.now(UTC)
        image = target.image
        return RunResult(
            run=RunRecord(
                run_id=run_id,
                host=target.host,
                engine=target.engine,
                engine_kind=config.engines[target.engine].kind,
                image_repository=image.repository,
                image_tag=image.tag,
                image_digest=image.digest,
                model_profile=target.model,
                model="stand-in",
                quantization="none",
                suite="standard",
                profile=target.profile,
                fingerprint="",
                harness_version="test",
                engine_build=None,
                launch_command=None,
                engine_flags=None,
                status="failed_start",
                failure_reason="engine stand-in of the pool test",
                log_tail=None,
                started_at=now,
                ended_at=now,
                dagster_run_id=dagster_run_id,
            )
        )


def intervals(out: Path, host: str | None = None) -> dict[str, tuple[float, float]]:
    """{dagster run id: (start, end)} of the stand-ins that let go (of ``host``'s, or all)."""
    found = {}
    for f in out.glob("interval-*.json"):
        h, _, run_id = f.name.removeprefix("interval-").removesuffix(".json").partition("__")
        if host is None or h == host:
            found[run_id] = tuple(json.loads(f.read_text()))
    return found

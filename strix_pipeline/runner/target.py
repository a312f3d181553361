"""What a benchmark run is for: its target (host, engine, model profile, image), its id, and the
cancellation that carries its result."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from strix_pipeline.planning.targets import BenchmarkTarget  # planning is below the runner
from strix_pipeline.records import RunResult

Log = Callable[[str], None]


class RunCancelled(BaseException):  # a cancellation, not an error: no Error in its name
    """The run was interrupted. By the time this is raised the engine is stopped, production restored and
    the memory check finished; ``result`` is the run, status ``cancelled``, with the records measured
    before the interrupt, for the caller to store. The caller then raises ``interrupt`` (the original
    exception: KeyboardInterrupt, or an orchestrator's own interrupt class) so the cancellation goes on
    as it began."""

    def __init__(self, result: RunResult, interrupt: BaseException) -> None:
        super().__init__(result.run.failure_reason)
        self.result, self.interrupt = result, interrupt


def new_run_id(target: BenchmarkTarget, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}-{target.host}-{target.engine}-{target.model}-{uuid.uuid4().hex[:6]}"

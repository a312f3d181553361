"""A run's deadline kept: at the restore's time (planning/deadline.py) the engine's container is removed,
so production's restore starts on time whatever the engine was doing (loading, serving the suite).

``with DeadlineWatch(at, stop, log) as watch`` around the engine's life: ``stop`` is called once, from a
timer thread, when ``at`` passes; the run then asks :attr:`DeadlineWatch.passed` and raises
:meth:`DeadlineWatch.error` (status ``deadline``, a failure with its reason) in place of whatever the
removed engine made it see. A deadline already passed refuses the start (:meth:`check`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

from strix_pipeline.hosts.errors import EngineStartError
from strix_pipeline.usable import DEADLINE


class DeadlineWatch:
    """Calls ``stop`` once at ``at`` (aware), unless the block ended before."""

    def __init__(self, at: datetime, stop: Callable[[], None], log: Callable[[str], None]) -> None:
        self.at, self.stop, self.log = at, stop, log
        self.passed = False
        self._timer: threading.Timer | None = None
        self._stop_error: str | None = None

    def reason(self) -> str:
        said = f" (removing its engine failed: {self._stop_error})" if self._stop_error else ""
        return (
            f"stopped at its deadline {self.at:%Y-%m-%d %H:%M:%S} UTC, the restore's time (the window's "
            f"end less production's health timeout and a margin): its engine removed{said}, what it "
            "measured before kept, production restored"
        )

    def error(self) -> EngineStartError:
        return EngineStartError(DEADLINE, self.reason())

    def check(self) -> None:
        """Refuses (``deadline``) an engine start at or after the deadline."""
        if datetime.now(UTC) >= self.at:
            self.passed = True
            raise EngineStartError(
                DEADLINE,
                f"the deadline {self.at:%Y-%m-%d %H:%M:%S} UTC (the restore's time) passed before the "
                "engine started: not started, production restored",
            )

    def _fire(self) -> None:
        self.passed = True
        self.log(f"deadline {self.at:%H:%M:%S} UTC reached: the engine is removed, production restored")
        try:
            self.stop()
        except Exception as e:  # noqa: BLE001 - the launcher's own cleanup removes it again as the run ends
            self._stop_error = f"{type(e).__name__}: {e}"

    def __enter__(self) -> DeadlineWatch:
        self.check()
        delay = (self.at - datetime.now(UTC)).total_seconds()
        self._timer = threading.Timer(max(delay, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join(timeout=60)  # a removal under way ends before the launcher's cleanup

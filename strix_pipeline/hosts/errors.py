"""The one exception a launch raises: the run is recorded with its status, reason and log tail."""

from __future__ import annotations

from typing import Literal

StartStatus = Literal["failed_start", "failed_serve", "failed_guard"]


class EngineStartError(Exception):
    """An engine that did not start, did not serve, or was refused by a guard.

    A failure is a result, not a crash: the caller stores ``status`` as the run's status and keeps
    ``reason`` and ``log_tail`` so a reader sees why without the host.
    """

    def __init__(self, status: StartStatus, reason: str, log_tail: str | None = None) -> None:
        super().__init__(f"{status}: {reason}")
        self.status: StartStatus = status
        self.reason = reason
        self.log_tail = log_tail

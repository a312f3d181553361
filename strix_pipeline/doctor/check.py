"""A doctor's check: what it looked at on which host, ok or missing, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    host: str  # a host name, or "all" for what every host shares (the warehouse)
    name: str
    ok: bool
    required: bool
    detail: str
    fix: str | None = None

    @property
    def state(self) -> str:
        return "ok" if self.ok else ("missing" if self.required else "not available")


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.required and not c.ok]

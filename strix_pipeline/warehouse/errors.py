"""The warehouse's errors: what every module of the package raises and callers catch."""

from __future__ import annotations


class WarehouseError(RuntimeError):
    """The warehouse cannot do what was asked; the message says why and what to do."""


class WarehouseUnavailable(WarehouseError):
    """The warehouse itself cannot take a load now (held, full, damaged, too new, conflicting): no other
    run would load either, unlike a run whose own rows are refused."""


class WarehouseLocked(WarehouseUnavailable):
    """Another process holds the file (DuckDB allows one writer process, and no reader beside it)."""


class WarehouseMissing(WarehouseError):
    """A read-only open of a file that does not exist."""


class CommitConflict(WarehouseUnavailable):
    """Another writer's commit conflicted with this one on every attempt :data:`COMMIT_RETRY` allows."""

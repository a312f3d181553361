"""One process, many throwaway Dagster instances: keep each test's defs-state storage its own.

Entering a DagsterInstance publishes its defs-state storage in a ContextVar (``set_defs_state_storage``,
a generator context manager) and leaving it calls ``ContextVar.reset(token)``. A context that is never
left (a sensor or schedule context built without ``with``, a result's reconstruct context) leaves that
generator to the garbage collector, which closes it whenever a collection runs -- in the middle of a
later test, in the same thread and so the same context -- and ``reset`` then restores whatever was
current when the forgotten instance was entered: the storage of an instance that is gone by then. The
next Definitions load fails with "Attempted to resolve undefined DagsterInstance weakref" (seen in CI
in test_numeric_metadata after 1100 other tests, and once in the Postgres deployment test).

A daemon or a webserver process enters and leaves its instance once; only a test session piles up
forgotten ones. So in the test session a storage closed by the garbage collector (GeneratorExit at its
``yield``: never left) restores nothing: it withdraws itself if it is still current, else leaves the
current storage alone. Every context left normally resets as Dagster's own does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def install() -> None:
    from dagster._core.storage.defs_state import base

    if getattr(base.set_defs_state_storage, "_strix_gc_safe", False):
        return
    current = base._current_storage

    def reset(token: Any) -> None:
        try:
            current.reset(token)
        except ValueError:  # left in another context: Dagster's own fallback
            current.set(None)

    @contextmanager
    def set_defs_state_storage(storage: Any) -> Iterator[None]:
        token = current.set(storage)
        try:
            yield
        except GeneratorExit:  # closed by the garbage collector, long after its instance was used
            if current.get() is storage:
                current.set(None)
            raise
        except BaseException:
            reset(token)
            raise
        reset(token)

    set_defs_state_storage._strix_gc_safe = True  # type: ignore[attr-defined]
    # DagsterInstance.__enter__ imports it from the module at each call
    base.set_defs_state_storage = set_defs_state_storage

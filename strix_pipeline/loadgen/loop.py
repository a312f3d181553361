"""The event loop the load generator runs on: uvloop when installed, else asyncio's default.

uvloop (libuv) wakes a coroutine for a readable socket with less CPU than the pure-Python selector
loop, which is measurable in the client's added TTFT at high stream counts (benchmarks/
client_overhead.py). It comes with dagster-webserver (through uvicorn[standard]); without it the
suite still runs, on the default loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    return "uvloop" if loop_factory() else "asyncio"


def run(coro: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """``asyncio.run`` on the fastest available loop."""
    factory = loop_factory() if use_uvloop else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)

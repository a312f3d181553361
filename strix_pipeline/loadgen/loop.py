"""The event loop the load generator runs on: uvloop when installed, else asyncio's default.

uvloop (libuv) wakes a coroutine for a readable socket with less CPU than the pure-Python selector
loop, which is measurable in the client's added TTFT at high stream counts (benchmarks/
client_overhead.py). It comes with dagster-webserver (through uvicorn[standard]); without it the
suite still runs, on the default loop.

An interrupt (SIGINT, or SIGTERM when a handler is installed for it) stops the suite and reaches the
caller as the exception the process's own handler raises: an orchestrator's termination signal
(Dagster raises its interrupt class from its SIGINT handler) must end the run, not be lost.
uvloop logs and drops any exception other than KeyboardInterrupt/SystemExit raised by a signal
handler while it waits for sockets, so the handler runs as a loop callback here instead: what it
raises is kept, the suite's task is cancelled (its ``finally`` blocks close the connections), and the
kept exception is raised once the loop is done.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    return "uvloop" if loop_factory() else "asyncio"


async def _interruptible(coro: Coroutine[Any, Any, T], raised: list[BaseException]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    installed: list[tuple[signal.Signals, Any]] = []

    def on_signal(signum: signal.Signals, handler: Callable[..., object]) -> None:
        try:
            handler(signum, None)  # a handler that only notes the signal (raises nothing) is left so
        except BaseException as e:  # noqa: BLE001 - whatever the process's handler raises is the interrupt
            if not raised:
                raised.append(e)
                if task is not None:
                    task.cancel()

    if threading.current_thread() is threading.main_thread():
        for signum in _INTERRUPTS:
            handler = signal.getsignal(signum)
            # the default SIGINT handler is asyncio.Runner's to translate (KeyboardInterrupt)
            if callable(handler) and handler is not signal.default_int_handler:
                loop.add_signal_handler(signum, on_signal, signum, handler)
                installed.append((signum, handler))
    try:
        return await coro
    finally:
        for signum, handler in installed:
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)


def run(coro: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """``asyncio.run`` on the fastest available loop; an interrupt is raised as its handler raised it."""
    factory = loop_factory() if use_uvloop else None
    raised: list[BaseException] = []
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            result = runner.run(_interruptible(coro, raised))
        except asyncio.CancelledError:
            if not raised:
                raise
        if raised:  # also when the coroutine swallowed the cancellation
            raise raised[0]
        return result

"""SIGINT dispositions the tests set themselves instead of inheriting them.

A shell starts a script's background jobs (``bash .ci/run &``) with SIGINT ignored, and pytest and
everything it starts inherit that: a test that relies on Ctrl-C sets what it relies on. The
processes a test starts get SIGINT *ignored* on purpose (``preexec_fn=ignoring_sigint``), the harshest
parent there is: what they do on Ctrl-C is then the project's own doing, never the test runner's.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


def ignoring_sigint() -> None:
    """``preexec_fn`` of a child: start it as a script's ``&`` would, SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def default_sigint() -> Iterator[None]:
    """Python's default SIGINT handler (KeyboardInterrupt) in this process for the block."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)

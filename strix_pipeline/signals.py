"""Ctrl-C reaches the project's processes whatever their parent did with SIGINT.

POSIX shells start a script's background jobs (``cmd &``) with SIGINT ignored, some service
wrappers do the same, and an ignored disposition survives ``exec``: Python then installs no
KeyboardInterrupt handler, so Ctrl-C, and a termination delivered as SIGINT, would do nothing to
``strix``, ``make ui`` or a run. Entry points call :func:`restore_default_sigint` first; ``make ui``
starts Dagster through ``python -m strix_pipeline.signals``, which resets SIGINT and execs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def restore_default_sigint() -> bool:
    """Python's default SIGINT handler (KeyboardInterrupt) where SIGINT was inherited ignored.

    Returns whether it changed anything. A handler someone installed is left alone, and only the main
    thread may set handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return True


def exec_with_default_sigint(argv: list[str]) -> None:
    """Replace this process by ``argv`` with SIGINT at its default (a caught handler would not survive
    exec, an ignored one would)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m strix_pipeline.signals COMMAND [ARG...]")
    exec_with_default_sigint(sys.argv[1:])

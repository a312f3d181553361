"""Runs a build beside a pytest session: at a low CPU priority, in a process group of its own, never
outliving the session (support/prebuild.py starts it).

usage: python build_guard.py NICENESS COMMAND...

This process is the leader of a process group of its own (its parent starts it with
``start_new_session``); the build and everything it starts (pip, cmake, the compilers) are in that group
and inherit the niceness set here before the build starts. The session's end kills the group. A
session that dies without cleaning up (SIGKILL, SIGTERM, pytest-timeout's ``os._exit``) closes its end
of the pipe on this process's stdin: at that EOF this process kills the whole group, itself included.

The build's stdout and stderr go to this process's stderr (the build's log file); when the build ends,
this process prints one JSON line on its stdout: the build's exit status, its last non-empty stdout
line (the binary, as ``llamacpp_build --release`` prints it) and when it ended (``time.time()``: the
session may learn of the end only later).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time


def _end_the_group_when_the_session_is_gone() -> None:
    sys.stdin.buffer.read()  # returns only at EOF: the session that started the build has ended
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    os.setpriority(os.PRIO_PROCESS, 0, int(argv[0]))  # before the build: it and its children inherit it
    threading.Thread(target=_end_the_group_when_the_session_is_gone, daemon=True).start()
    build = subprocess.Popen(argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)  # stderr: the log
    assert build.stdout is not None
    last = b""
    for line in build.stdout:
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
        if line.strip():
            last = line.strip()
    rc = build.wait()
    ended = {"rc": rc, "last": last.decode(errors="replace"), "ended": time.time()}
    print(json.dumps(ended), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What the provisioning steps share: making a cached thing once across processes, file checksums,
how a failed step is reported."""

from __future__ import annotations

import fcntl
import hashlib
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

T = TypeVar("T")


class ProvisionError(RuntimeError):
    """A provisioning step failed; the message names the step and its log."""


def failed_step(what: str, step: str, returncode: int, log: Path) -> str:
    """What a failed step's error says: which step of what, its exit status, the log and its last lines."""
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
    return f"{what}: {step} failed (exit {returncode}); log {log}\n{tail}"


def run_step(
    cmd: list[str],
    log: Path,
    what: str,
    step: str,
    *,
    env: dict[str, str] | None = None,
    error: type[ProvisionError] = ProvisionError,
) -> None:
    """Run one step of making ``what`` with its command and output written to ``log`` (replaced);
    a non-zero exit raises ``error`` saying which step failed, with the log's last lines."""
    with log.open("wb") as f:
        f.write(f"$ {shlex.join(cmd)}\n".encode())
        f.flush()
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise error(failed_step(what, step, proc.returncode, log))


def run_main(main: Callable[[], int]) -> NoReturn:
    """Exit with what a provisioning command's ``main`` returns; a step that failed exits 1 with its
    message on stderr, not a traceback."""
    try:
        code = main()
    except ProvisionError as e:
        print(e, file=sys.stderr)
        code = 1
    sys.exit(code)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_once(
    target: Path,
    find: Callable[[], T | None],
    make: Callable[[], T],
    waiting: str,
    progress: Callable[[str], None],
) -> T:
    """What ``find`` finds of ``target``, else what ``make`` makes, by one process at a time.

    The lock is ``.<name>.lock`` beside ``target``; a process that has to wait for it says
    ``waiting`` to ``progress`` and, once it holds the lock, looks again before making anything
    (the process it waited for has usually made it).
    """
    if (found := find()) is not None:
        return found
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(waiting)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (found := find()) is not None:
            return found
        return make()

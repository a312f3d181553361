"""What the provisioning steps share: making a cached thing once across processes, file checksums."""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


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

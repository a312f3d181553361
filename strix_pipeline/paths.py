"""Paths built from values that came from outside the code: the configuration (a host name, an engine
version), a registry, a run id. The configuration checks their characters when it loads; this is the
second lock, where the path is made: a value is one plain name inside its folder, never a way out.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PathEscape", "inside"]


class PathEscape(ValueError):
    """A value that would put a path outside its folder (or is no plain file name at all)."""


def inside(folder: Path, name: str) -> Path:
    """``folder / name``, where ``name`` must be a single path segment: not empty, not ``.`` or ``..``,
    no ``/``, ``\\`` or NUL. Raises :class:`PathEscape` naming the value and the folder otherwise.
    (Deleting or writing ``folder / "0.32.0/../../victim"`` would reach outside ``folder``.)"""
    folder = Path(folder)
    bad = (
        not name
        or name in (".", "..")
        or any(c in name for c in ("/", "\\", "\x00"))
        or any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name)
    )
    if bad:
        raise PathEscape(
            f"{name!r} is not a plain name inside {folder}: a path segment without '/', '\\\\', '..' "
            "or control characters"
        )
    return folder / name

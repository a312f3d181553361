"""Writing a file on a user's behalf without following links: THE rule for every writer (``strix query
--out``, the report site, the chart folder, ``strix export``, the spool).

A path checked first and opened later can be replaced in between: anyone who can write the folder (a
shared temporary directory, an earlier report's folder) swaps in a symbolic link to the warehouse, its
WAL or the configuration, and the write lands there. So a :class:`Folder` is opened once, without
following a link (``O_NOFOLLOW | O_DIRECTORY``), and everything after goes through its descriptor:

- a file is written to a new temporary file in that folder (``O_EXCL | O_NOFOLLOW``) and renamed onto
  its name (``os.replace`` replaces a directory entry; it never writes through one), so no existing
  file -- a link's target or a hard link to the warehouse -- is ever opened for writing;
- a link where a file or a folder is expected is refused with its name (:class:`LinkRefused`);
- a file or folder whose device and inode are a protected file's (:class:`Protected`: the warehouse,
  its WAL, the spool, the configuration) is refused, checked on the opened descriptor, not the path;
- removing a name unlinks that directory entry only: a link is removed, never what it points to, and
  a linked folder is never entered.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


class UnsafeTarget(OSError):
    """A file or folder strix will not write to or delete from; the message names it and says why."""


class LinkRefused(UnsafeTarget):
    """A symbolic link where a file or a folder is expected."""


@dataclass(frozen=True)
class Identity:
    """A protected file or folder by what it is on disk (device, inode), not by its path."""

    dev: int
    ino: int
    what: str  # "the warehouse", "the configuration", ...
    path: Path


@dataclass(frozen=True)
class Protected:
    """Files and folders no writer may replace or write into, whatever name reaches them."""

    places: tuple[Identity, ...] = ()

    @classmethod
    def of(cls, places: Iterable[tuple[Path, str]]) -> Protected:
        """The (path, what) pairs that exist now, by the identity of what they are (links followed:
        the protected file is the link's target)."""
        found = []
        for path, what in places:
            with contextlib.suppress(OSError):
                st = os.stat(path)
                found.append(Identity(st.st_dev, st.st_ino, what, Path(path)))
        return cls(tuple(found))

    def refuse(self, st: os.stat_result, name: Path | str) -> None:
        for p in self.places:
            if (st.st_dev, st.st_ino) == (p.dev, p.ino):
                raise UnsafeTarget(f"{name}: that is {p.what} ({p.path}); strix never writes over it")


NOTHING_PROTECTED = Protected()

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _plain(name: str) -> str:
    # a folder's entry, never a path that leaves it
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeTarget(f"{name!r}: not a plain file name")
    return name


class Folder:
    """One folder opened without following a link; files are written and removed through it."""

    def __init__(self, fd: int, path: Path, protected: Protected) -> None:
        self.fd = fd
        self.path = path
        self.protected = protected

    @classmethod
    def open(
        cls, path: Path | str, *, create: bool = False, protected: Protected = NOTHING_PROTECTED
    ) -> Folder:
        """``path`` as a folder (made, with its parents, when ``create``); :class:`LinkRefused` when its
        last part is a link (the parts above it are the user's own path and are followed)."""
        path = Path(path)
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)  # never follows a link: a link there is refused by the open below
        return cls._opened(path, lambda: os.open(path, _DIR_FLAGS), protected)

    @classmethod
    def _opened(cls, path: Path, opener: Callable[[], int], protected: Protected) -> Folder:
        try:
            fd = opener()
        except OSError as e:
            if os.path.islink(path):
                raise LinkRefused(
                    f"{path}: is a symbolic link, not a folder; strix writes into no folder through a link"
                ) from None
            if isinstance(e, NotADirectoryError):
                raise UnsafeTarget(f"{path}: is a file, not a folder") from None
            raise
        try:
            protected.refuse(os.fstat(fd), path)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path, protected)

    def folder(self, name: str, *, create: bool = True) -> Folder:
        """The sub-folder ``name`` (made when missing and ``create``), opened through this one."""
        _plain(name)
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, dir_fd=self.fd)
        return self._opened(
            self.path / name, lambda: os.open(name, _DIR_FLAGS, dir_fd=self.fd), self.protected
        )

    def _existing(self, name: str) -> os.stat_result | None:
        """What ``name`` is now, or None; a link, a folder or a protected file is refused."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        where = self.path / name
        if stat.S_ISLNK(st.st_mode):
            raise LinkRefused(f"{where}: is a symbolic link; strix writes no file through a link")
        if stat.S_ISDIR(st.st_mode):
            raise UnsafeTarget(f"{where}: is a folder, not a file")
        self.protected.refuse(st, where)
        return st

    def write(self, name: str, fill: Callable[[BinaryIO], None], *, replace: bool = True) -> Path:
        """Write ``name`` with what ``fill`` writes to the file it is given; returns its path.

        ``fill`` writes a temporary file in this folder; only when it returned is the file renamed onto
        ``name`` (a failure, a timeout or an interrupt leaves ``name`` as it was). Without ``replace``
        an existing ``name`` is refused (:class:`FileExistsError`), even one made meanwhile."""
        _plain(name)
        where = self.path / name
        if self._existing(name) is not None and not replace:
            raise FileExistsError(f"{where}: the file exists")
        # cut by bytes, not characters: a file name is at most 255 bytes, and 100 characters may be 400
        tmp = f".{os.fsencode(name)[:100].decode(errors='ignore')}.{secrets.token_hex(6)}.tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=self.fd
        )
        try:
            with os.fdopen(fd, "wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            # again now: a link swapped in while fill ran (a long query) is refused, not replaced
            if self._existing(name) is not None and not replace:
                raise FileExistsError(f"{where}: the file exists")
            if replace:
                os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:
                # link() fails on an existing name, whatever made it: no rename over a file made meanwhile
                os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
                os.unlink(tmp, dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        with contextlib.suppress(OSError):  # the rename is durable once the folder's entry is on disk
            os.fsync(self.fd)
        return where

    def write_bytes(self, name: str, data: bytes, *, replace: bool = True) -> Path:
        return self.write(name, lambda f: f.write(data), replace=replace)

    def write_text(self, name: str, text: str, *, replace: bool = True) -> Path:
        return self.write_bytes(name, text.encode("utf-8"), replace=replace)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def remove(self, name: str) -> None:
        """Unlink the entry ``name`` (a link is removed itself; what it points to is never touched)."""
        _plain(name)
        st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise UnsafeTarget(f"{self.path / name}: is a folder; strix removes only files")
        os.unlink(name, dir_fd=self.fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_file(
    path: Path | str,
    fill: Callable[[BinaryIO], None],
    *,
    replace: bool = True,
    create_folder: bool = False,
    protected: Protected = NOTHING_PROTECTED,
) -> Path:
    """One file written by the rules above: its folder opened without following a link, then
    :meth:`Folder.write`."""
    path = Path(path)
    with Folder.open(path.parent, create=create_folder, protected=protected) as folder:
        return folder.write(path.name, fill, replace=replace)


def fd_path(f: BinaryIO) -> str:
    """A path naming the open file ``f`` itself (Linux's /proc/self/fd), for a writer that takes only
    a path (DuckDB's COPY): the name resolves to this file whatever is renamed or linked meanwhile."""
    return f"/proc/self/fd/{f.fileno()}"

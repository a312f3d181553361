"""Known harmless noise in an engine's log tail, folded so the lines that matter are read first.

Each rule names lines an engine writes on every clean exit, not a fault: nanobind's reference-leak
report from Triton's bindings when vLLM's interpreter ends, and multiprocessing's resource tracker
cleaning up after it. A run of such lines becomes one line saying what was folded and how many; the
rest of the log is kept as it was.
"""

from __future__ import annotations

import re

# (what the lines are, a pattern each of them matches)
HARMLESS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "nanobind's leak report at interpreter exit (Triton's bindings; harmless)",
        re.compile(
            r"^(nanobind: (leaked \d+ \w+!|this is likely caused by)| - leaked \w+ |"
            r" - \.\.\. skipped remainder|See https://nanobind\.readthedocs\.io)"
        ),
    ),
    (
        "multiprocessing's resource tracker cleaning up at exit (harmless)",
        re.compile(r"(resource_tracker: There appear to be|^\s+warnings\.warn\('resource_tracker)"),
    ),
)


def fold_noise(text: str) -> str:
    """``text`` with each run of lines of one :data:`HARMLESS` kind folded into one line."""
    out: list[str] = []
    kind: str | None = None
    count = 0

    def flush() -> None:
        if kind is not None:
            out.append(f"[{count} line(s) folded: {kind}]")

    for line in text.splitlines():
        found = next((what for what, pattern in HARMLESS if pattern.search(line)), None)
        if found is not None and found == kind:
            count += 1
            continue
        flush()
        kind, count = (found, 1) if found is not None else (None, 0)
        if found is None:
            out.append(line)
    flush()
    return "\n".join(out)

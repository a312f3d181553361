"""Version order of image tags: a string per tag whose lexical order is the version order.

The rule: docs/registry.md ("Version order").
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_SEMVER = re.compile(
    r"(?:^|[^0-9A-Za-z])v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?"  # 0.10.1 or 0.10.1.1 (vLLM uses 4 parts)
    r"(?:\.?post(\d+))?"  # SGLang's v0.5.5.post3
    r"(?:[-.]?((?:rc|alpha|beta|dev|pre|a|b)\d*(?:\.\d+)*))?"  # pre-releases sort before the release
    r"(?=$|[^0-9A-Za-z]|-)",
    re.IGNORECASE,
)
_BUILD = re.compile(r"(?:^|[-_.])b(\d+)(?=$|[-_.])")
_DATE = re.compile(r"(?<!\d)(20\d{2})[-.]?(0[1-9]|1[0-2])[-.]?(0[1-9]|[12]\d|3[01])(?!\d)")


def _pad_numbers(text: str) -> str:
    return re.sub(r"\d+", lambda m: m.group(0).zfill(10), text)


def version_sort_key(tag: str, created: datetime | None) -> str:
    """A string whose lexical order is the version order (rule: see discovery.py)."""
    m = _SEMVER.search(tag)
    if m and int(m.group(1)) < 1000:  # 2026.01.15 is a date, not version 2026
        nums = [int(g) if g else 0 for g in m.group(1, 2, 3, 4)]
        post = int(m.group(5) or 0)
        pre = m.group(6)
        release = "~" if pre is None else "-" + _pad_numbers(pre.lower())  # "~" sorts after any pre-release
        body = ".".join(f"{n:06d}" for n in nums) + f".p{post:06d}{release}"
        return f"3|{body}|{tag}"
    b = _BUILD.search(tag)
    if b:
        return f"2|{int(b.group(1)):010d}|{tag}"
    d = _DATE.search(tag)
    if d:
        day = f"{d.group(1)}-{d.group(2)}-{d.group(3)}"
        clock = "00:00:00"
        if created is not None:
            c = created.astimezone(UTC)
            if c.strftime("%Y-%m-%d") == day:
                clock = c.strftime("%H:%M:%S")
        return f"1|{day}T{clock}|{tag}"
    if created is not None:
        return f"1|{created.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S')}|{tag}"
    return f"0|{tag}"

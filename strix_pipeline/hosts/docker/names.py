"""The one rule for names given to Docker objects (containers, volumes) and the files named after them."""

from __future__ import annotations

import re

# Docker's own rule for container and volume names is [a-zA-Z0-9][a-zA-Z0-9_.-]*
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(text: str) -> str:
    """``text`` with every run of other characters as one ``-``, no ``-`` at either end ("engine" when
    nothing is left)."""
    return _UNSAFE.sub("-", text).strip("-") or "engine"

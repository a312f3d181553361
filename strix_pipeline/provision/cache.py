"""The project's own cache directory (``$STRIX_CACHE_DIR``, default ``~/.cache/strix-pipeline``)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "STRIX_CACHE_DIR"


def cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "strix-pipeline")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path

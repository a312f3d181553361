"""Moved to :mod:`strix_pipeline.planning.release_spread` (planning's one room); this name stays for old imports."""

from strix_pipeline.planning.release_spread import HistoryError, VersionChoice, choose, spread

__all__ = ["HistoryError", "VersionChoice", "choose", "spread"]

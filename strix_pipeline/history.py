"""Moved to :mod:`strix_pipeline.planning.history` (planning's one room); this name stays for old imports."""

from strix_pipeline.planning.history import HistoryError, VersionChoice, choose, spread

__all__ = ["HistoryError", "VersionChoice", "choose", "spread"]

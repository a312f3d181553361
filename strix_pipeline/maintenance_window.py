"""Moved to :mod:`strix_pipeline.planning.cron` (planning's one room); this name stays for old imports."""

from strix_pipeline.planning.cron import fires_between, last_fire_time, window_start

__all__ = ["fires_between", "last_fire_time", "window_start"]

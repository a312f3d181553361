"""Correctness, measured: a fixed evaluation set every run answers, checked by program, scored with an
interval, and compared item by item between two engines or releases (``items``, ``checks``,
``score``)."""

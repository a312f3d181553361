"""Planning's one room, below the runner: pure functions and typed values, durations as arguments.

- ``targets``: what a week's images expand to (partition keys, the targets of an image, the canary);
- ``due``: which wanted images to request now (the window read as a value);
- ``measured``: the one account of what is measured, for the sensor and the weekly schedule alike;
- ``cron`` and ``window``: when a host's window is open, and whether the next run fits in it;
- ``estimate``: a run's expected duration from its series' durations;
- ``priority``, ``night`` and ``week``: the order, the night-by-night fit and the one window rule before
  a run (``night.admit_run``), the week (``week.this_week``) and its runs;
- ``history``: which releases a history benchmarks.

No Dagster import, no warehouse: the readers (warehouse/past_runs.py, image_scan.py) pass what they read in.
"""

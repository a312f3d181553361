"""The bisection: which release made a change.

- ``search``: the pure searches on plain figures and verdicts (no warehouse, no engine): the interval
  search of one run per step, and the Pinpoint search of comparisons by pairs;
- ``steps``: the steps against the warehouse -- the series and its brackets, the releases between,
  each step decided and stored (warehouse/bisections.py), and the bisection by pairs.

The Dagster layer (strix_dagster/bisect_run.py, schedules/bisect.py) runs the steps; it holds no rule.
"""

"""The bisection: which release made a change.

- ``search``: the pure searches on plain figures and verdicts (no warehouse, no engine): the interval
  search of one run per step, and the Pinpoint search of comparisons by pairs;
- ``releases``: the releases between a change's brackets;
- ``steps``: the steps against the warehouse -- the series and its brackets, each step decided and
  stored (warehouse/bisections.py); a bisection by pairs is runner/pair_bisect.py's.

The Dagster layer (strix_dagster/bisect_run.py, schedules/bisect.py) runs the steps; it holds no rule.
"""

"""Pure statistics, below the runner and the analysis alike: comparisons by pairs (paired), change
points of an ordered list of numbers (changepoints), and distribution-free intervals of percentiles
(quantiles). Numbers in, typed results out; nothing here reads the warehouse or the configuration.
"""

"""The paper's baselines (§6.1, Table 1, App. B): each fixes the checkpoints by a rule, then the least R.

``checkpoint`` (checkpoint all / last), ``checkpoint_sets`` (Chen et al.'s
sqrt(n) and greedy, and their articulation-point and linearized
generalisations), ``griewank`` (revolve), ``eviction`` (a greedy incumbent),
and ``recompute``: the minimum R for a given S that all of them share.
"""

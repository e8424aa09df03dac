"""Checkmate's MILP (paper §4-5): problem (9) in matrix form and everything that solves or bounds it.

``formulation`` builds problem (9) (its constraint families in ``rows``);
``plain`` hands it to a solver as is (``ilp_plain``); ``certified`` is the
default ``ilp``: a staged pipeline with incumbents and proved bounds, using
``frontier`` (branch and bound on the frontier relaxation with lazy rows),
``local_search`` (RINS) and ``rounding`` (two-phase LP rounding, §5).
"""

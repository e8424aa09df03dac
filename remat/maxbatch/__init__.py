"""The maximum batch size under a memory budget (paper §6.4, eq. 10), found as a search in stages.

``limits`` (eq. 10's cost cap, the memory bound on B) -> ``seeds`` (heuristics
and local searches: a proved lower end) -> ``relaxation`` (the resident-set
relaxation: a proved upper end) -> ``probes`` (one feasibility question per
batch) -> ``search`` (galloping and bisection between the two ends).
``single_milp`` is the paper's own one-model formulation.
"""

from remat.maxbatch.result import MaxBatchResult
from remat.maxbatch.search import max_batch_size

__all__ = ["MaxBatchResult", "max_batch_size"]

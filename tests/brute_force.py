"""Exhaustive search over frontier-advancing schedules, stage by stage (test oracle).

The state entering stage t is the resident set S[t]. Given S[t] and the next
resident set S[t+1], the only sensible R[t] is the closure of {t} and the new
checkpoints under "inputs that are not resident must be computed": every valid R
contains it, and computing more only adds cost and memory. So an exact optimum is
a shortest path over resident sets, with each stage's peak checked against the
budget. S[t+1] ranges over subsets of the values that a later stage may still
read: a value whose own readers all have ids <= t is still read when one of them
is recomputed for a descendant that a node after t needs, so a value is dead only
when no descendant (itself included) has a reader after t; keeping a dead value
only adds memory. Written independently of remat.schedule so it can catch errors
there.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from remat.graph import DFGraph


class BruteForce:
    def __init__(self, graph: DFGraph) -> None:
        self.n = graph.n
        self.deps = [tuple(int(p) for p in graph.deps[k]) for k in range(self.n)]
        self.users = [tuple(int(u) for u in graph.users[i]) for i in range(self.n)]
        self.M = [float(m) for m in graph.memory]
        self.C = [float(c) for c in graph.cost]
        self.const = float(graph.constant_memory)
        self.last_use = [max(u, default=-1) for u in self.users]
        # The last stage that may read each value: its own readers', or any descendant's (recomputed there).
        self.last_need = list(self.last_use)
        for i in range(self.n - 1, -1, -1):
            self.last_need[i] = max([self.last_use[i]] + [self.last_need[j] for j in self.users[i]])
        # Memoised per oracle, freed with it: functools.cache on the method itself kept every oracle of the session
        # (one global cache keyed by self) and grew a pytest worker by gigabytes until the kernel killed it.
        self.stage = cache(self._stage)

    def _stage(self, t: int, resident: int, keep: int) -> tuple[float, float, int]:
        """(cost, peak memory, R bitmask) of stage t entering with `resident`, leaving `keep`."""
        R = (1 << t) | (keep & ~resident)
        for v in range(t, -1, -1):
            if R >> v & 1:
                for p in self.deps[v]:
                    if not resident >> p & 1:
                        R |= 1 << p
        cost, peak = self.stage_of(R, resident, keep)
        return cost, peak, R

    def stage_of(self, R: int, resident: int, keep: int) -> tuple[float, float]:
        """(cost, peak memory) of one stage computing the bitmask ``R`` in id order, entering with ``resident``
        and leaving ``keep``: an input is released after its last reader in the stage unless it is kept."""
        computed = [v for v in range(self.n) if R >> v & 1]
        cost = sum(self.C[v] for v in computed)
        mem = self.const + sum(self.M[i] for i in range(self.n) if resident >> i & 1)
        peak = mem
        for k in computed:
            mem += self.M[k]
            peak = max(peak, mem)
            for i in self.deps[k]:
                later = [j for j in self.users[i] if j > k and R >> j & 1]
                if not later and not keep >> i & 1:
                    mem -= self.M[i]
        return cost, peak

    def replay(self, R: np.ndarray, S: np.ndarray) -> tuple[float, float]:
        """(cost, peak memory) of any schedule (R, S), stage by stage with :meth:`stage_of` (no validity check)."""
        def mask(row: np.ndarray) -> int:
            return sum(1 << int(i) for i in np.flatnonzero(row))

        T = len(R)
        stages = [self.stage_of(mask(R[t]), mask(S[t]), mask(S[t + 1]) if t + 1 < T else 0) for t in range(T)]
        return sum(c for c, _ in stages), max(p for _, p in stages)

    def candidates(self, t: int) -> list[int]:
        """Subsets of values computed by stage t that a stage after t may still read (directly or to recompute)."""
        useful = [i for i in range(t + 1) if self.last_need[i] > t]
        out = []
        for mask in range(1 << len(useful)):
            out.append(sum(1 << useful[b] for b in range(len(useful)) if mask >> b & 1))
        return out

    def solve(self, budget: float) -> tuple[float, np.ndarray, np.ndarray] | None:
        """Minimum cost and an optimal (R, S) within `budget`, or None if infeasible."""
        best: dict[int, tuple[float, list[int], list[int]]] = {0: (0.0, [], [])}
        for t in range(self.n):
            nxt: dict[int, tuple[float, list[int], list[int]]] = {}
            keeps = self.candidates(t) if t + 1 < self.n else [0]
            for resident, (cost, rs, ss) in best.items():
                for keep in keeps:
                    c, peak, R = self.stage(t, resident, keep)
                    if peak > budget + 1e-9:
                        continue
                    total = cost + c
                    if keep not in nxt or total < nxt[keep][0] - 1e-12:
                        nxt[keep] = (total, rs + [R], ss + [resident])
            best = nxt
            if not best:
                return None
        cost, rs, ss = best[0]
        Rm = np.array([[r >> i & 1 for i in range(self.n)] for r in rs], bool)
        Sm = np.array([[s >> i & 1 for i in range(self.n)] for s in ss], bool)
        return cost, Rm, Sm

    def min_budget(self) -> float:
        """The smallest peak memory of any frontier-advancing schedule (minimax path)."""
        best = {0: 0.0}
        for t in range(self.n):
            nxt: dict[int, float] = {}
            keeps = self.candidates(t) if t + 1 < self.n else [0]
            for resident, peak_so_far in best.items():
                for keep in keeps:
                    peak = max(peak_so_far, self.stage(t, resident, keep)[1])
                    if peak < nxt.get(keep, np.inf):
                        nxt[keep] = peak
            best = nxt
        return best[0]

"""§4.6 and Appendix A: the partitioned MILP (9) against the unpartitioned one (1a-1f + memory).

On the paper's L-layer linear training net (L = 8: n = 17 nodes, unit cost and
memory) at a few budgets, solve both MILPs and both LP relaxations and record
each optimum, solve time, and the integrality gap ``MILP optimum / LP optimum``.
Table: ``python -m analysis integrality``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.common import MissingAPIError, as_list, write_rows
from experiments.sweep import results_file, settings
from experiments.tracking import Tracker

COLUMNS = ["layers", "n_nodes", "budget", "variant", "ilp_status", "ilp_cost", "ilp_time", "variables", "constraints",
           "lp_status", "lp_value", "lp_time", "integrality_gap", "time_limit"]


def main(cfg: Any, output_dir: Path) -> Path:
    try:
        from remat.milp.plain import solve_ilp, solve_lp_relaxation
    except ImportError:
        raise MissingAPIError("integrality_gap needs remat.milp.plain.solve_ilp(..., partitioned=) and "
                              "solve_lp_relaxation(graph, budget, partitioned)") from None
    from tqdm import tqdm

    from remat.generators import linear_chain

    grid = settings(cfg)
    layers = int(grid.get("layers") or 8)
    budgets = [float(b) for b in as_list(grid.get("budgets"))] or [4.0]
    time_limit = grid.get("time_limit")
    graph = linear_chain(layers)
    rows = []
    tracker = Tracker(cfg.get("mlflow"))
    for budget in tqdm(budgets, desc="integrality_gap", unit="budget"):
        for partitioned in (True, False):
            ilp = solve_ilp(graph, budget, time_limit=time_limit, mip_gap=1e-6, partitioned=partitioned)
            milp, lp = solve_lp_relaxation(graph, budget, partitioned=partitioned, time_limit=time_limit)
            lp_value = milp.cost(lp.objective) if lp.objective is not None else None
            row = {"layers": layers, "n_nodes": graph.n, "budget": budget,
                   "variant": "partitioned" if partitioned else "unpartitioned",
                   "ilp_status": str(ilp.status), "ilp_cost": ilp.cost if ilp.has_schedule else None,
                   "ilp_time": ilp.solve_time, "variables": ilp.stats.get("variables"),
                   "constraints": ilp.stats.get("constraints"), "lp_status": lp.status, "lp_value": lp_value,
                   "lp_time": lp.time, "time_limit": time_limit,
                   "integrality_gap": ilp.cost / lp_value if ilp.has_schedule and lp_value else None}
            rows.append(row)
            tracker.log(grid["name"], {"experiment": grid["name"], "graph": graph.name, "budget": budget,
                                       "strategy": f"ilp_{row['variant']}", "cost": row["ilp_cost"],
                                       "solve_time": row["ilp_time"], "gap": row["integrality_gap"],
                                       "lower_bound": lp_value, "status": row["ilp_status"]},
                        run_name=f"{graph.name}/{row['variant']}/{budget:g}")
    out = results_file(cfg, grid["name"])
    write_rows(out, rows, COLUMNS)
    return out

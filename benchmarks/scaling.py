"""How the exact solvers scale with the graph: time to the first schedule, to 5 % and 1 % of proof, to proof.

    python benchmarks/scaling.py [--family transformer|rl] [--nodes 100 250 500 1000 2000 3000]
                                 [--fraction 0.7] [--time-limit 300] [--contenders ilp ilp_plain cpsat]

Graphs: GPT-style transformers (:func:`remat.generators.transformer_training_graph`, hidden
256, sequence 256, batch 4, the layer count chosen for each node count) or MOCCASIN's random
layered DAGs (:func:`remat.generators.random_layered_dag`, seed 0); the budget is
``--fraction`` of the no-recomputation peak. Contenders, side by side in one run on the same
graphs: ``ilp`` (the certified pipeline), ``ilp_plain`` (problem 9 handed to HiGHS as is) and
``cpsat`` (the same MILP on OR-Tools CP-SAT). A milestone's time is the first improving
schedule whose gap to the bound proved at that moment is within 5 % (1 %); "proof" is a final
status of optimal (gap 1e-4). A contender whose whole model would pass ``--max-columns`` is
not built (the plain MILP of a 3,000-node graph has about 10 million columns) and says so.
Every final schedule is simulated again. The growth exponent is the least-squares slope of
log(time) against log(nodes) over the sizes a contender reached. Raw rows and the command go to
``results/benchmarks/scaling_<family>.csv``, the figure to ``results/figures/scaling_<family>.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS_DIR, RowWriter, markdown_table, recheck  # noqa: E402

from remat.budget import no_recompute_peak  # noqa: E402
from remat.generators import random_layered_dag, transformer_training_graph  # noqa: E402
from remat.graph import DFGraph  # noqa: E402
from remat.milp.formulation import frontier_model_columns  # noqa: E402
from remat.strategies import get_strategy  # noqa: E402

MILESTONES = ("first_s", "gap5_s", "gap1_s", "proof_s")
CONTENDERS = {"ilp": ("ilp", "highs"), "ilp_plain": ("ilp_plain", "highs"), "cpsat": ("ilp_plain", "cpsat")}
COLUMNS = ["family", "nodes", "edges", "fraction", "contender", "columns", "status", "recheck", "overhead",
           "bound", "gap", *MILESTONES, "solve_s", "note"]


def scaling_graph(family: str, nodes: int) -> DFGraph:
    """The benchmark's graph of about ``nodes`` nodes (exactly, for the random layered DAGs)."""
    if family == "rl":
        return random_layered_dag(nodes, 0)
    layers = max(1, round(((nodes - 1) / 2 - 3) / 13))
    return transformer_training_graph(layers=layers, hidden=256, heads=4, seq=256, batch=4, vocab=1000)


def whole_model_columns(graph: DFGraph) -> int:
    """Columns of the plain MILP of (9): R, S and Free below the diagonal, and U."""
    return frontier_model_columns(graph) + graph.n * (graph.n + 1) // 2


def run_contender(graph: DFGraph, budget: float, contender: str, time_limit: float) -> dict:
    """Solve once and read the milestones off the improving schedules as they came."""
    name, backend = CONTENDERS[contender]
    events: list[tuple[float, float, float]] = []
    start = time.perf_counter()
    result = get_strategy(name)(graph, budget, time_limit=time_limit, mip_gap=1e-4, backend=backend,
                                on_incumbent=lambda s, c, b: events.append((s, c, b)))
    elapsed = time.perf_counter() - start
    checked, note = recheck(graph, budget, result, 1e-4, result.stats.get("proof", ""))
    row = {"status": str(result.status), "recheck": checked, "solve_s": elapsed, "note": note or result.message,
           "bound": None if result.lower_bound is None else result.lower_bound / graph.total_cost}
    if result.has_schedule:
        row["overhead"] = result.cost / graph.total_cost
        row["gap"] = result.gap
    first = [s for s, c, _ in events if math.isfinite(c)]
    row["first_s"] = first[0] if first else (elapsed if result.has_schedule else None)
    for key, tolerance in (("gap5_s", 0.05), ("gap1_s", 0.01)):
        hit = [s for s, c, b in events if math.isfinite(c) and math.isfinite(b) and c - b <= tolerance * c]
        # A bound that closed the gap after the last improving schedule is seen only at the end.
        final = result.has_schedule and result.gap is not None and result.gap <= tolerance
        row[key] = hit[0] if hit else (elapsed if final else None)
    row["proof_s"] = elapsed if checked == "optimal" else None
    return row


def growth_exponents(rows: list[dict]) -> list[dict]:
    """Per contender and milestone, the slope of log(seconds) against log(nodes) where at least two sizes reached it."""
    out = []
    for contender in dict.fromkeys(r["contender"] for r in rows):
        line = {"contender": contender}
        for key in MILESTONES:
            points = [(math.log(r["nodes"]), math.log(max(r[key], 1e-3))) for r in rows
                      if r["contender"] == contender and r.get(key) is not None]
            if len(points) >= 2:
                mx = sum(x for x, _ in points) / len(points)
                my = sum(y for _, y in points) / len(points)
                var = sum((x - mx) ** 2 for x, _ in points)
                line[key] = sum((x - mx) * (y - my) for x, y in points) / var if var else None
            line[f"{key}_sizes"] = len(points)
        out.append(line)
    return out


def draw(rows: list[dict], family: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MILESTONES), figsize=(4 * len(MILESTONES), 3.6), sharex=True, sharey=True)
    colours = {c: f"C{i}" for i, c in enumerate(dict.fromkeys(r["contender"] for r in rows))}
    for ax, key in zip(axes, MILESTONES):
        for contender in colours:
            pts = sorted((r["nodes"], r[key]) for r in rows if r["contender"] == contender and r.get(key) is not None)
            if pts:
                ax.plot(*zip(*pts), marker="o", color=colours[contender])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title({"first_s": "first schedule", "gap5_s": "within 5 %", "gap1_s": "within 1 %",
                      "proof_s": "proved (1e-4)"}[key])
        ax.set_xlabel("nodes")
    axes[0].set_ylabel("seconds (2 cores)")
    for contender, colour in colours.items():  # every contender in the legend, reached or not
        axes[-1].plot([], [], marker="o", label=contender, color=colour)
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"time to answer vs graph size ({family}); a missing point: not reached within the limit",
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=("transformer", "rl"), default="transformer")
    parser.add_argument("--nodes", nargs="+", type=int, default=[100, 250, 500, 1000, 2000, 3000])
    parser.add_argument("--fraction", type=float, default=0.7)
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--contenders", nargs="+", choices=tuple(CONTENDERS), default=list(CONTENDERS))
    parser.add_argument("--max-columns", type=int, default=3_000_000, help="largest plain model built")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--redraw", action="store_true", help="draw the figure again from the CSV, solve nothing")
    args = parser.parse_args()
    out = args.out or RESULTS_DIR / f"scaling_{args.family}.csv"
    figure = out.parent.parent / "figures" / f"scaling_{args.family}.png"
    if args.redraw:
        from report import read_run

        draw(read_run(out)[0], args.family, figure)
        print(f"figure: {figure}")
        return
    writer = RowWriter(out, COLUMNS, "scaling.py")
    for nodes in args.nodes:
        graph = scaling_graph(args.family, nodes)
        budget = args.fraction * no_recompute_peak(graph)
        for contender in args.contenders:
            base = {"family": args.family, "nodes": graph.n, "edges": graph.m, "fraction": args.fraction,
                    "contender": contender, "columns": whole_model_columns(graph)}
            if contender != "ilp" and base["columns"] > args.max_columns:
                writer.add({**base, "status": "not_built", "note": f"{base['columns']} columns > --max-columns"})
                continue
            row = {**base, **run_contender(graph, budget, contender, args.time_limit)}
            print(f"{graph.n:5d} nodes {contender:9s} {row['status']:11s} "
                  + " ".join(f"{k}={row[k]:.1f}" if row.get(k) is not None else f"{k}=-" for k in MILESTONES),
                  flush=True)
            writer.add(row)
    writer.finish()
    print(markdown_table(writer.rows, ["nodes", "contender", "status", "overhead", "gap", *MILESTONES]))
    print()
    print(markdown_table(growth_exponents(writer.rows), ["contender", *MILESTONES]))
    draw(writer.rows, args.family, figure)
    print(f"\nrows: {out}\nfigure: {figure}")


if __name__ == "__main__":
    main()

"""Issue 27's targets for the certified ``ilp``: which hold, and the gap reached where one does not.

    python benchmarks/targets.py [--groups zoo large rl] [--time-limit S] [--models unet gpt2 ...]
                                 [--fractions 0.5 0.6 0.7 0.8] [--rl-nodes 100 250 500 1000]

Groups, each cell one solve on HiGHS with the target's gap and time limit unless ``--time-limit`` caps it:

* ``zoo``: every ``conf/model/`` entry at its reduced default (the PyTorch front end, FLOP costs), at 0.5 / 0.6 /
  0.7 / 0.8 of the no-recomputation peak: gap <= 1 % within 600 s;
* ``large``: the zoo's GPT-2 at full size (12 layers, d=768, context 1024, batch 8) and a synthetic 96-layer
  transformer (:func:`remat.generators.transformer_training_graph`, 2,503 nodes), at ``--large-fractions``:
  first schedule <= 10 s and gap <= 2 % within 1,800 s;
* ``rl``: MOCCASIN's random layered DAGs (:func:`remat.generators.random_layered_dag`, seed 0) at 0.8 and 0.9 of
  the eager-freeing peak: gap <= 2 % within 600 s.

``--span`` reads every fraction as a point of the span instead (0: the least budget any schedule meets, 1: the
no-recomputation peak; ``run.py``'s ``span:f``): on the CNNs the parameters and their gradients take most of the
peak, so 0.5 to 0.8 of the peak is below what the graph needs anywhere, and only the span's points bind.

A cell ``holds`` when the answer, simulated again, is within the target gap of its proved bound in time; a cell
run with a shorter limit than the target's and not certified is ``open`` (not a failure of the target, not a
pass). Raw rows and the command go to ``results/benchmarks/targets.csv``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import RESULTS_DIR, RowWriter, markdown_table, recheck  # noqa: E402

from remat.budget import no_recompute_peak, span_budget  # noqa: E402
from remat.generators import random_layered_dag, transformer_training_graph  # noqa: E402
from remat.graph import DFGraph  # noqa: E402
from remat.strategies import get_strategy  # noqa: E402

ZOO = ("vgg16", "vgg19", "mobilenet", "resnet50", "unet", "fcn8", "segnet", "gpt2", "bert", "vit_b16", "resnet18")
# group: (target gap, target seconds, target seconds to the first schedule or None)
TARGETS = {"zoo": (0.01, 600.0, None), "large": (0.02, 1800.0, 10.0), "rl": (0.02, 600.0, None)}
COLUMNS = ["group", "graph", "nodes", "fraction", "budget_kind", "limit_s", "status", "recheck", "overhead", "bound",
           "gap", "first_s", "target_s", "solve_s", "verdict", "note"]


def zoo_reduced(name: str) -> DFGraph:
    """Zoo model ``name`` at its ``conf/model/`` reduced default, as ``run.py model=<name>`` extracts it."""
    from experiments.graphs import input_shape, model_config
    from remat.models import zoo_graph

    cfg = model_config(name)
    return zoo_graph(name, batch_size=int(cfg["batch_size"]), input_shape=tuple(input_shape(cfg)),
                     model_kwargs=dict(cfg.get("kwargs") or {}))


def cells(args: argparse.Namespace) -> list[tuple[str, str, Callable[[], DFGraph], list[float]]]:
    out = []
    if "zoo" in args.groups:
        out += [("zoo", name, lambda name=name: zoo_reduced(name), args.fractions) for name in args.models]
    if "large" in args.groups:
        from remat.models import zoo_graph

        out.append(("large", "gpt2_full", lambda: zoo_graph("gpt2"), args.large_fractions))
        out.append(("large", "transformer_96", lambda: transformer_training_graph(layers=96, hidden=256, heads=4,
                                                                                   seq=256, batch=4, vocab=1000),
                    args.large_fractions))
    if "rl" in args.groups:
        out += [("rl", f"rl{n}", lambda n=n: random_layered_dag(n, 0), args.rl_fractions) for n in args.rl_nodes]
    return out


def solve_cell(graph: DFGraph, fraction: float, group: str, cap: float | None, span: bool = False) -> dict:
    gap, target_s, first_target = TARGETS[group]
    limit = target_s if cap is None else min(cap, target_s)
    budget = span_budget(graph, fraction) if span else fraction * no_recompute_peak(graph)
    firsts: list[float] = []
    start = time.perf_counter()
    result = get_strategy("ilp")(graph, budget, time_limit=limit, mip_gap=gap,
                                 on_incumbent=lambda s, c, b: firsts.append(s) if math.isfinite(c) else None)
    elapsed = time.perf_counter() - start
    checked, note = recheck(graph, budget, result, gap, result.stats.get("proof", ""))
    row = {"limit_s": limit, "target_s": target_s, "status": str(result.status), "recheck": checked,
           "solve_s": elapsed, "first_s": firsts[0] if firsts else None, "note": note or result.message,
           "bound": None if result.lower_bound is None else result.lower_bound / graph.total_cost}
    if result.has_schedule:
        row["overhead"], row["gap"] = result.cost / graph.total_cost, result.gap
    first_ok = first_target is None or (row["first_s"] is not None and row["first_s"] <= first_target)
    if checked in ("optimal", "infeasible") and elapsed <= target_s * 1.05 and first_ok:
        row["verdict"] = "holds"
    elif limit < target_s and first_ok:
        row["verdict"] = "open"
    else:
        row["verdict"] = "fails"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", nargs="+", choices=tuple(TARGETS), default=list(TARGETS))
    parser.add_argument("--models", nargs="+", default=list(ZOO))
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.5, 0.6, 0.7, 0.8])
    parser.add_argument("--large-fractions", nargs="+", type=float, default=[0.6])
    parser.add_argument("--rl-nodes", nargs="+", type=int, default=[100, 250, 500, 1000])
    parser.add_argument("--rl-fractions", nargs="+", type=float, default=[0.8, 0.9])
    parser.add_argument("--time-limit", type=float, default=None, help="cap every cell's limit (seconds)")
    parser.add_argument("--span", action="store_true", help="fractions are points of the span, not of the peak")
    parser.add_argument("--out", type=Path, default=None, help="default: results/benchmarks/targets[_span].csv")
    args = parser.parse_args()
    args.out = args.out or RESULTS_DIR / ("targets_span.csv" if args.span else "targets.csv")
    writer = RowWriter(args.out, COLUMNS, "targets.py")
    for group, name, build, fractions in cells(args):
        graph = build()
        for fraction in fractions:
            row = {"group": group, "graph": name, "nodes": graph.n, "fraction": fraction,
                   "budget_kind": "span" if args.span else "peak",
                   **solve_cell(graph, fraction, group, args.time_limit, args.span)}
            print(f"{group:5s} {name:15s} {graph.n:5d} {fraction:.2f} {row['verdict']:5s} {row['status']:11s} "
                  f"gap={row.get('gap')} first={row['first_s']} {row['solve_s']:.1f} s", flush=True)
            writer.add(row)
    writer.finish()
    print(markdown_table(writer.rows, ["group", "graph", "nodes", "fraction", "verdict", "status", "overhead",
                                       "gap", "first_s", "solve_s", "limit_s"]))
    held = sum(r["verdict"] == "holds" for r in writer.rows)
    print(f"\n{held}/{len(writer.rows)} cells hold; rows: {args.out}")


if __name__ == "__main__":
    main()

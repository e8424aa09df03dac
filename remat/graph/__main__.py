"""``python -m remat.graph``: convert graph files between our format, Checkmate's node-link and MOCCASIN's.

    python -m remat.graph convert IN OUT --to moccasin     # e.g. IN = vgg_unet or path/to/graph.json
    python -m remat.graph info IN

``IN`` is a graph file of any format :func:`remat.graph.load_graph` reads, or a
reference graph's short name (``vgg16``, ``vgg_unet``, ...).
"""

from __future__ import annotations

import argparse
import sys

from remat.graph.dfgraph import GraphError
from remat.graph.formats import FORMATS, save_graph
from remat.graph.reference import resolve_graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remat.graph", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    convert = sub.add_parser("convert", help="read IN, write OUT in another format")
    convert.add_argument("source", metavar="IN", help="graph file or reference graph short name")
    convert.add_argument("target", metavar="OUT", help="file to write")
    convert.add_argument("--to", dest="fmt", choices=sorted(FORMATS), default="remat",
                         help="format of OUT (default: remat, our own JSON)")
    info = sub.add_parser("info", help="print a graph's size, loss node, memory and cost")
    info.add_argument("source", metavar="IN", help="graph file or reference graph short name")
    args = parser.parse_args(argv)
    try:
        graph = resolve_graph(args.source)
        if args.command == "convert":
            save_graph(graph, args.target, args.fmt)
            print(f"{args.source}: {graph.n} nodes, {graph.m} edges -> {args.target} ({args.fmt})")
        else:
            loss = f"loss node {graph.loss} ({graph.names[graph.loss]!r})" if graph.loss is not None else "no loss"
            print(f"{graph.name}: {graph.n} nodes, {graph.m} edges, {loss}, batch {graph.batch_size}, "
                  f"cost unit {graph.cost_unit}, total cost {graph.total_cost:g}, "
                  f"total memory {int(graph.memory.sum())} B, constant {graph.constant_memory} B")
    except (GraphError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m analysis [targets...] [--results DIR] [--out DIR]``: rebuild figures and tables from results/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.data import MissingResults
from analysis.figures import FIGURES
from analysis.paper import paper_comparison
from analysis.tables import TABLES

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {**FIGURES, **TABLES, "paper": paper_comparison}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    parser.add_argument("targets", nargs="*", default=["all"], help=f"all or any of: {', '.join(TARGETS)}")
    parser.add_argument("--results", type=Path, default=ROOT / "results", help="folder holding the experiment CSVs")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: <results>/figures, tables)")
    parser.add_argument("--mlflow-uri", default=None, help="MLflow store for the figures (default: the project's)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the figures and tables to MLflow")
    args = parser.parse_args(argv)
    names = list(TARGETS) if args.targets == ["all"] else args.targets
    unknown = [t for t in names if t not in TARGETS]
    if unknown:
        print(f"error: unknown target {unknown[0]!r}: pick all or any of {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        out = args.out or (args.results / ("figures" if name in FIGURES else "tables"))
        try:
            before = _stamps(out)
            TARGETS[name](args.results, out)
            print(f"{name}: written to {out}")
            if not args.no_mlflow:
                _log(name, [p for p, t in _stamps(out).items() if before.get(p) != t], args)
        except MissingResults as exc:
            failed += 1
            print(f"error: {name}: {exc}", file=sys.stderr)
    # "all" tolerates missing stages (reports them); naming a target demands it.
    return 1 if failed and (args.targets != ["all"] or failed == len(names)) else 0


def _stamps(folder: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in folder.glob("*") if p.is_file()} if folder.is_dir() else {}


def _log(name: str, paths: list[Path], args: argparse.Namespace) -> None:
    # The figures are artifacts of an "analysis" MLflow run, next to the runs that produced their data.
    from analysis.tracking import log_outputs

    log_outputs(name, sorted(paths), {"results": args.results}, args.mlflow_uri)

if __name__ == "__main__":
    sys.exit(main())

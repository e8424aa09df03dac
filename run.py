#!/usr/bin/env python
"""Entry point: solve one graph, or run a paper experiment, from Hydra config (conf/).

    python run.py graph=vgg16 strategy=ilp budget=0.7        # one reference graph, 70% of the no-recompute peak
    python run.py graph=my_graph.json strategy=ilp budget=12GB
    python run.py model=unet strategy=ilp                    # a zoo model through the PyTorch front end
    python run.py experiment=budget_sweep                    # Fig. 5 grid from params.yaml's quick profile
    python run.py -m hydra/launcher=local experiment=budget_sweep experiment.graphs=vgg16,mobilenet  # joblib

Bad input (unknown strategy or config value, malformed or cyclic graph, budget
below the constant overhead, non-numeric budget) ends with one line on stderr that
names the problem and the fix, a non-zero exit status, and no files left behind.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

CONF = Path(__file__).resolve().parent / "conf"
GROUPS = ("model", "strategy", "solver", "cost_model", "platform", "experiment")
EXIT_BAD_INPUT = 2
EXIT_MISSING_API = 3


def check_group_overrides(argv: list[str]) -> str | None:
    """A one-line complaint about ``group=value`` overrides naming a config that does not exist."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in GROUPS or any(c in value for c in "()[]{}*$"):
            continue
        options = sorted(p.stem for p in (CONF / key).glob("*.yaml"))
        for choice in value.split(","):
            if choice not in options and not (key == "model" and choice == "null"):
                return f"unknown {key} {choice!r}: pick one of {', '.join(options)} ({key}=<name>)"
    return None


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from experiments.common import MissingAPIError

    types: list[type[BaseException]] = [ValueError, MissingAPIError]
    try:
        from remat.solvers import SolverError

        types.append(SolverError)
    except ImportError:
        pass
    return tuple(types)


def _fail(message: str, code: int, output_dir: Path | None) -> None:
    # Nothing half-written: drop the run directory if it holds only Hydra's own bookkeeping.
    if output_dir is not None and output_dir.is_dir():
        own = {p.name for p in output_dir.iterdir()}
        if own <= {".hydra", "run.log", f"{Path(sys.argv[0]).stem}.log"}:
            shutil.rmtree(output_dir, ignore_errors=True)
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


def _main(cfg) -> object:  # type: ignore[no-untyped-def]
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from experiments import get_experiment
    from experiments.common import MissingAPIError

    hc = HydraConfig.get()
    output_dir = Path(hc.runtime.output_dir)
    single = hc.mode != RunMode.MULTIRUN
    try:
        return get_experiment(cfg.experiment.name).main(cfg, output_dir)
    except _bad_input_types() as exc:
        if not single:
            raise  # Hydra reports a failed job of a sweep with its overrides
        if os.environ.get("REMAT_DEBUG"):
            raise
        _fail(str(exc), EXIT_MISSING_API if isinstance(exc, MissingAPIError) else EXIT_BAD_INPUT, output_dir)
    return None


def cli() -> None:
    problem = check_group_overrides(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    import hydra

    hydra.main(version_base="1.3", config_path="conf", config_name="config")(_main)()


if __name__ == "__main__":
    cli()

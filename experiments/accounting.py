"""``accounting=ours|paper`` for the experiments: which graph, budget and baselines a cell sees.

``ours`` changes nothing. ``paper`` applies :mod:`remat.paper`'s transforms: the graph
without constant overhead, the device memory of ``conf/accounting/paper.yaml``
(16e9 bytes), a byte budget less twice the parameter bytes (less four times for the
max-batch baselines, as the artifact did), and the artifact's baselines in place of
ours. Budgets given as fractions or spans stay relative to the (transformed) graph's
no-recomputation peak. Every schedule is still judged by ``simulate()``.
"""

from __future__ import annotations

from typing import Any

from experiments.common import PROJECT_ROOT, InputError, as_list, parse_budget_spec, resolve_budget

ACCOUNTINGS = ("ours", "paper")


def accounting_config(name: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if name not in ACCOUNTINGS:
        raise InputError(f"unknown accounting {name!r}: pick one of {', '.join(ACCOUNTINGS)} (conf/accounting/)")
    return OmegaConf.to_container(OmegaConf.load(PROJECT_ROOT / "conf" / "accounting" / f"{name}.yaml"))


def accountings(cfg: Any, grid: dict[str, Any]) -> list[str]:
    """The grid's ``accountings`` list, else the run's ``accounting`` group (default ``ours``)."""
    names = [str(a) for a in as_list(grid.get("accountings"))]
    if not names:
        names = [str(cfg.accounting.name)] if cfg.get("accounting") is not None else ["ours"]
    for name in names:
        accounting_config(name)
    return names


def graph_for(graph: Any, accounting: str) -> Any:
    if accounting == "paper":
        from remat.paper import paper_graph

        return paper_graph(graph)
    return graph


def device_memory(platform_memory: float, accounting: str) -> float:
    """The device's bytes under ``accounting``: the accounting's own figure if it has one, else the platform's."""
    own = accounting_config(accounting).get("platform_memory")
    return float(own) if own is not None else float(platform_memory)


def cell_budget(spec: Any, graph: Any, source: Any, accounting: str, role: str = "solver") -> float:
    """The budget in bytes a cell's strategy sees; ``source`` is the untransformed graph (its parameter bytes)."""
    budget = resolve_budget(spec, graph)
    if accounting == "paper" and parse_budget_spec(spec)[0] == "bytes":
        from remat.paper import paper_budget, parameter_bytes

        try:
            return paper_budget(budget, parameter_bytes(source), role)
        except ValueError as exc:  # GraphError: no parameter bytes, or nothing left for activations
            raise InputError(str(exc)) from None
    return budget


def artifact_strategy(name: str, accounting: str) -> Any:
    """The artifact's version of baseline ``name`` under the paper's accounting, or None (use the registry's)."""
    if accounting != "paper":
        return None
    from remat.paper import ARTIFACT_BASELINES

    return ARTIFACT_BASELINES.get(name)

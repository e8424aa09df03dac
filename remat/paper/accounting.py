"""The Checkmate artifact's memory accounting, as graph and budget transforms (measured in README, "Reproduction").

Read from its public ``mlsys20_artifact`` branch and checked by reproducing its figures:

* the platform is ``16 * 1000**3`` bytes ("16 GB", not 16 GiB: 7.4 % less);
* the MILP's ``U`` has no constant term (eq. 2 without ``M_input + 2 M_param``) and the
  network inputs are never counted; instead twice the parameter bytes (parameters and
  their gradients) are taken off the budget: ``budget - 2 P`` for the MILP, for the
  budget sweep's x axis and for the max-batch MILP;
* its max-batch *baselines* compared a peak that already included ``2 P`` with
  ``16 GB - 2 P``: parameter memory subtracted twice, ``budget - 4 P`` for the
  activations (PRIOR-ART.md).

``paper_graph`` drops the constant overhead (our reference graphs carry none
anyway) and ``paper_budget`` maps a device budget to the activation budget each
role saw. ``P`` for the reference graphs comes from :data:`REFERENCE_PARAMETER_BYTES`.
"""

from __future__ import annotations

from remat.graph import DFGraph, GraphError

PAPER_PLATFORM_MEMORY = 16 * 1000**3  # the artifact's platform_memory("p32xlarge"), a V100

# (trainable + non-trainable weights) x 4 bytes of each reference model, from remat.keras.extract_zoo_model, whose
# graphs equal the reference files node for node (tests/keras/tf_extract.py checks both).
REFERENCE_PARAMETER_BYTES = {
    "vgg16": 553_430_176,
    "vgg19": 574_668_960,
    "mobilenet": 17_015_456,
    "resnet50": 102_546_848,
    "vgg_unet": 49_331_020,
    "fcn8_vgg": 537_827_940,
    "segnet": 14_829_644,
}
ROLES = {"solver": 2, "max_batch_baseline": 4}


def parameter_bytes(graph: DFGraph) -> int:
    """The model's parameter bytes ``P``: recorded by the front end, or the reference table by graph name."""
    recorded = graph.metadata.get("parameter_bytes")
    if recorded is not None:
        return int(recorded)
    if graph.name in REFERENCE_PARAMETER_BYTES:
        return REFERENCE_PARAMETER_BYTES[graph.name]
    if graph.parameter_memory:
        return graph.parameter_memory // 2  # our front ends count parameters and their gradients
    raise GraphError(f"graph {graph.name!r} records no parameter bytes: the paper's accounting needs them "
                     f"(extract it with a front end, or use a reference graph)")


def paper_graph(graph: DFGraph) -> DFGraph:
    """The graph as the artifact's MILP saw it: no constant overhead (inputs, parameters) inside U."""
    return graph.with_constant_memory(0)


def paper_budget(budget: float, parameters: int, role: str = "solver") -> float:
    """The activation budget the artifact compared with: ``budget - 2 P`` (``solver``: the MILP, LP rounding, the
    budget sweep) or ``budget - 4 P`` (``max_batch_baseline``: its max-batch baselines' double subtraction)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: pick one of {', '.join(ROLES)}")
    room = float(budget) - ROLES[role] * int(parameters)
    if room <= 0:
        raise GraphError(f"a budget of {budget:.6g} B leaves nothing for activations once {ROLES[role]} x "
                         f"{parameters} B of parameter memory is taken off (the paper's accounting): raise it")
    return room

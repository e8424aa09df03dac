"""What it takes to reproduce the paper's own numbers (Checkmate, MLSys 2020), kept apart from our accounting.

``accounting`` holds the artifact's memory conventions (16 GB as 16e9 bytes; parameter
memory left out of the schedule and subtracted from the budget, twice by its
max-batch baselines) and the parameter bytes of the reference graphs; ``artifact``
builds the artifact's baseline schedules (its checkpoint-set rules, its reporting
simulator's stage-start frees as a schedule transform) so that ``simulate()`` judges
them like every other schedule; ``pebbling`` proves small instances' optima for
App. A's integrality gap. Nothing here changes how the rest of the library counts.
"""

from remat.paper.accounting import (
    PAPER_PLATFORM_MEMORY,
    REFERENCE_PARAMETER_BYTES,
    paper_budget,
    paper_graph,
    parameter_bytes,
)
from remat.paper.artifact import (
    ARTIFACT_BASELINES,
    artifact_checkpoint_s,
    artifact_max_batch,
    artifact_schedule,
    drop_stage_start_frees,
)
from remat.paper.pebbling import pebbling_lower_bound

__all__ = ["ARTIFACT_BASELINES", "PAPER_PLATFORM_MEMORY", "REFERENCE_PARAMETER_BYTES", "artifact_checkpoint_s",
           "artifact_max_batch", "artifact_schedule", "drop_stage_start_frees", "paper_budget", "paper_graph",
           "parameter_bytes", "pebbling_lower_bound"]

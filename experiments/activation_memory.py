"""Fig. 3: memory of activations versus parameters for each zoo model.

The numbers come from ``remat.models.activation_memory_table()`` (the model zoo);
this module only writes them to ``results/activation_memory.csv``.
Figure: ``python -m analysis fig3``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.common import MissingAPIError, as_list
from experiments.sweep import results_file, settings


def main(cfg: Any, output_dir: Path) -> Path:
    try:
        from remat.models import activation_memory_table
    except ImportError:
        raise MissingAPIError("activation_memory needs remat.models.activation_memory_table() (model zoo, issue 4), "
                              "which is not available yet") from None
    import pandas as pd

    grid = settings(cfg)
    models = [str(m) for m in as_list(grid.get("models"))]
    table = pd.DataFrame(activation_memory_table(models=models or None))
    table["platform"], table["platform_memory"] = cfg.platform.name, cfg.platform.memory
    out = results_file(cfg, grid["name"])
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    return out

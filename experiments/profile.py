"""Per-node timings of every zoo model on the current device, saved as cost files.

Each model is extracted with ``cost_model="profile"`` (measured on CPU here, on
CUDA where present, as the paper did on a V100) and saved as a graph JSON under
``results/profiles/``; ``cost_model=profile`` in run.py and the sweeps then reads
that file instead of profiling again. A summary row per model goes to
``results/profile.csv``.
"""

from __future__ import annotations

import platform as host
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.common import PROJECT_ROOT, InputError, as_list, write_rows
from experiments.graphs import _torch_graph, current_device, model_config, profile_path
from experiments.sweep import results_file, settings

COLUMNS = ["model", "resolution", "batch_size", "device", "device_name", "n_nodes", "total_cost", "cost_unit",
           "seconds", "path", "timestamp"]


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else (host.processor() or host.machine())


def main(cfg: Any, output_dir: Path) -> Path:
    from tqdm import tqdm

    grid = settings(cfg)
    models = [str(m) for m in as_list(grid.get("models"))]
    if not models:
        raise InputError("profile needs experiment.models=[...] (names in conf/model/)")
    rows = []
    for name in tqdm(models, desc="profile", unit="model"):
        spec = model_config(name)
        start = time.perf_counter()
        graph = _torch_graph(spec, "profile")
        path = profile_path(spec, cfg.paths.results)
        path.parent.mkdir(parents=True, exist_ok=True)
        graph.save(path)
        rows.append({"model": name, "resolution": "x".join(str(r) for r in spec["resolution"]),
                     "batch_size": spec["batch_size"], "device": current_device(), "device_name": device_name(),
                     "n_nodes": graph.n, "total_cost": graph.total_cost, "cost_unit": graph.cost_unit,
                     "seconds": time.perf_counter() - start, "path": _relative(path),
                     "timestamp": datetime.now(UTC).isoformat(timespec="seconds")})
    out = results_file(cfg, grid["name"])
    write_rows(out, rows, COLUMNS)
    return out


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)

"""PyTorch support: extract a training graph, run a schedule for real, and the one-call API.

``optimize(model, sample, budget)`` (:mod:`remat.torch.api`) is what
practitioners use. Behind it: ``trace`` (torch.fx tracing and per-node
execution), ``extract`` (the training :class:`~remat.graph.DFGraph`), ``costs``
(FLOP and profiled cost models), ``execute`` (the schedule executor) and
``memory`` (live-tensor and RSS meters).
"""

from remat.torch.api import RematError, RematModel, load, optimize
from remat.torch.execute import ScheduleExecutor, StepResult
from remat.torch.extract import ExtractionError, extract
from remat.torch.train import train

__all__ = ["ExtractionError", "RematError", "RematModel", "ScheduleExecutor", "StepResult", "extract", "load",
           "optimize", "train"]

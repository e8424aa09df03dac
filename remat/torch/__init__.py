"""PyTorch support: extract a training graph, run a schedule for real, and the one-call API.

``optimize(model, sample, budget)`` (:mod:`remat.torch.api`) is what
practitioners use. Behind it: ``inputs`` (the sample a model is called with),
``trace`` and ``walk`` (torch.fx tracing, node roles, per-node execution),
``extract`` (the training :class:`~remat.graph.DFGraph`), ``losses``, ``costs``
(FLOP and profiled cost models), ``execute`` (the schedule executor), ``train``
and ``memory`` (live-tensor and RSS meters).
"""

from remat.torch.api import RematError, RematModel, load, optimize
from remat.torch.execute import ScheduleExecutor, StepResult
from remat.torch.extract import ExtractionError, extract
from remat.torch.inputs import Sample
from remat.torch.train import train

__all__ = ["ExtractionError", "RematError", "RematModel", "Sample", "ScheduleExecutor", "StepResult", "extract",
           "load", "optimize", "train"]

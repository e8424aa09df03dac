"""The errors of the PyTorch front end; each message names the cause and what to do."""

from __future__ import annotations


class ExtractionError(ValueError):
    """A model the extractor cannot turn into a graph; the message names the cause and the fix."""


class ExecutionError(ValueError):
    """A model, graph, schedule or batch the executor refuses; the message names the cause and the fix."""


class StepOutOfMemory(RuntimeError):
    """The device ran out of memory during a step; the message gives the step and the plan position."""

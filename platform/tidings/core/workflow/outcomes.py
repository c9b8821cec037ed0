"""How a workflow instance ended, and the statuses an instance reports."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from tidings.core.workflow.failures import StepError


class WorkflowStatus(str, Enum):
    """What ``handle.status(id)`` reports."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAULTED = "FAULTED"
    CANCELLED = "CANCELLED"
    PARKED = "PARKED"


@dataclass(frozen=True, slots=True)
class Finished:
    """The body returned ``value``."""

    value: Any


@dataclass(frozen=True, slots=True)
class Faulted:
    """The body raised; ``error`` is the stored failure. Final: nothing restarts it."""

    error: StepError


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The instance was cancelled and the body let the cancellation pass."""


Outcome = Finished | Faulted | Cancelled
"""How an instance ended."""

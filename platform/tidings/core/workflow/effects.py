"""What the shell must do after it has journaled a decision's records.

Effects are instructions, never side effects of the core: the shell writes the records
first, then carries the effects out. After a restart it replays the journal and gets the
effects of every pending step again, so an effect lost in a crash is re-issued.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidings.core.workflow.child_records import AckParent, CancelChild, StartChild, TellParent
from tidings.core.workflow.outcomes import Outcome
from tidings.core.workflow.sends import SendCommand, StopSend
from tidings.core.workflow.signal_sends import SendSignal, StopSignal
from tidings.core.workflow.updates import AnswerUpdate


class Cancellation:
    """A flag an activity can poll, set when its step is cancelled or abandoned.

    Thread-safe, so a sync function running in a worker thread can check it. The
    ``threading.Event`` behind ``wait`` is made on first use: almost no attempt is ever
    cancelled or waited on, and building one per attempt cost a busy worker a fifth of
    its loop's time.
    """

    __slots__ = ("_set", "_event", "_lock")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None
        self._lock = threading.Lock()  # a bare lock is cheap; an Event builds a Condition

    @property
    def cancelled(self) -> bool:
        """True once the step was cancelled."""
        return self._set

    def cancel(self) -> None:
        """Set the flag (the shell calls this on ``CancelActivity``)."""
        with self._lock:
            self._set = True
            if self._event is not None:
                self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds for cancellation; return whether it happened."""
        with self._lock:
            if self._set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What an activity function receives.

    Attributes:
        idempotency_key: ``{workflow}/{instance_id}/{path}``: the same for every attempt of
            the step and across restarts. Pass it to the external system.
        number: 1 for the first attempt (also the first after a restart).
        cancellation: Set when the step is cancelled or abandoned.
    """

    idempotency_key: str
    number: int
    cancellation: Cancellation = field(default_factory=Cancellation)


@dataclass(frozen=True, slots=True)
class RunActivity:
    """Call ``fn(Attempt(idempotency_key, attempt))`` at ``not_before`` (ms) or later.

    ``fn`` may be sync (run it in a thread) or return an awaitable. Report the end with
    ``ActivityResult(path, attempt, ...)``; give the attempt up at ``timeout_at`` (ms) and
    report ``timed_out=True``.
    """

    path: str
    name: str
    attempt: int
    fn: Callable[[Attempt], Any] = field(repr=False, compare=False)
    idempotency_key: str
    not_before: int
    timeout_at: int | None = None


@dataclass(frozen=True, slots=True)
class CancelActivity:
    """Cancel the running or scheduled attempt at ``path``; its result will be ignored."""

    path: str


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Send ``TimerFired(path)`` at ``due`` (ms); at once when ``due`` has passed."""

    path: str
    due: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """The timer at ``path`` is no longer needed (firing it anyway is harmless)."""

    path: str


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    """The instance ended: publish ``outcome`` (to the compacted outcomes topic)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class ReportParked:
    """The body no longer matches its journal: log ``reason``, publish status PARKED."""

    reason: str


@dataclass(frozen=True, slots=True)
class DropRun:
    """The instance continued as new: its earlier run's records, seqs ``first`` to ``last``,
    are no longer its history. Once this decision's records (the new run's ``Started``) are
    stored, tombstone them (journal key ``{id}/{seq}``, null value) and drop them from the
    shell's store. Lost in a crash, it comes again from the replay (``continuing.current_run``)."""

    first: int
    last: int


Effect = (
    RunActivity | CancelActivity | ArmTimer | CancelTimer | PublishOutcome | ReportParked
    | SendCommand | StopSend | SendSignal | StopSignal | StartChild | CancelChild | AckParent | TellParent
    | AnswerUpdate | DropRun
)
"""Anything a ``Decision`` asks the shell to do."""

"""The messages that go into a workflow instance, one at a time, through ``advance``.

The shell builds them from the instance's inbox topic (``Start``, ``Signal``, ``Cancel``)
and from its own work (``ActivityResult`` when an attempt ends, ``TimerFired`` when an armed
timer is due). Values are Python objects; the core encodes them to JSON for the journal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidings.core.workflow.sends import CommandReplied, EventsSeen, SendTimedOut
from tidings.core.workflow.signal_sends import SignalReplied, SignalTimedOut
from tidings.core.workflow.child_records import ChildEnded, ChildStarted, ParentRef
from tidings.core.workflow.updates import Update


@dataclass(frozen=True, slots=True)
class Start:
    """Start the instance with ``input``. Idempotent: a second start changes nothing.

    ``parent`` names the workflow step that started this instance as its child.
    ``outcome_json``: the start came as JSON; its outcome record is to be JSON too.
    ``traceparent``: the W3C trace context of the run's span, journaled in ``Started`` so the
    run's later spans go on under it after a restart (None: not traced).
    ``signal``: a signal-with-start's signal. It is journaled right after ``Started``, before
    the body runs, so the body finds it stored however soon it looks (or ends without it);
    replay applies a ``SignalReceived`` that follows ``Started`` the same way.
    ``update``: an update-with-start's update, checked before anything is stored and
    journaled right after ``Started`` the same way (``core/workflow/updates.py``).
    """

    input: Any = None
    parent: ParentRef | None = None
    outcome_json: bool = False
    traceparent: str | None = None
    signal: Signal | None = None
    update: Update | None = None


@dataclass(frozen=True, slots=True)
class Signal:
    """Deliver the signal ``name`` with ``payload``; stored on arrival.

    ``id``, when given, names the signal: an instance stores a signal id once, so a sender
    that repeats a signal (a projection handling a re-delivered event) stores nothing more.
    """

    name: str
    payload: Any = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel the instance. A second cancel changes nothing."""


@dataclass(frozen=True, slots=True)
class ActivityResult:
    """Attempt ``attempt`` of the activity at ``path`` ended.

    Exactly one of these holds: ``error`` is None and ``value`` is the result; ``error`` is
    the exception the function raised; ``timed_out`` is True because the attempt reached
    its ``timeout_at``. A result for an attempt that is no longer current is ignored.
    """

    path: str
    attempt: int
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class TimerFired:
    """The timer armed for ``path`` is due. A timer of a step no longer pending is ignored."""

    path: str


InboxMessage = (
    Start | Signal | Cancel | ActivityResult | TimerFired | Update
    | CommandReplied | EventsSeen | SendTimedOut | ChildStarted | ChildEnded | SignalReplied | SignalTimedOut
)
"""Anything ``WorkflowInstance.advance`` takes (the send step's messages: ``sends.py``; the child
steps': ``child_records.py``)."""

"""The plain values child workflows move around: handles, parent references, inputs, effects.

A leaf module (it imports only ``failures``), so the inbox messages, effects and journal
records that ``inbox.py``, ``effects.py`` and ``journal.py`` list can live here without an
import cycle; the rules that use them are in ``tidings.core.workflow.children``.

How a child runs (see ``docs/workflows.md``, "Start other workflows"):

1. The parent's ``start_child`` step stores its start and asks the shell to ``StartChild``:
   a ``start`` request to the child workflow's inbox that names the parent (``ParentRef``).
2. The child stores ``Started`` with the parent in it and asks its shell to ``AckParent``:
   a ``child_started`` record to the parent's inbox. The parent takes it as
   ``ChildStarted`` and completes the step with the child's ``ChildHandle``.
3. When the child ends, its shell sends ``TellParent``: a ``child_ended`` record that the
   parent takes as ``ChildEnded`` and journals as a ``ChildOutcome`` record, which an
   ``await_child`` step consumes now or later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidings.core.workflow.failures import StepError


@dataclass(frozen=True, slots=True)
class ChildHandle:
    """A started child workflow: what ``ctx.start_child`` gives and ``ctx.await_child`` takes.

    Attributes:
        workflow: The child's workflow name.
        id: The child's instance id: the parent's id, a colon, and the path of the step
            that started it (``order-17:3``).
        result_type: How ``await_child`` reads the child's result by default (the child
            workflow's declared result type); not part of the handle's identity.
    """

    workflow: str
    id: str
    result_type: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ParentRef:
    """The parent of a child instance: its workflow, its instance id and the starting step's path.

    ``token`` is the random token the parent drew when that step started (``StepStarted.token``):
    the child stores it and every report it sends the parent carries it, and the parent
    accepts no report without it. Only workers see it (it travels on inboxes and is kept in
    journals, which clients may not read), so a client that may write the parent's inbox
    cannot end the parent's step with a made-up outcome. None for a parent started before
    tokens existed (its reports are not checked).
    """

    workflow: str
    instance_id: str
    path: str
    token: str | None = None


# -- inbox messages of a parent -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildStarted:
    """The child started at step ``path`` (a ``workflow`` instance) has stored its start.

    ``token``: the one the report carries (``ParentRef.token``).
    """

    path: str
    workflow: str
    token: str | None = None


@dataclass(frozen=True, slots=True)
class ChildEnded:
    """The child started at step ``path`` ended: ``outcome`` with ``result`` (JSON text) or ``error``.

    ``token``: the one the report carries (``ParentRef.token``).
    """

    path: str
    workflow: str
    outcome: str
    result: str | None = None
    error: StepError | None = None
    token: str | None = None


# -- the journal record of a parent -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """The child started at step ``path`` (workflow ``name``) ended at ``at`` (ms), stored on arrival.

    Stored like a signal: an ``await_child`` reached later still finds it, and replay
    gives every await the same outcome. Its fields are fields the journal's Avro record
    already has, so it needs no new schema.
    """

    seq: int
    path: str
    name: str
    outcome: str
    at: int
    result: str | None = None
    error: StepError | None = None


# -- effects ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartChild:
    """Send a ``start`` of ``child_id`` (workflow ``workflow``, input ``input`` as JSON text) naming ``parent``.

    Idempotent per child id: a repeat reaches the same child, which acknowledges again.
    """

    path: str
    workflow: str
    child_id: str
    input: str
    parent: ParentRef


@dataclass(frozen=True, slots=True)
class CancelChild:
    """Send a ``cancel`` to ``child_id`` (workflow ``workflow``). Issued live, once; never on replay."""

    workflow: str
    child_id: str


@dataclass(frozen=True, slots=True)
class AckParent:
    """This instance, a child, has stored its start: tell ``parent`` (a ``child_started`` record)."""

    parent: ParentRef
    workflow: str


@dataclass(frozen=True, slots=True)
class TellParent:
    """This instance, a child, has ended: tell ``parent`` (a ``child_ended`` record)."""

    parent: ParentRef
    workflow: str
    outcome: str
    result: str | None = None
    error: StepError | None = None


ChildEffect = StartChild | CancelChild | AckParent | TellParent
"""The effects of child workflows; the shell sends each as one inbox record."""

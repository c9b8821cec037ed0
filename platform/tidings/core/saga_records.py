"""The records a saga writes to Kafka, as plain immutable values.

A saga (``app.saga``, docs/sagas.md) moves two kinds of records of its own:

- ``SagaJournalEntry``: one step of one saga on ``{app}.saga.{name}.journal`` (compacted),
  key ``{saga_id}/{seq}``: a state entered (its JSON, when, why, and the commands its
  ``on_enter`` sent), or the end (``ended``). The journal is the saga's whole history.
- ``SagaRouted``: a stored event of a subscribed aggregate, routed to the saga's inbox
  ``{app}.saga.{name}.inbox`` keyed by its correlation id (the saga id).

Replies to the saga's commands are the aggregates' own ``ReplyEnvelope`` records on
``{app}.saga.{name}.replies``. User values (states, commands) stay opaque here: JSON bytes
and a stable type name, as in ``tidings.core.records``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.records import EventEnvelope


@dataclass(frozen=True, slots=True)
class SagaCommandRecord:
    """One command a state's ``on_enter`` sent, as the journal keeps it.

    Everything needed to send it again with the same id: a command whose sending was not
    acknowledged before a crash is sent again from here after the restart.
    """

    aggregate: str
    aggregate_id: str
    command_id: str
    type: str
    payload: bytes
    expect_within_ms: int | None = None
    resend_every_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SagaJournalEntry:
    """One record of a saga's journal (key ``{saga_id}/{seq}``), ``seq`` 1, 2, ...

    Attributes:
        saga: The saga definition's name.
        saga_id: The saga's id (the correlation id of its starting event).
        seq: The record's position in the saga, from 1.
        entered_at_ms: When the state was entered (expectations' deadlines count from it).
        transition: Why: ``start`` (the starting event), ``handle`` (an event),
            ``expectation`` (an ``ExpectationExhausted``), ``goto`` (``on_enter`` went on),
            ``stop`` (``on_enter`` stopped: the saga ended) or ``fault`` (the saga could
            not go on, e.g. an endless ``Goto`` chain: ended, ``reason`` says why).
        state: The JSON of the state entered; on an ended record, the last state.
        ended: The saga has ended; no record follows.
        cause: The id of the event that caused it, ``expectation:{command_id}``, or None.
        events: The ids of the events handled since the previous record, the cause
            last: what makes a second copy of an event (it comes through the events
            topic and in the reply) a no-op after a restart.
        commands: The commands ``on_enter`` of this state sent, in order.
        reason: Why the saga faulted.
    """

    saga: str
    saga_id: str
    seq: int
    entered_at_ms: int
    transition: str
    state: bytes | None
    ended: bool = False
    cause: str | None = None
    events: tuple[str, ...] = ()
    commands: tuple[SagaCommandRecord, ...] = ()
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SagaRouted:
    """A stored event of ``aggregate`` routed to saga ``saga``'s inbox.

    Keyed by ``event.correlation_id`` (the saga id), on partition ``murmur2`` of it.
    """

    saga: str
    aggregate: str
    event: EventEnvelope

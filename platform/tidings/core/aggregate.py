"""Aggregates: pure decisions over one instance's state.

An aggregate is ``decide(command, state) -> Decision`` and ``fold(event, state) -> state``.
This module turns one command envelope plus the instance's current record into the events
to store and the reply, and folds stored events back when the state is rebuilt from the
journal. It performs no I/O: time comes in as ``now_ms`` and payload encoding as a function.

Rules (SPEC §3):
- ``Persist(e)`` stores one event at version n+1; ``PersistAll([...])`` stores them as one
  batch at n+1, n+2, ...; ``Defer(e)`` folds ``e`` into the live state only (never stored,
  version unchanged); ``Ignore()`` changes nothing.
- A command whose ``command_id`` was seen gets its first verdict again; decide is not called.
  Whether it was seen is the shell's to answer (``seen``): first verdicts are kept by time,
  ``command_retention`` of the definition (default 7 days), however many other commands
  the instance took in between (docs/aggregates.md, "Repeated commands").
- A command whose ``expected_version`` differs from the persisted version is refused with
  status ``conflict``; the caller raises ``AggregateVersionConflict``.
- A command whose stored events would start a saga this instance already started for the
  command's correlation id (or start one saga twice) is refused with status ``rejected``
  and a reason starting ``SagaAlreadyStarted:``; nothing is stored (``saga_starts.py``).
- When rebuilding, an event whose version is not exactly n+1 is skipped, so a journal read
  in offset order yields one deterministic history even if a record was written twice.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Final, Generic, TypeVar

from ..errors import DefinitionError
from .records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from .saga_starts import SagaRefusal, SagaStarter, StartedLookup, check_saga_starts

C = TypeVar("C")
E = TypeVar("E")
S = TypeVar("S")

#: How long a command's first verdict is remembered by default: a resend within it gets that
#: verdict again. Days, not minutes: it must outlast every resend the platform makes itself
#: (``Retry.command``: 5 minutes; saga expectations; ``App(command_timeout)``).
DEFAULT_COMMAND_RETENTION = timedelta(days=7)

# Event ids derive from the command id, so a re-processed command yields the same ids.
_EVENT_ID_NAMESPACE = uuid.UUID("6f1d2c8e-3b1a-4c56-9a57-0e7f5b8a2d41")
_EVENT_ID_NAMESPACE_BYTES: Final = _EVENT_ID_NAMESPACE.bytes
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class Persist(Generic[E]):
    """Store ``event`` as the next version and fold it."""

    event: E


@dataclass(frozen=True, slots=True, init=False)
class PersistAll(Generic[E]):
    """Store ``events`` atomically at sequential versions and fold them in order."""

    events: tuple[E, ...]

    def __init__(self, events: Iterable[E]) -> None:
        object.__setattr__(self, "events", tuple(events))


@dataclass(frozen=True, slots=True)
class Defer(Generic[E]):
    """Publish ``event`` in the reply and fold it live; never store it."""

    event: E


@dataclass(frozen=True, slots=True)
class Ignore:
    """Do nothing; the reply says the command was ignored."""


Decision = Persist[Any] | PersistAll[Any] | Defer[Any] | Ignore


@dataclass(frozen=True)
class AggregateDefinition(Generic[C, E, S]):
    """A validated aggregate: its name, pure functions and payload types.

    ``command_types`` and ``event_types`` map each stable type name to its class.
    ``command_retention`` is how long a command id's first verdict is remembered.
    """

    name: str
    initial: S
    decide: Callable[[C, S], Decision]
    fold: Callable[[E, S], S]
    command_types: Mapping[str, type]
    event_types: Mapping[str, type]
    command_retention: timedelta = DEFAULT_COMMAND_RETENTION

    def __post_init__(self) -> None:
        reasons: list[str] = []
        if not _NAME.match(self.name or ""):
            reasons.append(f"name {self.name!r} must be letters, digits, '_' or '-'")
        if not callable(self.decide):
            reasons.append("decide must be callable: decide(command, state) -> Decision")
        if not callable(self.fold):
            reasons.append("fold must be callable: fold(event, state) -> state")
        if not self.command_types:
            reasons.append("command= must name at least one command type")
        if not self.event_types:
            reasons.append("event= must name at least one event type")
        if not isinstance(self.command_retention, timedelta) or self.command_retention <= timedelta(0):
            reasons.append(f"command_retention must be a positive timedelta, not {self.command_retention!r}")
        if reasons:
            raise DefinitionError(f"aggregate {self.name!r}", reasons)

    @property
    def command_retention_ms(self) -> int:
        """``command_retention`` in milliseconds."""
        return int(self.command_retention.total_seconds() * 1000)


@dataclass(frozen=True, slots=True)
class AggregateInstance(Generic[S]):
    """What one instance knows: persisted state and version, live state.

    ``live`` differs from ``state`` only after a ``Defer``: deferred folds live in memory
    and are gone after a restart, as the reference specifies.
    """

    aggregate_id: str
    version: int
    state: S
    live: S

    @classmethod
    def new(cls, aggregate_id: str, initial: S) -> AggregateInstance[S]:
        return cls(aggregate_id, 0, initial, initial)


@dataclass(frozen=True, slots=True)
class Handled(Generic[S]):
    """The result of one command: the new instance, events to store, the reply.

    ``duplicate`` is true when the command id was seen before (reply comes from storage).
    ``sagas`` lists the (saga name, correlation id) pairs the stored events start, to be
    remembered with them.
    """

    instance: AggregateInstance[S]
    stored: tuple[EventEnvelope, ...]
    reply: ReplyEnvelope | None
    duplicate: bool = False
    sagas: tuple[tuple[str, str], ...] = ()


EncodePayload = Callable[[Any], tuple[str, bytes]]
SeenLookup = Callable[[str], bool]
"""Whether the instance gave ``command_id`` a verdict that is still remembered."""


def event_id_for(command_id: str, index: int) -> str:
    """Return the deterministic id of the ``index``-th event caused by ``command_id``.

    The UUID version 5 of ``{command_id}#{index}`` (what ``uuid.uuid5`` returns), computed
    here so that a command id holding a lone surrogate, which ``uuid.uuid5`` cannot encode,
    still gets a stable id instead of taking the worker down; decoding refuses such ids,
    so this only guards callers of the core that skip the codec.
    """
    name = f"{command_id}#{index}".encode("utf-8", "surrogatepass")
    # uuid.UUID(bytes=..., version=5) and its str, by hand: half the cost per event.
    raw = bytearray(hashlib.sha1(_EVENT_ID_NAMESPACE_BYTES + name, usedforsecurity=False).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def handle(
    definition: AggregateDefinition[Any, Any, S],
    instance: AggregateInstance[S],
    command: CommandEnvelope,
    value: Any,
    *,
    now_ms: int,
    encode: EncodePayload,
    starters: Sequence[SagaStarter] = (),
    started: StartedLookup | None = None,
    seen: SeenLookup | None = None,
) -> Handled[S]:
    """Decide one command against ``instance``.

    Args:
        definition: The aggregate.
        instance: The instance's current record.
        command: The envelope, for ids, expected version and timestamps.
        value: The decoded command payload given to ``decide``.
        now_ms: Timestamp for the new events and the reply.
        encode: Turns an event value into ``(type name, JSON bytes)``.
        starters: The sagas subscribed to this aggregate (``App.sagas_of``).
        started: Whether this instance already started a saga for a correlation id.
        seen: Whether this instance already gave ``command.command_id`` a verdict (the
            shell's store of first verdicts); None: nothing was seen.

    Returns:
        A ``Handled``. When the command id was seen before, ``duplicate`` is true,
        ``reply`` is None (the caller returns the stored first verdict) and nothing changes.
    """
    if seen is not None and seen(command.command_id):
        return Handled(instance, (), None, duplicate=True)
    if command.expected_version is not None and command.expected_version != instance.version:
        reply = _reply(command, instance.version, now_ms, "conflict")
        return _remember(instance, reply, ())
    decision = definition.decide(value, instance.live)
    saga_check = _SagaCheck(starters, started or _never_started)
    match decision:
        case Persist(event=event):
            return _persist(definition, instance, command, (event,), now_ms, encode, saga_check)
        case PersistAll(events=events):
            return _persist(definition, instance, command, events, now_ms, encode, saga_check)
        case Defer(event=event):
            type_name, payload = encode(event)
            envelope = _event(command, instance.version, 0, type_name, payload, now_ms, True)
            live = definition.fold(event, instance.live)
            reply = _reply(command, instance.version, now_ms, "accepted", (envelope,))
            return _remember(replace(instance, live=live), reply, ())
        case Ignore():
            return _remember(instance, _reply(command, instance.version, now_ms, "ignored"), ())
        case _:
            raise TypeError(
                f"decide of aggregate {definition.name!r} returned {decision!r}; "
                "return Persist(event), PersistAll(events), Defer(event) or Ignore()"
            )


def restore(
    definition: AggregateDefinition[Any, Any, S],
    instance: AggregateInstance[S],
    event: EventEnvelope,
    value: Any,
) -> AggregateInstance[S] | None:
    """Fold one stored event read back from the journal.

    Returns:
        The new instance, or None when ``event.version`` is not the next version (an
        already-applied or out-of-order record), which the caller skips.
    """
    if event.version != instance.version + 1 or event.deferred:
        return None
    state = definition.fold(value, instance.state)
    # A restored instance has no deferred folds: live equals persisted.
    return AggregateInstance(instance.aggregate_id, event.version, state, state)


def reply_for_stored(events: Iterable[EventEnvelope]) -> ReplyEnvelope:
    """Rebuild the first verdict of a command from the events it stored."""
    events = tuple(events)
    last = events[-1]
    return ReplyEnvelope(
        command_id=last.command_id,
        correlation_id=last.correlation_id,
        aggregate_id=last.aggregate_id,
        status="accepted",
        version=last.version,
        timestamp_ms=last.timestamp_ms,
        events=events,
    )


def _never_started(saga: str, correlation_id: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class _SagaCheck:
    starters: Sequence[SagaStarter]
    started: StartedLookup


def _persist(
    definition: AggregateDefinition[Any, Any, S],
    instance: AggregateInstance[S],
    command: CommandEnvelope,
    events: tuple[Any, ...],
    now_ms: int,
    encode: EncodePayload,
    saga_check: _SagaCheck,
) -> Handled[S]:
    if not events:
        return _remember(instance, _reply(command, instance.version, now_ms, "ignored"), ())
    stored: list[EventEnvelope] = []
    state, live, version = instance.state, instance.live, instance.version
    diverged = state is not live
    for index, event in enumerate(events):
        version += 1
        type_name, payload = encode(event)
        stored.append(_event(command, version, index, type_name, payload, now_ms, False))
        state = definition.fold(event, state)
        # Without a deferred fold pending, live and persisted are one value: fold once.
        live = definition.fold(event, live) if diverged else state
    sagas: tuple[tuple[str, str], ...] = ()
    if saga_check.starters:
        # Before anything is stored: a refused command changes nothing but its verdict,
        # which a repeat of the command gets again like any first verdict.
        verdict = check_saga_starts(
            saga_check.starters, zip(stored, events), saga_check.started,
            aggregate=definition.name,
        )
        if isinstance(verdict, SagaRefusal):
            refusal = _reply(command, instance.version, now_ms, "rejected", reason=verdict.reason)
            return _remember(instance, refusal, ())
        sagas = verdict.pairs
    reply = _reply(command, version, now_ms, "accepted", tuple(stored))
    updated = AggregateInstance(instance.aggregate_id, version, state, live)
    return _remember(updated, reply, tuple(stored), sagas)


def _remember(
    instance: AggregateInstance[S],
    reply: ReplyEnvelope,
    stored: tuple[EventEnvelope, ...],
    sagas: tuple[tuple[str, str], ...] = (),
) -> Handled[S]:
    return Handled(instance, stored, reply, sagas=sagas)


def _event(
    command: CommandEnvelope,
    version: int,
    index: int,
    type_name: str,
    payload: bytes,
    now_ms: int,
    deferred: bool,
) -> EventEnvelope:
    return EventEnvelope(
        event_id=event_id_for(command.command_id, index),
        command_id=command.command_id,
        correlation_id=command.correlation_id,
        aggregate_id=command.aggregate_id,
        version=version,
        type=type_name,
        payload=payload,
        timestamp_ms=now_ms,
        deferred=deferred,
        metadata=dict(command.metadata),
    )


def _reply(
    command: CommandEnvelope,
    version: int,
    now_ms: int,
    status: Any,
    events: tuple[EventEnvelope, ...] = (),
    *,
    reason: str | None = None,
) -> ReplyEnvelope:
    return ReplyEnvelope(
        command_id=command.command_id,
        correlation_id=command.correlation_id,
        aggregate_id=command.aggregate_id,
        status=status,
        version=version,
        timestamp_ms=now_ms,
        events=events,
        expected_version=command.expected_version,
        reason=reason,
    )


__all__ = [
    "AggregateDefinition",
    "AggregateInstance",
    "DEFAULT_COMMAND_RETENTION",
    "Decision",
    "Defer",
    "Handled",
    "Ignore",
    "Persist",
    "PersistAll",
    "SeenLookup",
    "event_id_for",
    "handle",
    "reply_for_stored",
    "restore",
]

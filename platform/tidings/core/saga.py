"""Sagas: states and transitions driven by stored events (SPEC §4), as a pure state machine.

A saga starts from a stored event that its ``start_on`` accepts; its id is that event's
correlation id, and every command it sends carries that id as its correlation id, so the
events those commands cause come back to it. It is states and transitions:

- ``handle(event, state) -> new state | None``: an event (or ``ExpectationExhausted``)
  moves it to a new state, or None leaves it where it is (the event is not for it);
- ``on_enter(state, recovering) -> (transition, commands)``: entering a state sends
  commands (``Send``) and stays (``Stay()``), goes on to another state at once
  (``Goto(state)``) or ends the saga (``Stop()``).

This module decides; it does no I/O. Given what the saga's journal holds (``restore``)
and one input (``feed`` an event, ``fire`` a timer, ``recover`` after a restart), it
returns a ``SagaStep``: the journal records to write, the commands to send once those are
acknowledged, and the timers to arm. The shell (``tidings.shell.kinds.saga.agent``) writes
them in that order.

Ids: the command id of the ``index``-th command of the state at ``seq`` is
``saga_command_id(name, saga_id, seq, index)``, so a command sent again (after a restart,
or by an expectation) is recognised by the aggregate and stores nothing twice.

Expectations: ``Send(..., expect=Expect(within, resend_every))`` sends the command again
every ``resend_every`` from the state's stored entry time while the saga stays in that
state, and after ``within`` gives ``handle`` an ``ExpectationExhausted``. Both count from
the entry time in the journal, so a restart does not extend them.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Literal

from pydantic import TypeAdapter

from tidings.core.limits import MAX_ID_BYTES, check_id
from tidings.core.records import CommandEnvelope
from tidings.core.saga_records import SagaCommandRecord, SagaJournalEntry
from tidings.errors import DefinitionError, HandlerFailed, RecordError

#: How many states one input may enter through ``Goto`` before the saga faults.
MAX_CHAIN = 100

_COMMAND_ID_NAMESPACE = uuid.UUID("6f0d6a4e-5b8c-4c1e-9a57-3d0a1c8e5b21")


# -- what user code sees and returns --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SagaEvent:
    """An event of an aggregate, as ``start_on`` and ``handle`` see it.

    ``value`` is the event decoded with the aggregate's event types; ``deferred`` is true
    for an event the aggregate published without storing it (it only comes in a reply,
    and starts no saga).
    """

    aggregate: str
    aggregate_id: str
    event_id: str
    command_id: str
    correlation_id: str
    version: int
    type: str
    value: Any
    deferred: bool = False


@dataclass(frozen=True, slots=True)
class ExpectationExhausted:
    """Given to ``handle`` when a state's expectation ran out: no event moved it in time.

    ``aggregate`` is the aggregate's name, ``command`` the command the expectation sent.
    """

    aggregate: str
    aggregate_id: str
    command: Any


@dataclass(frozen=True, slots=True)
class Stay:
    """``on_enter``'s transition: stay in the state and wait for events."""


@dataclass(frozen=True, slots=True)
class Goto:
    """``on_enter``'s transition: enter ``state`` at once (its ``on_enter`` runs next)."""

    state: Any


@dataclass(frozen=True, slots=True)
class Stop:
    """``on_enter``'s transition: the saga ends once its commands are sent."""


Transition = Stay | Goto | Stop


@dataclass(frozen=True, slots=True)
class Expect:
    """Expect an event within ``within`` of entering the state, resending the command
    every ``resend_every`` meanwhile (None: send once)."""

    within: timedelta
    resend_every: timedelta | None = None


@dataclass(frozen=True, slots=True)
class Send:
    """A command ``on_enter`` sends to ``aggregate`` (an aggregate handle) ``aggregate_id``.

    Raises:
        DefinitionError: ``expect`` resends for longer than the aggregate remembers a
            command id (its ``command_retention``): a late resend would be decided again.
    """

    aggregate: Any
    aggregate_id: str
    command: Any
    expect: Expect | None = None

    def __post_init__(self) -> None:
        retention = getattr(getattr(self.aggregate, "definition", None), "command_retention", None)
        within = getattr(self.expect, "within", None)
        if isinstance(retention, timedelta) and isinstance(within, timedelta) and within > retention:
            raise DefinitionError(f"Send to {self.aggregate.name}", [
                f"Expect(within={within}) resends longer than the aggregate remembers a command id "
                f"(command_retention={retention}): shorten within, or declare the aggregate with a "
                f"longer command_retention"])


def saga_command_id(name: str, saga_id: str, seq: int, index: int) -> str:
    """Return the command id of the ``index``-th command of saga ``saga_id``'s state ``seq``.

    Readable (``{name}:{saga_id}:{seq}:{index}``) when that fits an id; else the saga id
    is replaced by a hash of it. The same arguments always give the same id, so the
    aggregate recognises a command sent again.
    """
    readable = f"{name}:{saga_id}:{seq}:{index}"
    if len(readable.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        return readable
    digest = hashlib.sha1(
        _COMMAND_ID_NAMESPACE.bytes + saga_id.encode("utf-8", "surrogatepass"), usedforsecurity=False
    ).hexdigest()
    return f"{name[:100]}#{digest}:{seq}:{index}"


# -- the definition -------------------------------------------------------------------------


StartOn = Callable[[SagaEvent], bool]
Handle = Callable[[Any, Any], Any]
OnEnter = Callable[[Any, bool], Any]
#: ``encode(aggregate, command) -> (type name, JSON bytes)``: the shell checks the
#: aggregate and the command's type and encodes it; what it raises fails the input.
EncodeCommand = Callable[[Any, Any], tuple[str, bytes]]


class SagaDefinition:
    """A saga: its name, its functions and how its states are stored.

    Args:
        name: The saga's name (a topic segment).
        start_on: ``start_on(event) -> bool``: whether a stored event starts a saga.
        initial: The state before the starting event.
        handle: ``handle(event | ExpectationExhausted, state) -> new state | None``.
        on_enter: ``on_enter(state, recovering) -> (transition, [Send, ...])``.
        state: The type states are read back with (a pydantic model, a union, ...);
            default ``type(initial)``.

    Raises:
        DefinitionError: listing every problem.
    """

    def __init__(
        self,
        name: str,
        *,
        start_on: StartOn,
        initial: Any,
        handle: Handle,
        on_enter: OnEnter,
        state: Any = None,
    ) -> None:
        reasons: list[str] = []
        if not isinstance(name, str) or not name or not all(ch.isalnum() or ch in "_-" for ch in name):
            reasons.append(f"name {name!r} must be letters, digits, '_' or '-'")
        for what, function in (("start_on", start_on), ("handle", handle), ("on_enter", on_enter)):
            if not callable(function):
                reasons.append(f"{what} must be callable")
        state_type = type(initial) if state is None else state
        adapter: TypeAdapter[Any] | None = None
        try:
            adapter = TypeAdapter(state_type)
            adapter.validate_json(adapter.dump_json(initial))
        except Exception as exc:  # noqa: BLE001 - any failure here is a definition problem
            reasons.append(f"initial {initial!r:.100} cannot be stored and read back as "
                           f"{state_type!r}: {type(exc).__name__}: {exc}")
        if reasons:
            raise DefinitionError(f"saga {name!r}", reasons)
        assert adapter is not None
        self.name = name
        self.start_on = start_on
        self.initial = initial
        self.handle = handle
        self.on_enter = on_enter
        self.state_type = state_type
        self._adapter = adapter

    def dump_state(self, state: Any) -> bytes:
        """Return the JSON of ``state``; raises if it cannot be stored and read back."""
        return self._adapter.dump_json(state)

    def load_state(self, data: bytes) -> Any:
        """Read a stored state back."""
        return self._adapter.validate_json(data)


# -- what the core knows of one saga, and what a step returns ------------------------------


@dataclass(frozen=True, slots=True)
class PlannedSend:
    """One command of the current state: the user's ``Send`` and its envelope."""

    index: int
    send: Send
    aggregate: str
    record: SagaCommandRecord


@dataclass(frozen=True, slots=True)
class SagaCommand:
    """A command to produce now: to ``aggregate`` (the ``Send``'s handle), its envelope."""

    aggregate: Any
    envelope: CommandEnvelope


TimerKind = Literal["resend", "deadline"]


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Arm a timer: at ``due_ms`` feed ``TimerFired(seq, index, kind, due_ms)``."""

    saga_id: str
    seq: int
    index: int
    kind: TimerKind
    due_ms: int


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A timer armed for the state at ``seq`` is due."""

    seq: int
    index: int
    kind: TimerKind
    due_ms: int


@dataclass(frozen=True, slots=True)
class SagaState:
    """What the core knows of one saga.

    ``seq``, ``state``, ``entered_at_ms``, ``ended``, ``seen`` (but ``unjournaled``) and
    ``commands`` come from the journal; ``sends`` (the current state's commands) and
    ``exhausted`` live in memory: ``recover`` rebuilds ``sends`` by running ``on_enter``
    again.
    """

    saga_id: str
    seq: int
    state: Any
    entered_at_ms: int
    ended: bool = False
    cause: str | None = None
    seen: frozenset[str] = frozenset()
    unjournaled: tuple[str, ...] = ()
    commands: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    sends: tuple[PlannedSend, ...] = ()
    exhausted: frozenset[int] = frozenset()
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SagaStep:
    """What one input decided: the saga now, records to journal, commands, timers.

    ``note`` says why nothing happened when nothing did (for logs and tests).
    """

    saga: SagaState | None
    records: tuple[SagaJournalEntry, ...] = ()
    commands: tuple[SagaCommand, ...] = ()
    timers: tuple[ArmTimer, ...] = ()
    note: str | None = None


# -- the entry points -----------------------------------------------------------------------


def restore(definition: SagaDefinition, records: Iterable[SagaJournalEntry]) -> SagaState | None:
    """Rebuild a saga from its journal records (any order; a repeated seq keeps the first).

    Returns:
        The saga, or None when there are no records. Its ``sends`` are empty: ``recover``
        runs ``on_enter`` again to know them.

    Raises:
        SchemaError: (from the state type) the last state no longer reads back.
    """
    by_seq: dict[int, SagaJournalEntry] = {}
    for record in records:
        by_seq.setdefault(record.seq, record)
    if not by_seq:
        return None
    ordered = [by_seq[seq] for seq in sorted(by_seq)]
    last = ordered[-1]
    seen: set[str] = set()
    commands: dict[str, str] = {}
    for record in ordered:
        seen.update(record.events)
        for command in record.commands:
            commands[command.command_id] = command.aggregate
    entered = next((r for r in reversed(ordered) if not r.ended), last)
    state = definition.load_state(last.state) if last.state is not None else None
    return SagaState(
        saga_id=last.saga_id,
        seq=last.seq,
        state=state,
        entered_at_ms=entered.entered_at_ms,
        ended=last.ended,
        cause=entered.cause,
        seen=frozenset(seen),
        commands=MappingProxyType(commands),
        reason=last.reason,
    )


def feed(
    definition: SagaDefinition,
    saga: SagaState | None,
    saga_id: str,
    event: SagaEvent,
    *,
    now_ms: int,
    encode: EncodeCommand,
    replies_topic: str,
) -> SagaStep:
    """Give ``event`` to saga ``saga_id`` (``saga`` None: it has not started).

    A saga that has not started starts when the event is stored (not deferred) and
    ``start_on`` accepts it, in the state ``handle(event, initial)`` gives (``initial``
    when it gives None). An ended saga
    and an event it handled already (by event id) change nothing.

    Raises:
        HandlerFailed: ``start_on``, ``handle`` or ``on_enter`` raised or returned
            something unusable; the saga is unchanged (the caller dead-letters the input).
    """
    if saga is None:
        if event.deferred:
            return SagaStep(None, note="a deferred event starts no saga")
        if not _call(definition, "start_on", definition.start_on, event):
            return SagaStep(None, note="start_on did not accept the event")
        new = _call(definition, "handle", definition.handle, event, definition.initial)
        if new is None:
            # start_on alone decides a start, as the aggregate's SagaAlreadyStarted check
            # does (core/saga_starts.py): the saga starts in its initial state.
            new = definition.initial
        return _enter(definition, None, saga_id, new, transition="start", cause=event.event_id,
                      events=(event.event_id,), now_ms=now_ms, encode=encode, replies_topic=replies_topic)
    if saga.ended:
        return SagaStep(saga, note="the saga has ended")
    if event.event_id in saga.seen:
        return SagaStep(saga, note="the event was handled already")
    new = _call(definition, "handle", definition.handle, event, saga.state)
    if new is None:
        seen = replace(saga, seen=saga.seen | {event.event_id},
                       unjournaled=saga.unjournaled + (event.event_id,))
        return SagaStep(seen, note="handle left the saga where it was")
    return _enter(definition, saga, saga_id, new, transition="handle", cause=event.event_id,
                  events=saga.unjournaled + (event.event_id,), now_ms=now_ms, encode=encode,
                  replies_topic=replies_topic)


def fire(
    definition: SagaDefinition,
    saga: SagaState,
    timer: TimerFired,
    *,
    now_ms: int,
    encode: EncodeCommand,
    replies_topic: str,
) -> SagaStep:
    """A timer of the state at ``timer.seq`` is due: resend its command or exhaust it.

    A timer of a state the saga has left, of an ended saga, or of an expectation that
    ran out already changes nothing.

    Raises:
        HandlerFailed: ``handle`` or ``on_enter`` raised; the saga is unchanged.
    """
    if saga.ended or timer.seq != saga.seq or timer.index in saga.exhausted:
        return SagaStep(saga, note="the timer's state is over")
    planned = next((p for p in saga.sends if p.index == timer.index), None)
    if planned is None or planned.send.expect is None:
        return SagaStep(saga, note="the state has no such expectation")
    deadline = saga.entered_at_ms + planned.record.expect_within_ms  # type: ignore[operator]
    if timer.kind == "resend":
        every = planned.record.resend_every_ms
        if every is None or timer.due_ms >= deadline:
            return SagaStep(saga, note="no resend is due")
        command = SagaCommand(planned.send.aggregate, _envelope(saga.saga_id, planned.record, saga.cause,
                                                                now_ms, replies_topic))
        timers: tuple[ArmTimer, ...] = ()
        if timer.due_ms + every < deadline:
            timers = (ArmTimer(saga.saga_id, saga.seq, timer.index, "resend", timer.due_ms + every),)
        return SagaStep(saga, commands=(command,), timers=timers)
    exhausted = ExpectationExhausted(planned.aggregate, planned.record.aggregate_id, planned.send.command)
    new = _call(definition, "handle", definition.handle, exhausted, saga.state)
    if new is None:
        return SagaStep(replace(saga, exhausted=saga.exhausted | {timer.index}),
                        note="handle left the saga where it was after its expectation ran out")
    return _enter(definition, saga, saga.saga_id, new, transition="expectation",
                  cause=f"expectation:{planned.record.command_id}", events=saga.unjournaled,
                  now_ms=now_ms, encode=encode, replies_topic=replies_topic)


def recover(
    definition: SagaDefinition,
    saga: SagaState,
    *,
    now_ms: int,
    encode: EncodeCommand,
    replies_topic: str,
) -> SagaStep:
    """Drive the current state again after a restart: ``on_enter(state, recovering=True)``.

    Its commands are sent again with the ids they had (same seq, same index); its
    expectations are armed from the stored entry time, so a deadline that passed while
    the worker was down fires at once, and resends go on at the next multiple of their
    interval. A ``Goto`` or ``Stop`` it returns is followed as on first entry (the journal
    may end in the middle of a chain that a crash cut short).

    Raises:
        HandlerFailed: ``on_enter`` raised or returned something unusable.
    """
    if saga.ended:
        return SagaStep(saga, note="the saga has ended")
    transition, sends = _on_enter(definition, saga.state, True)
    planned = _plan(definition, saga.saga_id, saga.seq, sends, encode)
    commands = tuple(SagaCommand(p.send.aggregate, _envelope(saga.saga_id, p.record, saga.cause, now_ms,
                                                             replies_topic)) for p in planned)
    known = dict(saga.commands)
    known.update((p.record.command_id, p.aggregate) for p in planned)
    current = replace(saga, sends=planned, exhausted=frozenset(), commands=MappingProxyType(known))
    if isinstance(transition, Stay):
        timers = _expectations(current, now_ms)
        return SagaStep(current, commands=commands, timers=timers)
    # The chain goes on from here: the state's own record is in the journal already.
    step = _follow(definition, current, transition, now_ms=now_ms, encode=encode, replies_topic=replies_topic)
    return replace(step, commands=commands + step.commands)


# -- entering states ------------------------------------------------------------------------


def _enter(
    definition: SagaDefinition,
    saga: SagaState | None,
    saga_id: str,
    new: Any,
    *,
    transition: str,
    cause: str | None,
    events: tuple[str, ...],
    now_ms: int,
    encode: EncodeCommand,
    replies_topic: str,
) -> SagaStep:
    """Enter ``new`` (and whatever ``Goto`` chain its ``on_enter`` starts)."""
    seq = (saga.seq if saga is not None else 0) + 1
    seen = (saga.seen if saga is not None else frozenset()) | set(events)
    known = dict(saga.commands) if saga is not None else {}
    records: list[SagaJournalEntry] = []
    commands: list[SagaCommand] = []
    state = new
    for _depth in range(MAX_CHAIN):
        stored, state = _stored(definition, state)
        next_transition, sends = _on_enter(definition, state, False)
        planned = _plan(definition, saga_id, seq, sends, encode)
        records.append(SagaJournalEntry(
            saga=definition.name, saga_id=saga_id, seq=seq, entered_at_ms=now_ms, transition=transition,
            state=stored, cause=cause, events=events, commands=tuple(p.record for p in planned),
        ))
        commands.extend(SagaCommand(p.send.aggregate, _envelope(saga_id, p.record, cause, now_ms, replies_topic))
                        for p in planned)
        known.update((p.record.command_id, p.aggregate) for p in planned)
        current = SagaState(saga_id, seq, state, now_ms, cause=cause, seen=frozenset(seen),
                            commands=MappingProxyType(dict(known)), sends=planned)
        if isinstance(next_transition, Stay):
            return SagaStep(current, tuple(records), tuple(commands), _expectations(current, now_ms))
        if isinstance(next_transition, Stop):
            ended = SagaJournalEntry(
                saga=definition.name, saga_id=saga_id, seq=seq + 1, entered_at_ms=now_ms, transition="stop",
                state=stored, ended=True,
            )
            records.append(ended)
            final = replace(current, seq=seq + 1, ended=True, sends=())
            return SagaStep(final, tuple(records), tuple(commands))
        state, transition, cause, events, seq = next_transition.state, "goto", None, (), seq + 1
    # A chain that long is a loop: fault the saga instead of spinning on it.
    before = saga.state if saga is not None else new
    reason = f"on_enter went on with Goto more than {MAX_CHAIN} times in a row (a Goto loop?)"
    start_seq = (saga.seq if saga is not None else 0) + 1
    fault = SagaJournalEntry(
        saga=definition.name, saga_id=saga_id, seq=start_seq, entered_at_ms=now_ms, transition="fault",
        state=_stored(definition, before)[0], ended=True, cause=records[0].cause if records else None,
        events=records[0].events if records else (), reason=reason,
    )
    faulted = SagaState(saga_id, start_seq, before, now_ms, ended=True, seen=frozenset(seen),
                        commands=MappingProxyType(dict(saga.commands) if saga is not None else {}),
                        reason=reason)
    return SagaStep(faulted, (fault,), note=reason)


def _follow(
    definition: SagaDefinition,
    saga: SagaState,
    transition: Goto | Stop,
    *,
    now_ms: int,
    encode: EncodeCommand,
    replies_topic: str,
) -> SagaStep:
    """Follow a ``Goto`` or ``Stop`` that ``on_enter`` gave on recovery."""
    if isinstance(transition, Stop):
        stored, _ = _stored(definition, saga.state)
        ended = SagaJournalEntry(
            saga=definition.name, saga_id=saga.saga_id, seq=saga.seq + 1, entered_at_ms=now_ms,
            transition="stop", state=stored, ended=True,
        )
        return SagaStep(replace(saga, seq=saga.seq + 1, ended=True, sends=()), (ended,))
    return _enter(definition, replace(saga, unjournaled=()), saga.saga_id, transition.state,
                  transition="goto", cause=None, events=saga.unjournaled, now_ms=now_ms, encode=encode,
                  replies_topic=replies_topic)


def _stored(definition: SagaDefinition, state: Any) -> tuple[bytes, Any]:
    """Return the JSON of ``state`` and the state read back from it (what a restart sees)."""
    try:
        data = definition.dump_state(state)
        return data, definition.load_state(data)
    except Exception as exc:
        raise HandlerFailed(
            f"saga {definition.name}: the state {state!r:.200} cannot be stored and read back as "
            f"{definition.state_type!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _on_enter(definition: SagaDefinition, state: Any, recovering: bool) -> tuple[Transition, list[Send]]:
    result = _call(definition, "on_enter", definition.on_enter, state, recovering)
    if not isinstance(result, tuple) or len(result) != 2:
        raise HandlerFailed(f"on_enter of saga {definition.name} returned {result!r:.200}; "
                            "return (Stay() | Goto(state) | Stop(), [Send(...), ...])")
    transition, sends = result
    if not isinstance(transition, (Stay, Goto, Stop)):
        raise HandlerFailed(f"on_enter of saga {definition.name} returned the transition "
                            f"{transition!r:.200}; return Stay(), Goto(state) or Stop()")
    try:
        sends = list(sends)
    except TypeError:
        raise HandlerFailed(f"on_enter of saga {definition.name} returned the commands {sends!r:.200}, "
                            "not a list of Send") from None
    for send in sends:
        if not isinstance(send, Send):
            raise HandlerFailed(f"on_enter of saga {definition.name} returned {send!r:.200} among its "
                                "commands, not a Send")
    return transition, sends


def _plan(
    definition: SagaDefinition, saga_id: str, seq: int, sends: Sequence[Send], encode: EncodeCommand
) -> tuple[PlannedSend, ...]:
    """Give each command its id and envelope fields; check what can be checked here."""
    planned = []
    for index, send in enumerate(sends):
        aggregate = getattr(send.aggregate, "name", None)
        if not isinstance(aggregate, str):
            raise HandlerFailed(f"on_enter of saga {definition.name}: Send.aggregate {send.aggregate!r:.100} "
                                "is not an aggregate handle")
        try:
            check_id(send.aggregate_id, "Send.aggregate_id")
        except RecordError as exc:
            raise HandlerFailed(f"on_enter of saga {definition.name}: {exc}") from exc
        within_ms = every_ms = None
        if send.expect is not None:
            within_ms, every_ms = _expect_ms(definition, send.expect)
        try:
            type_name, payload = encode(send.aggregate, send.command)
        except Exception as exc:
            raise HandlerFailed(f"on_enter of saga {definition.name}: the command {send.command!r:.100} to "
                                f"{aggregate} cannot be sent: {type(exc).__name__}: {exc}") from exc
        record = SagaCommandRecord(
            aggregate=aggregate,
            aggregate_id=send.aggregate_id,
            command_id=saga_command_id(definition.name, saga_id, seq, index),
            type=type_name,
            payload=payload,
            expect_within_ms=within_ms,
            resend_every_ms=every_ms,
        )
        planned.append(PlannedSend(index, send, aggregate, record))
    return tuple(planned)


def _expect_ms(definition: SagaDefinition, expect: Expect) -> tuple[int, int | None]:
    if not isinstance(expect, Expect) or not isinstance(expect.within, timedelta):
        raise HandlerFailed(f"saga {definition.name}: Send.expect must be Expect(within=timedelta, "
                            f"resend_every=timedelta | None), not {expect!r:.100}")
    within = math.ceil(expect.within.total_seconds() * 1000)
    if within <= 0:
        raise HandlerFailed(f"saga {definition.name}: Expect.within must be positive, not {expect.within}")
    every = None
    if expect.resend_every is not None:
        if not isinstance(expect.resend_every, timedelta) or expect.resend_every.total_seconds() <= 0:
            raise HandlerFailed(f"saga {definition.name}: Expect.resend_every must be a positive "
                                f"timedelta or None, not {expect.resend_every!r}")
        every = math.ceil(expect.resend_every.total_seconds() * 1000)
    return within, every


def _expectations(saga: SagaState, now_ms: int) -> tuple[ArmTimer, ...]:
    """The timers of the current state's expectations, counted from its stored entry time."""
    timers = []
    for planned in saga.sends:
        within, every = planned.record.expect_within_ms, planned.record.resend_every_ms
        if within is None:
            continue
        deadline = saga.entered_at_ms + within
        timers.append(ArmTimer(saga.saga_id, saga.seq, planned.index, "deadline", deadline))
        if every is not None:
            # The next multiple of the interval after now (a restart resumes the rhythm).
            elapsed = max(0, now_ms - saga.entered_at_ms)
            due = saga.entered_at_ms + (elapsed // every + 1) * every
            if due < deadline:
                timers.append(ArmTimer(saga.saga_id, saga.seq, planned.index, "resend", due))
    return tuple(timers)


def _envelope(
    saga_id: str, record: SagaCommandRecord, cause: str | None, now_ms: int, replies_topic: str
) -> CommandEnvelope:
    return CommandEnvelope(
        command_id=record.command_id,
        correlation_id=saga_id,
        aggregate_id=record.aggregate_id,
        type=record.type,
        payload=record.payload,
        timestamp_ms=now_ms,
        reply_to=replies_topic,
        causation_id=cause,
        reply_key=saga_id,
    )


def command_envelope(saga_id: str, record: SagaCommandRecord, now_ms: int, replies_topic: str) -> CommandEnvelope:
    """The envelope of a journaled command, to send it again (after a crash cut its send)."""
    return _envelope(saga_id, record, None, now_ms, replies_topic)


def _call(definition: SagaDefinition, what: str, function: Callable[..., Any], *args: Any) -> Any:
    try:
        return function(*args)
    except Exception as exc:
        raise HandlerFailed(f"{what} of saga {definition.name} raised: {type(exc).__name__}: {exc}") from exc


__all__ = [
    "ArmTimer",
    "Expect",
    "ExpectationExhausted",
    "Goto",
    "MAX_CHAIN",
    "PlannedSend",
    "SagaCommand",
    "SagaDefinition",
    "SagaEvent",
    "SagaState",
    "SagaStep",
    "Send",
    "Stay",
    "Stop",
    "TimerFired",
    "command_envelope",
    "feed",
    "fire",
    "recover",
    "restore",
    "saga_command_id",
]

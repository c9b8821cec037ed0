"""Hosting one orchestration instance: journal an event, evaluate, pick new actions. Pure.

The shell (``tidings.shell.kinds.orchestration.agent``) keeps, per instance key, an
``InstanceState`` and the live ``Orchestration`` value (``tidings.coordination``), and
calls ``advance`` for every event routed to the instance:

1. the event is stepped into the orchestration (it becomes journal position
   ``state.sequence + 1``);
2. if it did not finish, the orchestration is evaluated with ``None`` ("no more stored
   events") without keeping that step: another event may still come;
3. the actions of every ``Break`` of both steps, minus those already asked for at the
   previous position (``state.pending``), are the *new* actions of this position;
4. if the event finished it, the last ``Continue`` value of that step is the outcome.

*Journaled:* the event, at ``{instance}/{sequence}``. *Idempotent by:* the source
position (``InstanceState.seen``). *Replay:* feeding the journaled values again gives the
same states, actions and outcome, so a restart recomputes rather than stores them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tidings.coordination import Break, Continue, Coordination
from tidings.core.limits import MAX_VALUE_BYTES
from tidings.core.orchestration_records import Action
from tidings.errors import OrchestrationFailed

Encode = Callable[[Any], tuple[str, bytes]]
"""Turns a user value into (type name, JSON bytes): ``tidings.codec.payload_of``."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The outcome of a finished instance: the last Continue value, encoded, if any."""

    type: str | None = None
    payload: bytes | None = None


@dataclass(frozen=True, slots=True)
class InstanceState:
    """What the host keeps about one instance besides its journal.

    Attributes:
        instance: The instance key.
        sequence: How many events are journaled (the position of the last one).
        sources: ``"{topic}/{partition}"`` -> the last source offset journaled from there.
        pending: The actions of the ``Break`` the instance is waiting on (at ``sequence``).
        finished: Whether an event finished the orchestration; later events are ignored.
    """

    instance: str
    sequence: int = 0
    sources: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    pending: tuple[Action, ...] = ()
    finished: bool = False

    def seen(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the event at this source position is journaled already.

        One source partition's events reach an instance in offset order (one router
        produces them in order to the instance's inbox partition), so a re-routed copy
        always has an offset at or below the last one journaled.
        """
        last = self.sources.get(source_key(topic, partition))
        return last is not None and offset <= last


@dataclass(frozen=True, slots=True)
class Advanced:
    """What one event did to an instance.

    Attributes:
        state: The instance after the event (``state.sequence`` is the event's position).
        orchestration: What takes the next event; None once finished.
        actions: The actions new at this position, in order, without repeats.
        outcome: Set when this event finished the orchestration.
    """

    state: InstanceState
    orchestration: Coordination[Any, Any] | None
    actions: tuple[Action, ...]
    outcome: Finished | None


def source_key(topic: str, partition: int) -> str:
    """Return the key of a source partition in ``InstanceState.sources``."""
    return f"{topic}/{partition}"


def advance(
    state: InstanceState,
    orchestration: Coordination[Any, Any],
    value: Any,
    *,
    source: tuple[str, int, int],
    encode: Encode,
) -> Advanced:
    """Journal ``value`` as the instance's next event and evaluate (see module docstring).

    Args:
        state: The instance before the event; must not be finished.
        orchestration: The instance's live orchestration.
        value: The event's value, as the orchestration sees it.
        source: ``(topic, partition, offset)`` the event was read from.
        encode: Turns actions and the outcome value into (type name, JSON bytes).

    Returns:
        The new state, the next orchestration, the new actions and the outcome.

    Raises:
        OrchestrationFailed: The orchestration raised, or an action or the outcome value
            could not be encoded.
    """
    topic, partition, offset = source
    step = _step(state, orchestration, value)
    results: list[Any] = list(step.results)
    if step.next is not None:
        # Evaluate "no more stored events" to learn what it waits for; the probe's next
        # is dropped, because the next real event must be stepped from step.next.
        results.extend(_step(state, step.next, None).results)
    current = _actions(state, results, encode)
    pending = set(state.pending)
    new = tuple(action for action in current if action not in pending)
    size = sum(len(action.type) + len(action.payload) for action in new)
    if size > MAX_VALUE_BYTES:
        # One actions record: the broker would refuse it at every attempt.
        raise OrchestrationFailed(
            f"instance {state.instance!r} asked for {size:,} bytes of new actions at once; "
            f"the limit is {MAX_VALUE_BYTES:,}"
        )
    outcome = None
    if step.next is None:
        continues = [r for r in step.results if isinstance(r, Continue)]
        outcome = Finished()
        if continues:
            type_, payload = _encode(state, continues[-1].value, encode)
            outcome = Finished(type_, payload)
    sources = dict(state.sources)
    sources[source_key(topic, partition)] = offset
    after = InstanceState(
        state.instance,
        state.sequence + 1,
        MappingProxyType(sources),
        () if step.next is None else current,
        step.next is None,
    )
    return Advanced(after, step.next, new, outcome)


def skip(state: InstanceState, *, sequence: int, source: tuple[str, int, int]) -> InstanceState:
    """Count a journaled event the orchestration can no longer step (its code changed).

    Keeps positions and source offsets in step with the journal; the event is not applied.
    """
    topic, partition, offset = source
    sources = dict(state.sources)
    sources[source_key(topic, partition)] = offset
    return InstanceState(
        state.instance, sequence, MappingProxyType(sources), state.pending, state.finished
    )


def replay(orchestration: Coordination[Any, Any], values: Iterable[Any]) -> Coordination[Any, Any] | None:
    """Step ``orchestration`` with journaled values, oldest first; None once finished.

    Raises:
        OrchestrationFailed: The orchestration raised on a value it once accepted (its code
            changed in a way that is not deterministic over the stored journal).
    """
    current: Coordination[Any, Any] | None = orchestration
    for value in values:
        if current is None:
            break
        try:
            current = current(value).next
        except Exception as exc:
            raise OrchestrationFailed(
                f"replaying the journal failed: {type(exc).__name__}: {exc}"
            ) from exc
    return current


def _step(state: InstanceState, orchestration: Coordination[Any, Any], value: Any) -> Any:
    try:
        return orchestration(value)
    except Exception as exc:
        what = "the end of stored events" if value is None else f"event {state.sequence + 1}"
        raise OrchestrationFailed(
            f"instance {state.instance!r} raised on {what}: {type(exc).__name__}: {exc}"
        ) from exc


def _actions(state: InstanceState, results: list[Any], encode: Encode) -> tuple[Action, ...]:
    seen: set[Action] = set()
    actions: list[Action] = []
    for result in results:
        if not isinstance(result, Break):
            continue
        for value in result.actions:
            action = Action(*_encode(state, value, encode))
            # A zip of branches may ask for the same action twice: once is enough.
            if action not in seen:
                seen.add(action)
                actions.append(action)
    return tuple(actions)


def _encode(state: InstanceState, value: Any, encode: Encode) -> tuple[str, bytes]:
    try:
        type_, payload = encode(value)
    except (TypeError, ValueError) as exc:
        raise OrchestrationFailed(
            f"instance {state.instance!r} gave a value that cannot be stored: {exc}"
        ) from exc
    if len(payload) > MAX_VALUE_BYTES:
        raise OrchestrationFailed(
            f"instance {state.instance!r} gave a value of {len(payload):,} bytes; "
            f"the limit is {MAX_VALUE_BYTES:,}"
        )
    return type_, payload

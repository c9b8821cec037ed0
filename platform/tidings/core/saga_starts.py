"""Which sagas a command's events start, decided before the aggregate stores them.

A saga starts from a stored event its ``start_on`` accepts, once per (saga, correlation
id, aggregate instance) (SPEC §4). The aggregate, not the saga, enforces the "once": it
asks ``saga_starts`` with the events one command would store, and a command that would
start a saga this instance has already started for its correlation id, or whose two
events would start the same saga, is refused with a reason starting
``SagaAlreadyStarted:`` and stores nothing. Refusing before storing is what makes the
rule hold whatever the saga runtime does later: no second starting event ever exists.

Only stored events count: a deferred event (``Defer``) is never stored and starts no
saga, so it is skipped here even if a caller hands one in.

The same starters are run over stored events when the aggregate rebuilds an instance
from its journal (``started_by``), so the pairs an instance has started are known again
after a restart or on the worker that takes its partition over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .records import EventEnvelope

#: The prefix of a refusal's reason; the client maps it to ``SagaAlreadyStarted``.
REFUSAL_PREFIX = "SagaAlreadyStarted:"


class SagaStarter(Protocol):
    """A saga definition as an aggregate sees it: a name and its ``start_on`` test.

    ``starts`` gets a stored event of the aggregate and its decoded payload and says
    whether that event starts the saga (the saga's ``start_on``, bound to this
    aggregate). It is user code: it may raise, and the aggregate treats that as a
    failure of the command.
    """

    @property
    def name(self) -> str: ...

    def starts(self, event: EventEnvelope, value: Any) -> bool: ...


#: "Has this aggregate instance already started saga ``name`` for ``correlation_id``?"
StartedLookup = Callable[[str, str], bool]


@dataclass(frozen=True, slots=True)
class SagaStarts:
    """The (saga name, correlation id) pairs a command's events start, possibly none."""

    pairs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SagaRefusal:
    """The command must store nothing: ``reason`` starts with ``SagaAlreadyStarted:``."""

    reason: str


def check_saga_starts(
    starters: Sequence[SagaStarter],
    events: Iterable[tuple[EventEnvelope, Any]],
    started: StartedLookup,
    *,
    aggregate: str,
) -> SagaStarts | SagaRefusal:
    """Decide whether one command's events may be stored, as far as sagas go.

    Args:
        starters: The sagas that subscribe to this aggregate.
        events: ``(envelope, decoded value)`` of each event the command would store, in
            order; all carry the command's correlation id.
        started: The lookup of pairs this instance has already started (stored ones).
        aggregate: The aggregate's name, for the reason.

    Returns:
        ``SagaStarts`` with the pairs to remember once the events are stored, or a
        ``SagaRefusal`` when a pair was started before or two events start one saga.
    """
    pairs: list[tuple[str, str]] = []
    for envelope, value in events:
        if envelope.deferred:
            continue
        for starter in starters:
            if not starter.starts(envelope, value):
                continue
            pair = (starter.name, envelope.correlation_id)
            if pair in pairs:
                return SagaRefusal(
                    f"{REFUSAL_PREFIX} two events of command {_show(envelope.command_id)} would "
                    f"start saga {starter.name!r} for correlation id "
                    f"{_show(envelope.correlation_id)} on {aggregate} "
                    f"{_show(envelope.aggregate_id)}; a saga starts once per correlation id"
                )
            if started(*pair):
                return SagaRefusal(
                    f"{REFUSAL_PREFIX} {aggregate} {_show(envelope.aggregate_id)} already "
                    f"started saga {starter.name!r} for correlation id "
                    f"{_show(envelope.correlation_id)}; send with another correlation id"
                )
            pairs.append(pair)
    return SagaStarts(tuple(pairs))


def started_by(
    starters: Sequence[SagaStarter], event: EventEnvelope, value: Any
) -> tuple[tuple[str, str], ...]:
    """The pairs one stored event started, for rebuilding an instance from its journal.

    The journal holds only events that passed ``check_saga_starts`` (or were written by
    another producer, which the aggregate cannot refuse after the fact): every pair an
    accepted ``starts`` names is remembered, a repeat included.
    """
    if event.deferred:
        return ()
    return tuple(
        (starter.name, event.correlation_id) for starter in starters if starter.starts(event, value)
    )


def _show(text: str) -> str:
    # Ids are outside input of up to 255 bytes: enough of one to recognise it.
    return repr(text if len(text) <= 80 else text[:77] + "...")


__all__ = [
    "REFUSAL_PREFIX",
    "SagaRefusal",
    "SagaStarter",
    "SagaStarts",
    "StartedLookup",
    "check_saga_starts",
    "started_by",
]

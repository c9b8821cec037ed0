"""Debounce, and ``elapsed``: a quiet period measured by the time events carry.

A coordination never reads a clock. Time reaches it the way everything else does, as events:
either events that carry their own timestamp (see :func:`elapsed`), or, in an orchestration,
a timer event the runtime stores when a requested timer fires. The quiet period of
``debounce(duration)`` is therefore just another coordination, ``duration(value)``, whose
first result ends it, and the operator is tested by feeding events, without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from tidings.coordination.coordination import Coordination
from tidings.coordination.step import Step

E = TypeVar("E")
T = TypeVar("T")
Instant = TypeVar("Instant", datetime, float)


@dataclass(frozen=True, slots=True)
class DebouncePolicy:
    """How debounce reads the items of its source and of the quiet-period coordinations.

    Attributes:
        value_of: The value of a source item to debounce, or ``passthrough`` for an item that
            is emitted at once (an orchestration's ``Break``).
        ends_quiet: Whether an item of a quiet-period coordination ends the quiet period;
            other items are emitted at once (the actions an orchestration's timer needs).
    """

    value_of: Callable[[Any], Any]
    ends_quiet: Callable[[Any], bool]


class _Passthrough:
    __slots__ = ()


PASSTHROUGH: Final = _Passthrough()

PLAIN: Final = DebouncePolicy(value_of=lambda item: item, ends_quiet=lambda item: True)


# The pending item: the source item to emit once quiet, and the coordination that ends the
# quiet period (None when that one finished without a result: then only a newer item or the
# source's completion releases it).
_Pending = tuple[Any, "Coordination[Any, Any] | None"]


class Debounced(Coordination[E, T]):
    """``source.debounce(duration)``."""

    __slots__ = ("_source", "_duration", "_pending", "_policy")

    def __init__(
        self,
        source: Coordination[E, T],
        duration: Callable[[Any], Coordination[Any, Any]],
        pending: _Pending | None,
        policy: DebouncePolicy,
    ) -> None:
        self._source = source
        self._duration = duration
        self._pending = pending
        self._policy = policy

    def __call__(self, event: E) -> Step[E, T]:
        out: list[Any] = []
        pending = self._pending
        # The running quiet period sees the event before any newer item does, so it wins a tie:
        # an event that both ends the quiet period and brings a newer item emits the older one.
        if pending is not None and pending[1] is not None:
            pending = self._wait(pending[0], pending[1], event, out)
        step = self._source(event)
        for item in step.results:
            value = self._policy.value_of(item)
            if value is PASSTHROUGH:
                out.append(item)
                continue
            # A newer item replaces the pending one; its quiet period starts on this event.
            pending = self._wait(item, self._duration(value), event, out)
        if step.next is not None:
            return Step(out, Debounced(step.next, self._duration, pending, self._policy))
        # None is the end of the events stored so far, not the end of the source: flushing
        # would emit a value whose quiet period may still be interrupted by a later event.
        if pending is not None and event is not None:
            out.append(pending[0])
        return Step(out, None)

    def _wait(
        self, item: Any, quiet: Coordination[Any, Any], event: Any, out: list[Any]
    ) -> _Pending | None:
        """Step the quiet period of ``item``; emit ``item`` into ``out`` if it ended."""
        step = quiet(event)
        for result in step.results:
            if self._policy.ends_quiet(result):
                out.append(item)
                return None
            out.append(result)
        return (item, step.next)


class _Elapsed(Coordination[E, Instant]):
    __slots__ = ("_duration", "_clock", "_start")

    def __init__(
        self, duration: Any, clock: Callable[[E], Instant | None], start: Instant | None
    ) -> None:
        self._duration = duration
        self._clock: Callable[[E], Instant | None] = clock
        self._start: Instant | None = start

    def __call__(self, event: E) -> Step[E, Instant]:
        now = self._clock(event)
        if now is None:
            return Step([], self)
        start = now if self._start is None else self._start
        if now - start >= self._duration:  # type: ignore[operator]
            return Step([now], None)
        return Step([], _Elapsed(self._duration, self._clock, start))


def elapsed(
    duration: timedelta | float, *, clock: Callable[[E], datetime | float | None]
) -> Coordination[E, Any]:
    """Return a coordination that emits once ``duration`` has passed, as told by events.

    The first event with a time starts the period; the first event whose time is at least
    ``duration`` later emits that time and finishes. Use it as a debounce quiet period:
    ``c.debounce(lambda _: elapsed(timedelta(minutes=5), clock=lambda e: e.at))``; a
    ``duration`` of zero ends the period on the event that started it.

    Args:
        duration: How long; a ``timedelta`` for ``datetime`` clocks, a number for numbers.
        clock: The time an event carries, or ``None`` for an event without one.
    """
    return _Elapsed(duration, clock, None)

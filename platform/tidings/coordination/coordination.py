"""The Coordination type, its operator methods, and the simplest constructors.

A coordination is an immutable value: applying an event returns a :class:`Step` holding the
results and a *new* coordination for the next event. Nothing is mutated, so a coordination can
be applied to the same event twice, or to two different continuations of a stream, and feeding
a prefix and then the rest gives exactly what feeding everything at once gives.

Every node steps its children with a bounded number of Python frames: the call depth of one
step depends on how the coordination was composed, never on how many events it has seen.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from tidings.coordination.step import Step

E = TypeVar("E")
T = TypeVar("T")
U = TypeVar("U")


class Coordination(ABC, Generic[E, T]):
    """A reactive, immutable state machine over events: ``c(event) -> Step(results, next)``.

    Subclasses implement :meth:`__call__`; everything else is built on it. Operator methods
    return new coordinations and never change ``self``.
    """

    __slots__ = ()

    @abstractmethod
    def __call__(self, event: E) -> Step[E, T]:
        """Apply one event.

        Args:
            event: The event.

        Returns:
            The results this event produced and the coordination for the next event
            (``None`` when finished).
        """

    # -- running -----------------------------------------------------------------------------

    def feed(self, events: Iterable[E]) -> Step[E, T]:
        """Apply events in turn and return the last step.

        A finished coordination ignores the remaining events: the returned step is the one that
        finished it. With no events at all the result is ``Step([], self)``.

        Args:
            events: The events, oldest first.

        Returns:
            The last step taken.
        """
        last: Step[E, T] = Step([], self)
        for step in self.steps(events):
            last = step
        return last

    def steps(self, events: Iterable[E]) -> Iterator[Step[E, T]]:
        """Apply events in turn, yielding every step, and stop once finished.

        Args:
            events: The events, oldest first.

        Yields:
            One step per event applied.
        """
        current: Coordination[E, T] | None = self
        for event_ in events:
            if current is None:
                return
            step = current(event_)
            yield step
            current = step.next

    def collect(self, events: Iterable[E]) -> list[T]:
        """Apply events in turn and return every result of every step, in order.

        Args:
            events: The events, oldest first.

        Returns:
            All results, flattened across steps.
        """
        return [result for step in self.steps(events) for result in step.results]

    # -- hooks for subclasses ------------------------------------------------------------------

    def _like(self, node: Coordination[Any, Any]) -> Any:
        """Give an operator that keeps results unchanged the same kind as ``self``.

        :class:`~tidings.coordination.orchestration.Orchestration` overrides this so that,
        for example, ``orchestration.take(1)`` is still an Orchestration.
        """
        return node

    # -- operators -----------------------------------------------------------------------------

    def map(self, f: Callable[[T], U]) -> Coordination[E, U]:
        """Transform every result with ``f``."""
        return ops.Mapped(self, f)

    def filter(self, predicate: Callable[[T], bool]) -> Coordination[E, T]:
        """Keep only the results for which ``predicate`` is true."""
        return self._like(ops.Filtered(self, predicate))

    def choose(self, chooser: Callable[[T], U | None]) -> Coordination[E, U]:
        """Map and filter at once: keep ``chooser(result)`` unless it is ``None``."""
        return ops.Chosen(self, chooser)

    def take(self, count: int) -> Coordination[E, T]:
        """Keep the first ``count`` results and finish on the step of the ``count``-th.

        Args:
            count: How many results to keep; ``0`` finishes on the first event.

        Raises:
            ValueError: If ``count`` is negative.
        """
        if count < 0:
            raise ValueError(f"take needs a count >= 0, got {count}")
        return self._like(ops.Taken(self, count))

    def take_while(self, predicate: Callable[[T], bool]) -> Coordination[E, T]:
        """Keep results while ``predicate`` holds; the first failing result finishes it.

        The failing result and every later result of the same step are dropped.
        """
        return self._like(ops.TakenWhile(self, predicate))

    def distinct_until_changed(self) -> Coordination[E, T]:
        """Drop each result equal (``==``) to the result emitted just before it."""
        return self._like(ops.Distinct(self, ops.NOTHING))

    def switch_map(self, f: Callable[[T], Coordination[E, U]]) -> Coordination[E, U]:
        """Run ``f(result)`` as the inner coordination, dropping the previous inner.

        The new inner receives the event that produced it. When one step yields several
        results, only the last one's inner runs.
        """
        return ops.Switched(self, f, None)

    def merge_map(self, f: Callable[[T], Coordination[E, U]]) -> Coordination[E, U]:
        """Run every ``f(result)`` concurrently and emit all their results.

        Each new inner receives the event that produced it; on every step older inners'
        results come before newer ones'.
        """
        return ops.Flattened(self, f, ops.MERGE)

    def concat_map(self, f: Callable[[T], Coordination[E, U]]) -> Coordination[E, U]:
        """Run every ``f(result)``, releasing an inner's results only after earlier inners finish.

        As in the reference (and unlike RxJS), a later inner runs from the event that produced
        it; only its output is held back, and released when the inners before it finish.
        """
        return ops.Flattened(self, f, ops.CONCAT)

    def exhaust_map(self, f: Callable[[T], Coordination[E, U]]) -> Coordination[E, U]:
        """Run every ``f(result)``, dropping a later inner's output while an earlier one runs.

        As in the reference (and unlike RxJS), a later inner runs from the event that produced
        it; once every earlier inner has finished, its results are emitted from then on.
        """
        return ops.Flattened(self, f, ops.EXHAUST)

    def take_until(self, notifier: Coordination[E, Any]) -> Coordination[E, T]:
        """Emit results until ``notifier`` produces its first result, then finish.

        The notifier wins a tie: on the event where it first produces a result, this
        coordination's own results are dropped. A notifier that finishes without a result
        never stops the source.
        """
        return self._like(ops.TakenUntil(self, notifier))

    def debounce(self, duration: Callable[[T], Coordination[Any, Any]]) -> Coordination[E, T]:
        """Emit a result only once a quiet period follows it with no newer result.

        ``duration(result)`` is the coordination whose first result ends the quiet period for
        that result (time is told by events; see :func:`~tidings.coordination.elapsed`). It
        starts on the event that produced the result, and wins a tie against a newer result on
        the same event. When the source finishes, the pending result is emitted, except when
        the finishing event is ``None`` (the end of stored events, not a real completion).
        """
        return self._like(debounce_.Debounced(self, duration, None, debounce_.PLAIN))


# -- constructors ------------------------------------------------------------------------------


class _Returned(Coordination[Any, T]):
    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def __call__(self, event: Any) -> Step[Any, T]:
        return Step([self._value], None)


class _Empty(Coordination[Any, Any]):
    __slots__ = ()

    def __call__(self, event: Any) -> Step[Any, Any]:
        return Step([], None)


class _Event(Coordination[E, T]):
    __slots__ = ("_chooser",)

    def __init__(self, chooser: Callable[[E], T | None]) -> None:
        self._chooser = chooser

    def __call__(self, event: E) -> Step[E, T]:
        chosen = self._chooser(event)
        return Step([] if chosen is None else [chosen], self)


class _Appended(Coordination[E, T]):
    __slots__ = ("_first", "_second")

    def __init__(self, first: Coordination[E, T], second: Coordination[E, T]) -> None:
        self._first = first
        self._second = second

    def __call__(self, event: E) -> Step[E, T]:
        step = self._first(event)
        if step.next is not None:
            return Step(step.results, _Appended(step.next, self._second))
        # The second starts on the event that finished the first, as the reference's Combine.
        after = self._second(event)
        return Step(step.results + after.results, after.next)


def retn(value: T) -> Coordination[Any, T]:
    """Return a coordination that emits ``value`` on the first event and finishes.

    Args:
        value: The value to emit.
    """
    return _Returned(value)


_EMPTY: Coordination[Any, Any] = _Empty()


def empty() -> Coordination[Any, Any]:
    """Return a coordination that finishes on the first event with no result."""
    return _EMPTY


def event(chooser: Callable[[E], T | None]) -> Coordination[E, T]:
    """Return a coordination that never finishes and emits ``chooser(e)`` for each event.

    Args:
        chooser: Returns the result for an event, or ``None`` for "nothing".
    """
    return _Event(chooser)


def append(first: Coordination[E, T], second: Coordination[E, T]) -> Coordination[E, T]:
    """Run ``first`` to completion, then ``second``, starting on the event that finished ``first``.

    Args:
        first: The coordination to run first.
        second: The coordination to run once ``first`` has finished.
    """
    return _Appended(first, second)


# Imported last: the operator nodes subclass Coordination, defined above.
from tidings.coordination import debounce as debounce_  # noqa: E402
from tidings.coordination import operators as ops  # noqa: E402

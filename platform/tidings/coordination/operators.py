"""The operator nodes behind the methods of :class:`Coordination`.

Each node is immutable: stepping it builds a new node for the next event. Nodes that hold a
varying number of children (merge, concat, exhaust) keep them in a flat tuple and step them in a
loop, so that neither the call depth nor the nesting of nodes grows with the number of events.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, Final, TypeVar

from tidings.coordination.coordination import Coordination
from tidings.coordination.step import Step

E = TypeVar("E")
T = TypeVar("T")
U = TypeVar("U")


class _Nothing:
    """Marks "no value yet" where ``None`` is a legitimate value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOTHING"


NOTHING: Final = _Nothing()


class Mapped(Coordination[E, U]):
    """``source.map(f)``."""

    __slots__ = ("_source", "_f")

    def __init__(self, source: Coordination[E, T], f: Callable[[T], U]) -> None:
        self._source = source
        self._f = f

    def __call__(self, event: E) -> Step[E, U]:
        step = self._source(event)
        f = self._f
        return Step(
            [f(result) for result in step.results],
            None if step.next is None else Mapped(step.next, f),
        )


class Filtered(Coordination[E, T]):
    """``source.filter(predicate)``."""

    __slots__ = ("_source", "_predicate")

    def __init__(self, source: Coordination[E, T], predicate: Callable[[T], bool]) -> None:
        self._source = source
        self._predicate = predicate

    def __call__(self, event: E) -> Step[E, T]:
        step = self._source(event)
        predicate = self._predicate
        return Step(
            [result for result in step.results if predicate(result)],
            None if step.next is None else Filtered(step.next, predicate),
        )


class Chosen(Coordination[E, U]):
    """``source.choose(chooser)``."""

    __slots__ = ("_source", "_chooser")

    def __init__(self, source: Coordination[E, T], chooser: Callable[[T], U | None]) -> None:
        self._source = source
        self._chooser = chooser

    def __call__(self, event: E) -> Step[E, U]:
        step = self._source(event)
        chooser = self._chooser
        chosen = [chooser(result) for result in step.results]
        return Step(
            [value for value in chosen if value is not None],
            None if step.next is None else Chosen(step.next, chooser),
        )


class Taken(Coordination[E, T]):
    """``source.take(count)``: finishes on the step of the ``count``-th result."""

    __slots__ = ("_source", "_count")

    def __init__(self, source: Coordination[E, T], count: int) -> None:
        self._source = source
        self._count = count

    def __call__(self, event: E) -> Step[E, T]:
        step = self._source(event)
        kept = step.results[: self._count]
        left = self._count - len(kept)
        if left <= 0 or step.next is None:
            return Step(kept, None)
        return Step(kept, Taken(step.next, left))


class TakenWhile(Coordination[E, T]):
    """``source.take_while(predicate)``: the first failing result ends it, with its step."""

    __slots__ = ("_source", "_predicate")

    def __init__(self, source: Coordination[E, T], predicate: Callable[[T], bool]) -> None:
        self._source = source
        self._predicate = predicate

    def __call__(self, event: E) -> Step[E, T]:
        step = self._source(event)
        kept: list[T] = []
        for result in step.results:
            if not self._predicate(result):
                return Step(kept, None)
            kept.append(result)
        return Step(kept, None if step.next is None else TakenWhile(step.next, self._predicate))


class Distinct(Coordination[E, T]):
    """``source.distinct_until_changed()``: compares each result with the one emitted before."""

    __slots__ = ("_source", "_last")

    def __init__(self, source: Coordination[E, T], last: Any) -> None:
        self._source = source
        self._last = last

    def __call__(self, event: E) -> Step[E, T]:
        step = self._source(event)
        last = self._last
        kept: list[T] = []
        for result in step.results:
            # Within one step too, only consecutive duplicates go (the reference removed every
            # duplicate of the step, so [1, 2, 1] in one step lost its second 1).
            if last is NOTHING or result != last:
                kept.append(result)
                last = result
        return Step(kept, None if step.next is None else Distinct(step.next, last))


class Switched(Coordination[E, U]):
    """``source.switch_map(f)`` with ``current`` the running inner, if any."""

    __slots__ = ("_source", "_f", "_current")

    def __init__(
        self,
        source: Coordination[E, T],
        f: Callable[[T], Coordination[E, U]],
        current: Coordination[E, U] | None,
    ) -> None:
        self._source = source
        self._f = f
        self._current = current

    def __call__(self, event: E) -> Step[E, U]:
        outer = self._source(event)
        if outer.results:
            # Only the last inner of the step runs, and it runs on this very event; the
            # previous inner is dropped without seeing it.
            inner = self._f(outer.results[-1])(event)
        elif self._current is not None:
            inner = self._current(event)
        elif outer.next is None:
            return Step([], None)
        else:
            return Step([], Switched(outer.next, self._f, None))
        if outer.next is None:
            # The source is done: the inner is all that is left, so hand it over unwrapped.
            return inner
        return Step(inner.results, Switched(outer.next, self._f, inner.next))


class FlattenMode(Enum):
    """How :class:`Flattened` releases the results of concurrently running inners."""

    MERGE = "merge"
    CONCAT = "concat"
    EXHAUST = "exhaust"


MERGE: Final = FlattenMode.MERGE
CONCAT: Final = FlattenMode.CONCAT
EXHAUST: Final = FlattenMode.EXHAUST

# An inner of a flatten: the coordination still running (None once finished) and the results
# it produced that have not been released yet (only concat holds results back).
_Inner = tuple["Coordination[Any, Any] | None", tuple[Any, ...]]


class Flattened(Coordination[E, U]):
    """``merge_map``, ``concat_map`` and ``exhaust_map``: inners kept oldest first."""

    __slots__ = ("_source", "_f", "_mode", "_inners")

    def __init__(
        self,
        source: Coordination[E, T] | None,
        f: Callable[[T], Coordination[E, U]],
        mode: FlattenMode,
        inners: tuple[_Inner, ...] = (),
    ) -> None:
        self._source = source
        self._f = f
        self._mode = mode
        self._inners = inners

    def __call__(self, event: E) -> Step[E, U]:
        stepped: list[_Inner] = []
        for coordination, held in self._inners:
            if coordination is None:
                stepped.append((coordination, held))
                continue
            step = coordination(event)
            stepped.append((step.next, held + tuple(step.results) if step.results else held))
        source = self._source
        if source is not None:
            outer = source(event)
            for value in outer.results:
                # A new inner starts on the event that produced it.
                step = self._f(value)(event)
                stepped.append((step.next, tuple(step.results)))
            source = outer.next
        released, kept = _release(self._mode, stepped)
        if source is None and not kept:
            return Step(released, None)
        return Step(released, Flattened(source, self._f, self._mode, tuple(kept)))


def _release(mode: FlattenMode, inners: list[_Inner]) -> tuple[list[Any], list[_Inner]]:
    """Split the inners' results into those emitted now and the inners kept for later."""
    released: list[Any] = []
    if mode is MERGE:
        for _, held in inners:
            released.extend(held)
        return released, [(c, ()) for c, _ in inners if c is not None]
    # Concat and exhaust both release the leading run of finished inners, then the first
    # inner still running; they differ in what happens to the inners behind it.
    index = 0
    while index < len(inners):
        coordination, held = inners[index]
        released.extend(held)
        index += 1
        if coordination is not None:
            break
    else:
        return released, []
    head = (inners[index - 1][0], ())
    rest = inners[index:]
    if mode is CONCAT:
        # Later inners keep running with their output held; finished ones wait for their turn.
        return released, [head, *rest]
    # Exhaust: output of later inners is dropped while an earlier one runs.
    return released, [head, *((c, ()) for c, _ in rest if c is not None)]


class TakenUntil(Coordination[E, T]):
    """``source.take_until(notifier)``."""

    __slots__ = ("_source", "_notifier")

    def __init__(self, source: Coordination[E, T], notifier: Coordination[E, Any]) -> None:
        self._source = source
        self._notifier = notifier

    def __call__(self, event: E) -> Step[E, T]:
        signal = self._notifier(event)
        if signal.results:
            return Step([], None)
        step = self._source(event)
        if step.next is None or signal.next is None:
            # A notifier that finished without a result can never stop the source.
            return step
        return Step(step.results, TakenUntil(step.next, signal.next))

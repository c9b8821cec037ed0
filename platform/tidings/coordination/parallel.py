"""Coordinations that run side by side: ``zip`` and ``both`` (the builder's let! ... and!)."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, Final, TypeVar, overload

from tidings.coordination.coordination import Coordination
from tidings.coordination.step import Step

E = TypeVar("E")
A = TypeVar("A")
B = TypeVar("B")

# What a finishing zip makes of the results still waiting for a partner (one tuple per side).
Leftovers = Callable[[tuple[tuple[Any, ...], ...]], list[Any]]
# How a zip turns one result of each side into its own result.
Combine = Callable[[tuple[Any, ...]], Any]


def _drop(_: tuple[tuple[Any, ...], ...]) -> list[Any]:
    return []


def _as_tuple(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return values


DROP: Final[Leftovers] = _drop
AS_TUPLE: Final[Combine] = _as_tuple


class Zipped(Coordination[E, Any]):
    """Pairs the sides' results first in, first out.

    A side that is ahead keeps its extra results in a buffer. The zip finishes as soon as one
    side has finished with nothing left in its buffer: no tuple can be completed any more.
    """

    __slots__ = ("_sides", "_buffers", "_combine", "_leftovers")

    def __init__(
        self,
        sides: tuple[Coordination[E, Any] | None, ...],
        buffers: tuple[tuple[Any, ...], ...],
        combine: Combine,
        leftovers: Leftovers,
    ) -> None:
        self._sides = sides
        self._buffers = buffers
        self._combine = combine
        self._leftovers = leftovers

    def __call__(self, event: E) -> Step[E, Any]:
        sides: list[Coordination[E, Any] | None] = []
        buffers: list[tuple[Any, ...]] = []
        for side, buffer in builtins.zip(self._sides, self._buffers):
            if side is None:
                sides.append(None)
                buffers.append(buffer)
                continue
            step = side(event)
            sides.append(step.next)
            buffers.append(buffer + tuple(step.results) if step.results else buffer)
        ready = min(len(buffer) for buffer in buffers)
        results = [
            self._combine(tuple(buffer[index] for buffer in buffers)) for index in range(ready)
        ]
        if ready:
            buffers = [buffer[ready:] for buffer in buffers]
        if any(side is None and not buffer for side, buffer in builtins.zip(sides, buffers)):
            return Step(results + self._leftovers(tuple(buffers)), None)
        return Step(results, Zipped(tuple(sides), tuple(buffers), self._combine, self._leftovers))


def zipped(
    coordinations: tuple[Coordination[E, Any], ...],
    *,
    combine: Combine = AS_TUPLE,
    leftovers: Leftovers = DROP,
) -> Zipped[E]:
    """Build a :class:`Zipped` over ``coordinations``; the hook for orchestrations."""
    return Zipped(
        tuple(coordinations), tuple(() for _ in coordinations), combine, leftovers
    )


@overload
def zip(
    first: Coordination[E, A], second: Coordination[E, B], /
) -> Coordination[E, tuple[A, B]]: ...


@overload
def zip(
    first: Coordination[E, Any], second: Coordination[E, Any], /, *more: Coordination[E, Any]
) -> Coordination[E, tuple[Any, ...]]: ...


def zip(  # noqa: A001 - the SPEC's name; the builtin stays reachable as builtins.zip
    first: Coordination[E, Any], second: Coordination[E, Any], /, *more: Coordination[E, Any]
) -> Coordination[E, tuple[Any, ...]]:
    """Pair the results of coordinations running side by side, first in, first out.

    The n-th result of the zip is the tuple of every side's n-th result, emitted on the step
    where the last of them arrives. The zip finishes when a side has finished and every result
    it produced has been paired. Zipping orchestrations gives an orchestration: see
    :func:`tidings.coordination.orchestration.zip_orchestrations`.

    Args:
        first: The first side.
        second: The second side.
        *more: Further sides.

    Returns:
        A coordination of tuples, in argument order.
    """
    sides = (first, second, *more)
    # Imported here: orchestrations are built on zips, so the import would be circular.
    from tidings.coordination.orchestration import all_orchestrations, zip_orchestrations

    if all_orchestrations(sides):
        return zip_orchestrations(sides)
    return zipped(sides)


def both(first: Coordination[E, Any], /, *more: Coordination[E, Any]) -> Coordination[E, Any]:
    """Wait for the first result of each coordination, in any order, and emit them as a tuple.

    This is the builder's ``let! ... and! ...``: ``a, b = yield both(c1, c2)``. Only the first
    result of each side counts. The tuple is in argument order and is emitted on the event
    where the last side produces its first result; if a side finishes without a result,
    ``both`` finishes without one. With orchestrations it is an orchestration: all
    ``Continue`` values give ``Continue(tuple)``, otherwise one ``Break`` lists every action
    of every waiting side, in argument order.

    Args:
        first: The first coordination.
        *more: The others.

    Returns:
        A coordination that emits one tuple and finishes.
    """
    sides = tuple(side.take(1) for side in (first, *more))
    # Imported here: orchestrations are built on zips, so the import would be circular.
    from tidings.coordination.orchestration import all_orchestrations, zip_orchestrations

    if all_orchestrations(sides):
        return zip_orchestrations(sides)
    return zipped(sides)

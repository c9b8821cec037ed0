"""Coordinations stay usable over long event streams.

Stepping must not grow the Python stack with the number of events: each test feeds far more
events than CPython's default recursion limit (1,000 frames) allows for per-event nesting.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from typing import Any

import pytest

from tidings.coordination import (
    Coordination,
    both,
    coordination,
    emit,
    emit_from,
    event,
    orchestrate,
    orchestration,
)

EVENTS = 5_000


@pytest.fixture(autouse=True)
def _default_recursion_limit() -> Generator[None, None, None]:
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000)
    yield
    sys.setrecursionlimit(previous)


def numbers() -> Coordination[int, int]:
    return event(lambda e: e)


def test_merge_map_of_inners_that_finish_later() -> None:
    c = numbers().merge_map(lambda x: event(lambda e, x=x: x if e == x + 1 else None).take(1))
    assert c.collect(range(EVENTS)) == list(range(EVENTS - 1))


@pytest.mark.parametrize("method", ["concat_map", "exhaust_map"])
def test_flattening_operators_over_many_inners(method: str) -> None:
    c = getattr(numbers(), method)(
        lambda x: event(lambda e, x=x: x if e == x + 1 else None).take(1)
    )
    results = c.collect(range(EVENTS))
    assert len(results) == EVENTS - 1


def test_switch_map_over_many_inners() -> None:
    c = numbers().switch_map(lambda x: event(lambda e, x=x: x if e >= x else None))
    assert c.collect(range(EVENTS)) == list(range(EVENTS))


def test_a_chain_of_operators_over_many_events() -> None:
    c = (
        numbers()
        .map(lambda x: x // 2)
        .distinct_until_changed()
        .filter(lambda x: x % 3 == 0)
        .take_until(event(lambda e: None))
        .debounce(lambda _: event(lambda e: True))
    )
    assert c.collect(range(EVENTS)) == list(range(0, EVENTS // 2, 3))


def test_a_looping_body_over_many_events() -> None:
    @coordination
    def pairs() -> Generator[Any, Any, Any]:
        while True:
            odd = yield event(lambda e: e if e % 2 else None)
            yield event(lambda e: True if e % 2 == 0 else None)
            yield emit(odd)

    assert pairs().collect(range(EVENTS)) == list(range(1, EVENTS - 1, 2))


def test_a_body_recursing_through_a_tail_yield_bang() -> None:
    @coordination
    def count_from(n: int) -> Generator[Any, Any, Any]:
        yield event(lambda e: True if e == n else None)
        yield emit(n)
        yield emit_from(count_from(n + 1))

    assert count_from(0).collect(range(EVENTS)) == list(range(EVENTS))


def test_a_body_emitting_many_values_on_one_event() -> None:
    @coordination
    def burst() -> Generator[Any, Any, Any]:
        for n in range(EVENTS):
            yield emit(n)

    assert burst()(None).results == list(range(EVENTS))


def test_an_orchestration_over_many_stored_events() -> None:
    @orchestration
    def steps() -> Generator[Any, Any, Any]:
        total = 0
        while True:
            a, b = yield both(
                orchestrate(event(lambda e: e if e % 3 == 1 else None), ["ask a"]),
                orchestrate(event(lambda e: e if e % 3 == 2 else None), ["ask b"]),
            )
            total += a + b
            yield orchestrate(event(lambda e: True if e % 3 == 0 else None), ["ask c"])
            if total > 10**12:
                return total

    step = steps().feed([*range(1, EVENTS), None])
    assert step.next is None
    assert len(step.results) == 1

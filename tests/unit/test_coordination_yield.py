"""The reference's YieldTests (OrchestrationCE), ported to the ``@coordination`` builder.

``yield v`` is ``yield emit(v)``, ``yield! c`` is ``yield emit_from(c)``, ``let! x = c`` is
``x = yield c``. The reference's ``Event1``/``Event2`` are the strings ``"E1"``/``"E2"``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tidings.coordination import coordination, emit, emit_from, event
from tidings.errors import DefinitionError

Body = Generator[Any, Any, Any]


def when(wanted: str, value: int) -> Any:
    return event(lambda e: value if e == wanted else None)


def test_1_yields_come_out_on_the_first_event() -> None:
    @coordination
    def coord() -> Body:
        yield emit(1)
        yield emit(2)
        yield emit(3)

    assert coord()(None).results == [1, 2, 3]


def test_2_yield_bang_of_an_event_that_matches() -> None:
    @coordination
    def coord() -> Body:
        yield emit(1)
        yield emit(2)
        yield emit_from(when("E1", 3))

    assert coord()("E1").results == [1, 2, 3]


def test_3_yield_bang_of_an_event_that_does_not_match() -> None:
    @coordination
    def coord() -> Body:
        yield emit(1)
        yield emit(2)
        yield emit_from(when("E1", 3))

    assert coord()("E2").results == [1, 2]


def test_4_what_follows_an_unfinished_yield_bang_waits() -> None:
    @coordination
    def coord() -> Body:
        yield emit(1)
        yield emit_from(when("E1", 2))
        yield emit(3)

    assert coord()("E2").results == [1]


def test_5_what_follows_a_finished_yield_bang_runs_on_the_same_event() -> None:
    @coordination
    def coord() -> Body:
        yield emit(1)
        yield emit_from(when("E2", 2).take(1))
        yield emit(3)

    assert coord()("E2").results == [1, 2, 3]


def test_6_let_bang_then_yields_then_return() -> None:
    @coordination
    def coord() -> Body:
        x = yield when("E1", 4)
        yield emit(1)
        yield emit_from(when("E2", 2).take(1))
        yield emit(3)
        return x

    assert coord()("E2").results == []
    assert coord()("E1").results == [1]
    first = coord()("E1")
    assert first.next is not None
    assert first.next("E2").results == [2, 3, 4]


def test_7_take_while_then_take_one() -> None:
    @coordination
    def coord() -> Body:
        yield emit_from(event(lambda e: e).take_while(lambda x: not x))
        yield emit_from(event(lambda e: e).take_while(lambda x: x is True).take(1))

    result = coord()(True)
    assert result.results == [True] and result.next is None
    result2 = coord()(False)
    assert result2.results == [False] and result2.next is not None


def test_8_take_while_then_take_one_over_several_events() -> None:
    @coordination
    def coord() -> Body:
        yield emit_from(event(lambda e: e).take_while(lambda x: not x))
        yield emit_from(event(lambda e: e).take_while(lambda x: x is True).take(1))

    result = coord()(True)
    assert result.results == [True] and result.next is None
    result2 = coord()(False)
    assert result2.results == [False] and result2.next is not None
    result3 = result2.next(False)
    assert result3.results == [False] and result3.next is not None
    result4 = result3.next(True)
    assert result4.results == [True] and result4.next is None


# -- beyond the reference ----------------------------------------------------------------------


def test_reaching_the_end_of_the_body_finishes_without_a_result() -> None:
    @coordination
    def coord() -> Body:
        yield when("E1", 1)

    step = coord()("E1")
    assert step.results == [] and step.next is None


def test_return_none_is_no_result_but_emit_none_is_one() -> None:
    @coordination
    def coord() -> Body:
        yield emit(None)
        return None

    assert coord()("E1").results == [None]


def test_a_function_that_is_not_a_generator_is_rejected_when_decorated() -> None:
    with pytest.raises(DefinitionError, match="generator function"):

        @coordination
        def coord() -> int:  # type: ignore[misc]
            return 1


def test_yielding_something_else_says_what_to_yield() -> None:
    @coordination
    def coord() -> Body:
        yield 3

    with pytest.raises(TypeError, match="emit"):
        coord()("E1")


def test_factory_arguments_reach_the_body() -> None:
    @coordination
    def coord(wanted: str, value: int) -> Body:
        return (yield when(wanted, value))

    assert coord("E2", 7).collect(["E1", "E2"]) == [7]


def test_a_step_taken_twice_from_the_same_state_gives_the_same_result() -> None:
    @coordination
    def coord() -> Body:
        total = 0
        while True:
            total += yield event(lambda e: e if e > 0 else None)
            # A let! sees the event that resumed the body, so the next wait is for a
            # different event (a 0), or the loop would take the same number for ever.
            yield event(lambda e: True if e == 0 else None)
            yield emit(total)

    start = coord().feed([1, 0])
    assert start.next is not None
    assert start.next(10).next(0).results == [11]
    assert start.next(20).next(0).results == [21]  # a second branch from the same state
    assert start.next(10).next(0).results == [11]
